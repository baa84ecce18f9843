//! One mirror database: its connections (each with the settings of the session it last
//! served), and keeping its tables equal to the lake's (at most `refresh` behind).

use std::sync::Arc;
use std::time::{Duration, Instant};

use lakegate_engines::Lake;
use tracing::warn;

use super::schema::{self, Mirrored, literal};
use super::wire::{Answer, Bound, Connection, Description, Endpoint};
use crate::error::{Error, Result};
use crate::session::Session;

/// Idle connections kept for reuse.
const MAX_IDLE: usize = 8;

struct SyncState {
    mirrored: Mirrored,
    at: Option<Instant>,
}

/// A database holding the mirror of the lake.
pub struct MirrorDb {
    endpoint: Endpoint,
    lake: Arc<Lake>,
    idle: std::sync::Mutex<Vec<Connection>>,
    state: tokio::sync::Mutex<SyncState>,
    refresh: Duration,
}

impl std::fmt::Debug for MirrorDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MirrorDb")
            .field("database", &self.endpoint.database)
            .finish_non_exhaustive()
    }
}

impl MirrorDb {
    /// The mirror in `endpoint`'s database (empty until the first [`Self::follow_lake`]),
    /// `first` its first connection.
    pub(super) fn new(
        endpoint: Endpoint,
        first: Option<Connection>,
        lake: Arc<Lake>,
        refresh: Duration,
    ) -> Self {
        Self {
            endpoint,
            lake,
            idle: std::sync::Mutex::new(first.into_iter().collect()),
            state: tokio::sync::Mutex::new(SyncState {
                mirrored: Mirrored::default(),
                at: None,
            }),
            refresh,
        }
    }

    /// The database's name.
    pub fn name(&self) -> &str {
        &self.endpoint.database
    }

    /// Brings the mirror up to the lake when it was last synced more than `refresh` ago. A
    /// failing lake leaves the last mirrored state in place (logged).
    pub(super) async fn follow_lake(&self) -> Result<()> {
        let mut state = self.state.lock().await;
        if state.at.is_some_and(|t| t.elapsed() < self.refresh) {
            return Ok(());
        }
        let want = match schema::desired(&self.lake).await {
            Ok(want) => want,
            Err(e) if state.at.is_some() => {
                warn!(error = %e, "catalog mirror: the lake cannot be listed; keeping the last schema");
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        let script = schema::changes(&state.mirrored, &want);
        if !script.is_empty() {
            let mut conn = self.checkout().await?;
            conn.simple(&format!("BEGIN;{script}COMMIT;")).await?;
            self.checkin(conn);
        }
        state.mirrored = want;
        state.at = Some(Instant::now());
        Ok(())
    }

    async fn checkout(&self) -> Result<Connection> {
        let idle = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop();
        match idle {
            Some(c) => Ok(c),
            None => Connection::connect(&self.endpoint).await,
        }
    }

    fn checkin(&self, conn: Connection) {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < MAX_IDLE {
            idle.push(conn);
        }
    }

    /// A connection with `session`'s settings applied.
    async fn connection_for(&self, session: &Session) -> Result<Connection> {
        self.follow_lake().await?;
        let mut conn = self.checkout().await?;
        let want = settings_of(session);
        if conn.applied != want {
            let set = |pairs: &[(String, String)]| {
                let calls: Vec<String> = pairs
                    .iter()
                    .map(|(k, v)| {
                        format!(
                            "pg_catalog.set_config({}, {}, false)",
                            literal(k),
                            literal(v)
                        )
                    })
                    .collect();
                format!("SELECT {}", calls.join(", "))
            };
            if conn.simple(&set(&want)).await.is_err() {
                // A value PostgreSQL refuses (the gateway accepted it): the others still apply.
                for pair in &want {
                    let _ = conn.simple(&set(std::slice::from_ref(pair))).await;
                }
            }
            conn.applied = want;
        }
        Ok(conn)
    }

    /// Describes `sql` (Parse + Describe) for `session`.
    ///
    /// # Errors
    /// [`Error::Postgres`] when PostgreSQL refuses it; [`Error::CatalogMirror`] when the
    /// mirror cannot be reached (the caller falls back to the emulated catalog).
    pub async fn describe(
        &self,
        sql: &str,
        types: &[u32],
        session: &Session,
    ) -> Result<Description> {
        let mut conn = self.connection_for(session).await?;
        let out = conn.describe(sql, types).await;
        if !matches!(out, Err(Error::CatalogMirror { .. })) {
            self.checkin(conn);
        }
        out
    }

    /// Runs `sql` with the client's bound parameters and formats for `session`.
    ///
    /// # Errors
    /// As [`Self::describe`].
    pub async fn execute(&self, sql: &str, bound: &Bound<'_>, session: &Session) -> Result<Answer> {
        let mut conn = self.connection_for(session).await?;
        let out = conn.execute(sql, bound).await;
        if !matches!(out, Err(Error::CatalogMirror { .. })) {
            self.checkin(conn);
        }
        out
    }
}

/// The settings of `session` that change catalog answers, with PostgreSQL's defaults.
fn settings_of(session: &Session) -> Vec<(String, String)> {
    const KEYS: [(&str, &str); 7] = [
        ("search_path", "\"$user\", public"),
        ("timezone", "UTC"),
        ("datestyle", "ISO, MDY"),
        ("intervalstyle", "postgres"),
        ("extra_float_digits", "1"),
        ("bytea_output", "hex"),
        ("statement_timeout", "0"),
    ];
    let values = session.values();
    KEYS.iter()
        .map(|(k, default)| {
            let v = values.get(*k).map_or(*default, String::as_str);
            (k.to_string(), v.to_string())
        })
        .collect()
}
