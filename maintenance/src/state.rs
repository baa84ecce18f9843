//! State several gateways share, in a PostgreSQL database (`[state] uri`; the catalog's own
//! PostgreSQL will do): the maintenance leader lease, per-table locks, and the operations and
//! query history every replica writes, so any replica's console shows the whole estate.
//!
//! Leases are rows with an expiry (`lakegate_leases`), taken and renewed by one atomic
//! `INSERT … ON CONFLICT … WHERE the holder is me or the lease has expired` against the
//! database's own clock (replicas' clocks never compare). A row, not an advisory lock: it
//! survives a connection pooler in transaction mode, anyone can read who holds what and until
//! when, and a holder that stops renewing — killed, partitioned, stalled — loses it after the
//! lease time whatever its connections do. The price is that takeover waits for the expiry.

use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use sqlx::postgres::{PgPool, PgPoolOptions};

use crate::error::{Error, Result};

/// `[state]`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct StateConfig {
    /// `postgresql://user@host:port/db`; empty: no shared state (one gateway, local files).
    pub uri: String,
    /// How long a lease (the leader's, a table lock) lasts unless renewed.
    #[serde(with = "humantime_serde")]
    pub lease: Duration,
    /// This replica's name in leases and records (default: host name and process id).
    pub replica: String,
    /// How often other replicas' operations and queries are read in.
    #[serde(with = "humantime_serde")]
    pub poll: Duration,
}

impl Default for StateConfig {
    fn default() -> Self {
        Self {
            uri: String::new(),
            lease: Duration::from_secs(15),
            replica: String::new(),
            poll: Duration::from_secs(1),
        }
    }
}

impl StateConfig {
    /// Whether a shared database is configured.
    pub fn enabled(&self) -> bool {
        !self.uri.trim().is_empty()
    }
}

/// The lease the maintenance leader holds.
pub const LEADER: &str = "maintenance-leader";

/// A record another replica wrote: its row id, its replica, and the record (JSON).
#[derive(Debug, Clone)]
pub struct SharedRow {
    /// The row's id (increasing).
    pub id: i64,
    /// The replica that wrote it.
    pub replica: String,
    /// The record, as JSON text.
    pub json: String,
}

/// Which shared log a record goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SharedLog {
    /// Maintenance operations.
    Operations,
    /// Queries.
    Queries,
}

impl SharedLog {
    fn table(self) -> &'static str {
        match self {
            Self::Operations => "lakegate_operations",
            Self::Queries => "lakegate_queries",
        }
    }
}

/// The shared database.
pub struct SharedState {
    pool: PgPool,
    replica: String,
    lease: Duration,
    poll: Duration,
}

impl std::fmt::Debug for SharedState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedState")
            .field("replica", &self.replica)
            .finish_non_exhaustive()
    }
}

fn db(e: sqlx::Error) -> Error {
    Error::State(e.to_string())
}

impl SharedState {
    /// Connects and creates the tables if missing.
    ///
    /// # Errors
    /// The database cannot be reached or the tables cannot be created.
    pub async fn connect(config: &StateConfig) -> Result<Arc<Self>> {
        let pool = PgPoolOptions::new()
            .max_connections(4)
            .acquire_timeout(Duration::from_secs(10))
            .connect(config.uri.trim())
            .await
            .map_err(|e| Error::State(format!("state database {}: {e}", config.uri)))?;
        for ddl in [
            "CREATE TABLE IF NOT EXISTS lakegate_leases (name text PRIMARY KEY, \
             holder text NOT NULL, expires_at timestamptz NOT NULL)",
            "CREATE TABLE IF NOT EXISTS lakegate_operations (id bigserial PRIMARY KEY, \
             replica text NOT NULL, record jsonb NOT NULL)",
            "CREATE TABLE IF NOT EXISTS lakegate_queries (id bigserial PRIMARY KEY, \
             replica text NOT NULL, record jsonb NOT NULL)",
            "CREATE TABLE IF NOT EXISTS lakegate_approvals (kind text NOT NULL, \
             replica text NOT NULL, id bigint NOT NULL, item jsonb NOT NULL, \
             decision boolean, decided_by text, updated_at timestamptz NOT NULL, \
             PRIMARY KEY (kind, replica, id))",
        ] {
            // Two replicas starting at once may race on CREATE: the loser sees the table.
            if let Err(e) = sqlx::query(ddl).execute(&pool).await
                && !e.to_string().contains("already exists")
                && !e.to_string().contains("duplicate key")
            {
                return Err(db(e));
            }
        }
        let replica = if config.replica.trim().is_empty() {
            format!("{}-{}", host_name(), std::process::id())
        } else {
            config.replica.trim().to_string()
        };
        Ok(Arc::new(Self {
            pool,
            replica,
            lease: config.lease.max(Duration::from_secs(1)),
            poll: config.poll.max(Duration::from_millis(100)),
        }))
    }

    /// This replica's name.
    pub fn replica(&self) -> &str {
        &self.replica
    }

    /// The lease time.
    pub fn lease_time(&self) -> Duration {
        self.lease
    }

    /// How often shared logs are read in.
    pub fn poll_interval(&self) -> Duration {
        self.poll
    }

    /// Takes or renews lease `name` for the lease time; whether this replica holds it now.
    ///
    /// # Errors
    /// The database failed (the caller must then act as if it did not hold the lease).
    pub async fn try_lease(&self, name: &str) -> Result<bool> {
        let row: Option<(String,)> = sqlx::query_as(
            "INSERT INTO lakegate_leases (name, holder, expires_at) \
             VALUES ($1, $2, now() + make_interval(secs => $3)) \
             ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder, \
             expires_at = EXCLUDED.expires_at \
             WHERE lakegate_leases.holder = EXCLUDED.holder \
             OR lakegate_leases.expires_at < now() \
             RETURNING holder",
        )
        .bind(name)
        .bind(&self.replica)
        .bind(self.lease.as_secs_f64())
        .fetch_optional(&self.pool)
        .await
        .map_err(db)?;
        Ok(row.is_some())
    }

    /// Gives lease `name` up if this replica holds it.
    ///
    /// # Errors
    /// The database failed (the lease then expires by itself).
    pub async fn release(&self, name: &str) -> Result<()> {
        sqlx::query("DELETE FROM lakegate_leases WHERE name = $1 AND holder = $2")
            .bind(name)
            .bind(&self.replica)
            .execute(&self.pool)
            .await
            .map_err(db)?;
        Ok(())
    }

    /// Who holds lease `name` now (an unexpired row), if anyone.
    ///
    /// # Errors
    /// The database failed.
    pub async fn holder(&self, name: &str) -> Result<Option<String>> {
        let row: Option<(String,)> = sqlx::query_as(
            "SELECT holder FROM lakegate_leases WHERE name = $1 AND expires_at >= now()",
        )
        .bind(name)
        .fetch_optional(&self.pool)
        .await
        .map_err(db)?;
        Ok(row.map(|r| r.0))
    }

    /// Appends `json` to `log` as this replica's.
    ///
    /// # Errors
    /// The database failed.
    pub async fn append(&self, log: SharedLog, json: &str) -> Result<i64> {
        let (id,): (i64,) = sqlx::query_as(&format!(
            "INSERT INTO {} (replica, record) VALUES ($1, $2::jsonb) RETURNING id",
            log.table()
        ))
        .bind(&self.replica)
        .bind(json)
        .fetch_one(&self.pool)
        .await
        .map_err(db)?;
        Ok(id)
    }

    /// Rows of `log` after `after`, oldest first, at most `limit` (the newest when more).
    ///
    /// # Errors
    /// The database failed.
    pub async fn read(&self, log: SharedLog, after: i64, limit: i64) -> Result<Vec<SharedRow>> {
        let rows: Vec<(i64, String, String)> = sqlx::query_as(&format!(
            "SELECT id, replica, record::text FROM (SELECT id, replica, record FROM {} \
             WHERE id > $1 ORDER BY id DESC LIMIT $2) newest ORDER BY id",
            log.table()
        ))
        .bind(after)
        .bind(limit)
        .fetch_all(&self.pool)
        .await
        .map_err(db)?;
        Ok(rows
            .into_iter()
            .map(|(id, replica, json)| SharedRow { id, replica, json })
            .collect())
    }
}

/// What waits for an operator, shared so any replica lists and decides it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waiting {
    /// Maintenance operations the leader holds.
    Operations,
    /// Agents' statements, held by the replica running each.
    Statements,
}

impl Waiting {
    fn name(self) -> &'static str {
        match self {
            Self::Operations => "operation",
            Self::Statements => "statement",
        }
    }
}

/// A waiting item as published by the replica holding it.
#[derive(Debug, Clone)]
pub struct WaitingItem {
    /// The replica holding it (the one that runs it once approved).
    pub replica: String,
    /// Its id (unique across replicas: see [`SharedState::id_base`]).
    pub id: u64,
    /// The item, as JSON text.
    pub json: String,
}

/// A decision made on another replica, for the holder to apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteDecision {
    /// The item's id.
    pub id: u64,
    /// Approved (else rejected).
    pub approve: bool,
    /// Who decided.
    pub by: String,
}

impl SharedState {
    /// Where this replica's approval ids start: distinct per replica name (the high bits), so
    /// an id alone names an item estate-wide.
    pub fn id_base(&self) -> u64 {
        let hash = self.replica.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        (hash & 0x3FFF) << 40
    }

    /// Publishes what this replica holds of `kind` now (`(id, json)`): the rows of items no
    /// longer held go; decisions already written on held items stay for [`Self::decisions`].
    ///
    /// # Errors
    /// The database failed.
    pub async fn publish(&self, kind: Waiting, items: &[(u64, String)]) -> Result<()> {
        let ids: Vec<i64> = items.iter().map(|(id, _)| *id as i64).collect();
        let mut tx = self.pool.begin().await.map_err(db)?;
        sqlx::query(
            "DELETE FROM lakegate_approvals WHERE kind = $1 AND replica = $2 \
             AND NOT (id = ANY($3))",
        )
        .bind(kind.name())
        .bind(&self.replica)
        .bind(&ids)
        .execute(&mut *tx)
        .await
        .map_err(db)?;
        for (id, json) in items {
            sqlx::query(
                "INSERT INTO lakegate_approvals (kind, replica, id, item, updated_at) \
                 VALUES ($1, $2, $3, $4::jsonb, now()) ON CONFLICT (kind, replica, id) \
                 DO UPDATE SET item = EXCLUDED.item, updated_at = now()",
            )
            .bind(kind.name())
            .bind(&self.replica)
            .bind(*id as i64)
            .bind(json)
            .execute(&mut *tx)
            .await
            .map_err(db)?;
        }
        tx.commit().await.map_err(db)
    }

    /// Every replica's waiting items of `kind` (a replica that stopped publishing for three
    /// lease times is gone, and its items with it; operations are the current leader's only),
    /// by id.
    ///
    /// # Errors
    /// The database failed.
    pub async fn waiting(&self, kind: Waiting) -> Result<Vec<WaitingItem>> {
        let rows: Vec<(String, i64, String)> = sqlx::query_as(
            "SELECT replica, id, item::text FROM lakegate_approvals WHERE kind = $1 \
             AND decision IS NULL \
             AND updated_at > now() - make_interval(secs => $2) \
             AND ($1 <> 'operation' OR replica IN (SELECT holder FROM lakegate_leases \
                  WHERE name = $3 AND expires_at >= now())) ORDER BY id",
        )
        .bind(kind.name())
        .bind(3.0 * self.lease.as_secs_f64())
        .bind(LEADER)
        .fetch_all(&self.pool)
        .await
        .map_err(db)?;
        Ok(rows
            .into_iter()
            .map(|(replica, id, json)| WaitingItem {
                replica,
                id: id as u64,
                json,
            })
            .collect())
    }

    /// Records an operator's decision on item `id` (held by any replica); the item, or `None`
    /// when nothing of `kind` with that id is waiting.
    ///
    /// # Errors
    /// The database failed.
    pub async fn decide(
        &self,
        kind: Waiting,
        id: u64,
        approve: bool,
        by: &str,
    ) -> Result<Option<WaitingItem>> {
        let row: Option<(String, i64, String)> = sqlx::query_as(
            "UPDATE lakegate_approvals SET decision = $3, decided_by = $4 \
             WHERE kind = $1 AND id = $2 AND decision IS NULL \
             AND updated_at > now() - make_interval(secs => $5) \
             RETURNING replica, id, item::text",
        )
        .bind(kind.name())
        .bind(id as i64)
        .bind(approve)
        .bind(by)
        .bind(3.0 * self.lease.as_secs_f64())
        .fetch_optional(&self.pool)
        .await
        .map_err(db)?;
        Ok(row.map(|(replica, id, json)| WaitingItem {
            replica,
            id: id as u64,
            json,
        }))
    }

    /// Takes the decisions other replicas recorded on this replica's items of `kind`.
    ///
    /// # Errors
    /// The database failed.
    pub async fn decisions(&self, kind: Waiting) -> Result<Vec<RemoteDecision>> {
        let rows: Vec<(i64, bool, String)> = sqlx::query_as(
            "DELETE FROM lakegate_approvals WHERE kind = $1 AND replica = $2 \
             AND decision IS NOT NULL RETURNING id, decision, coalesce(decided_by, '')",
        )
        .bind(kind.name())
        .bind(&self.replica)
        .fetch_all(&self.pool)
        .await
        .map_err(db)?;
        Ok(rows
            .into_iter()
            .map(|(id, approve, by)| RemoteDecision {
                id: id as u64,
                approve,
                by,
            })
            .collect())
    }
}

/// Keeps a replica's waiting items of `kind` in the database every poll interval until `stop`:
/// `held()` is published, and each decision another replica recorded goes to `apply`.
pub fn share_waiting(
    state: Arc<SharedState>,
    kind: Waiting,
    stop: tokio_util::sync::CancellationToken,
    held: impl Fn() -> Vec<(u64, String)> + Send + 'static,
    apply: impl Fn(RemoteDecision) + Send + 'static,
) {
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(state.poll_interval()) => {}
            }
            match state.decisions(kind).await {
                Ok(decisions) => decisions.into_iter().for_each(&apply),
                Err(e) => tracing::warn!(error = %e, ?kind, "decisions not read"),
            }
            if let Err(e) = state.publish(kind, &held()).await {
                tracing::warn!(error = %e, ?kind, "waiting items not published");
            }
        }
    });
}

/// The table lock's lease name.
pub fn table_lock(key: &str) -> String {
    format!("table:{key}")
}

/// A held lease renewed in the background (every third of the lease time) until dropped, then
/// released.
pub struct Held {
    state: Arc<SharedState>,
    name: String,
    renew: tokio::task::JoinHandle<()>,
}

impl Held {
    /// Takes lease `name` if it is free (or already this replica's) and keeps renewing it.
    ///
    /// # Errors
    /// The database failed.
    pub async fn take(state: &Arc<SharedState>, name: String) -> Result<Option<Self>> {
        if !state.try_lease(&name).await? {
            return Ok(None);
        }
        let renewer = Arc::clone(state);
        let lease = name.clone();
        let renew = tokio::spawn(async move {
            loop {
                tokio::time::sleep(renewer.lease_time() / 3).await;
                match renewer.try_lease(&lease).await {
                    Ok(true) => {}
                    Ok(false) => {
                        tracing::warn!(lease = %lease, "lost a lease to another replica");
                        break;
                    }
                    Err(e) => tracing::warn!(lease = %lease, error = %e, "lease not renewed"),
                }
            }
        });
        Ok(Some(Self {
            state: Arc::clone(state),
            name,
            renew,
        }))
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.renew.abort();
        let state = Arc::clone(&self.state);
        let name = std::mem::take(&mut self.name);
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                if let Err(e) = state.release(&name).await {
                    tracing::debug!(lease = %name, error = %e, "lease not released; it expires");
                }
            });
        }
    }
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "lakegate".into())
}
