//! One mirror database: its connections (each with the settings of the session it last
//! served), and keeping its tables equal to the lake's (at most `refresh` behind).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lakegate_engines::Lake;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::schema::{self, Mirrored, literal};
use super::wire::{Answer, Bound, Connection, Description, Endpoint};
use crate::error::{Error, Result};
use crate::service::origins::Attribute;
use crate::session::Session;

/// Idle connections kept for reuse.
const MAX_IDLE: usize = 8;

struct SyncState {
    mirrored: Mirrored,
    at: Option<Instant>,
}

/// Every mirrored column's place in the catalog, as this database numbers it: by schema, table
/// and column (looked up by `&str`, without building a key per output column).
pub type Attributes = HashMap<String, HashMap<String, HashMap<String, Attribute>>>;

/// The query that reads [`Attributes`].
const ATTRIBUTES: &str = "SELECT n.nspname, c.relname, a.attname, c.oid, a.attnum, a.atttypmod \
     FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_class c ON c.oid = a.attrelid \
     JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
     WHERE c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped \
     AND n.nspname NOT IN ('pg_catalog', 'information_schema')";

/// A database holding the mirror of the lake.
pub struct MirrorDb {
    attributes: std::sync::RwLock<Arc<Attributes>>,
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
            attributes: std::sync::RwLock::new(Arc::new(HashMap::new())),
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

    /// Every mirrored column's place in this database's catalog (table OID, attnum, typmod),
    /// as last synced.
    pub fn attributes(&self) -> Arc<Attributes> {
        self.attributes
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Brings the mirror up to the lake when it was last synced more than `refresh` ago —
    /// or, for a statement that reads the catalog (`tables`), as soon as the lake's list of
    /// tables differs from the mirror's (a table made a moment ago is listed, as in
    /// PostgreSQL). A failing lake leaves the last mirrored state in place (logged).
    pub(super) async fn follow_lake(&self, tables: bool) -> Result<()> {
        let mut state = self.state.lock().await;
        if state.at.is_some_and(|t| t.elapsed() < self.refresh) {
            if !tables {
                return Ok(());
            }
            let Ok(directory) = self.lake.directory().await else {
                return Ok(());
            };
            let same = directory.schemas.len() == state.mirrored.schemas.len()
                && directory.schemas.iter().all(|(s, ts)| {
                    state.mirrored.schemas.contains(s)
                        && ts
                            .iter()
                            .all(|t| state.mirrored.tables.contains_key(&(s.clone(), t.clone())))
                })
                && state.mirrored.tables.len()
                    == directory.schemas.values().map(Vec::len).sum::<usize>();
            if same {
                return Ok(());
            }
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
            let bound = Bound {
                types: &[],
                formats: &[],
                values: &[],
                result_formats: &[],
            };
            let rows = conn
                .execute(ATTRIBUTES, &bound, super::wire::MAX_ANSWER_BYTES)
                .await?
                .rows;
            self.checkin(conn);
            let mut attributes = Attributes::new();
            for row in &rows {
                if let [
                    Some(s),
                    Some(t),
                    Some(c),
                    Some(oid),
                    Some(num),
                    Some(typmod),
                ] = row.text_fields().as_slice()
                    && let (Ok(oid), Ok(num), Ok(typmod)) =
                        (oid.parse(), num.parse(), typmod.parse())
                {
                    attributes
                        .entry(s.clone())
                        .or_default()
                        .entry(t.clone())
                        .or_default()
                        .insert(c.clone(), (oid, num, typmod));
                }
            }
            *self.attributes.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(attributes);
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
    async fn connection_for(&self, session: &Session, tables: bool) -> Result<Connection> {
        self.follow_lake(tables).await?;
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

    /// Describes `sql` (Parse + Describe) for `session`; `tables`: it reads the catalog's
    /// tables (see [`Self::follow_lake`]).
    ///
    /// # Errors
    /// [`Error::Postgres`] when PostgreSQL refuses it; [`Error::CatalogMirror`] when the
    /// mirror cannot be reached (the caller falls back to the emulated catalog).
    pub async fn describe(
        &self,
        sql: &str,
        types: &[u32],
        session: &Session,
        tables: bool,
    ) -> Result<Description> {
        let mut conn = self.connection_for(session, tables).await?;
        let out = conn.describe(sql, types).await;
        if !matches!(out, Err(Error::CatalogMirror { .. })) {
            self.checkin(conn);
        }
        out
    }

    /// Runs `sql` with the client's bound parameters and formats for `session`, its answer
    /// at most `max_bytes`; `cancel` (the client's cancel request) becomes a cancel request to
    /// the server.
    ///
    /// # Errors
    /// As [`Self::describe`].
    pub async fn execute(
        &self,
        sql: &str,
        bound: &Bound<'_>,
        session: &Session,
        cancel: &CancellationToken,
        max_bytes: u64,
        tables: bool,
    ) -> Result<Answer> {
        let mut conn = self.connection_for(session, tables).await?;
        let key = conn.cancel_key();
        let out = {
            let running = conn.execute(sql, bound, max_bytes);
            tokio::pin!(running);
            tokio::select! {
                out = &mut running => out,
                () = cancel.cancelled() => {
                    if let Some(key) = key
                        && let Err(e) = super::wire::cancel(&self.endpoint, key).await
                    {
                        warn!(error = %e, "catalog mirror: cancel request failed");
                    }
                    running.await
                }
            }
        };
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
