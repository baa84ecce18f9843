//! The PostgreSQL catalog mirror: a real PostgreSQL holding an empty copy of the lake's
//! schema, which answers every catalog statement (`pg_catalog`, `information_schema`, catalog
//! functions) with PostgreSQL's own answer — exact by construction, where an emulation of the
//! catalog's long tail never ends.
//!
//! - [`cluster`] — the private PostgreSQL lakegate starts when `[pg_catalog] uri` is not set.
//! - [`database`] — one mirror database: connections, session settings, following the lake.
//! - [`schema`] — the lake as DDL, and the changes that keep a mirror equal to it.
//! - [`route`] — which statements the mirror answers.
//! - [`wire`] — the client side of the protocol, passing bytes through unchanged.
//!
//! Sessions whose access rules hide tables keep the emulated catalog (it filters by user):
//! one mirror shows every table.

pub mod cluster;
pub mod database;
pub mod route;
pub mod schema;
pub mod wire;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use lakegate_engines::Lake;
use serde::Deserialize;
use tracing::{info, warn};

use crate::error::{Error, Result};
use cluster::Cluster;
use database::MirrorDb;
use schema::{ident, literal};
use wire::{Connection, Endpoint, Host};

/// `[pg_catalog] mode`: who answers catalog statements.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum CatalogMode {
    /// The mirror when PostgreSQL can be had (a `uri`, or server binaries on this machine),
    /// else the emulated catalog with a warning.
    #[default]
    Auto,
    /// The mirror, or the gateway does not start.
    Mirror,
    /// The emulated catalog (DataFusion's `pg_catalog` tables).
    Emulate,
}

/// `[pg_catalog]`: the PostgreSQL that answers catalog statements.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct CatalogConfig {
    /// `auto` (default), `mirror` or `emulate`.
    pub mode: CatalogMode,
    /// A PostgreSQL database to hold the mirror (`postgresql://user:password@host:port/db`)
    /// instead of a private cluster. The database must be empty or a lakegate mirror: lakegate
    /// replaces what is in it.
    pub uri: String,
    /// Where `initdb` and `postgres` are (default: `PATH`, then the newest
    /// `/usr/lib/postgresql/<major>/bin`).
    pub bin_dir: String,
    /// How long the mirror may lag the lake's table list and schemas (default 1 s).
    #[serde(with = "humantime_serde")]
    pub refresh: Duration,
}

impl Default for CatalogConfig {
    fn default() -> Self {
        Self {
            mode: CatalogMode::Auto,
            uri: String::new(),
            bin_dir: String::new(),
            refresh: Duration::from_secs(1),
        }
    }
}

/// The comment that marks a database as a lakegate mirror (and so lakegate's to replace).
const MARKER: &str = "lakegate catalog mirror";

/// Databases made for the names clients connect under, at most (beyond: the first one
/// answers, with `current_database()` rewritten to the client's name).
const MAX_DATABASES: usize = 32;

/// The running mirror.
pub struct CatalogMirror {
    /// Kept to stop the private server with the mirror.
    _cluster: Option<Cluster>,
    /// Where `CREATE DATABASE` goes (a private cluster only).
    admin: Option<Endpoint>,
    /// The database of `[pg] database`.
    main: Arc<MirrorDb>,
    /// The others, by the name clients connected under.
    others: tokio::sync::Mutex<HashMap<String, Arc<MirrorDb>>>,
    lake: Arc<Lake>,
    refresh: Duration,
}

impl std::fmt::Debug for CatalogMirror {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CatalogMirror")
            .field("main", &self.main)
            .finish_non_exhaustive()
    }
}

fn endpoint_from_uri(uri: &str) -> Result<Endpoint> {
    let bad = |reason: String| Error::Config {
        setting: "pg_catalog.uri".into(),
        reason,
    };
    let config: tokio_postgres::Config = uri.parse().map_err(|e| bad(format!("{e}")))?;
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(h)) => Host::Tcp(h.clone()),
        Some(tokio_postgres::config::Host::Unix(p)) => Host::Unix(p.clone()),
        None => Host::Tcp("localhost".into()),
    };
    let user = config
        .get_user()
        .map(str::to_string)
        .ok_or_else(|| bad("no user (postgresql://USER@host/db)".into()))?;
    Ok(Endpoint {
        host,
        port: config.get_ports().first().copied().unwrap_or(5432),
        database: config
            .get_dbname()
            .map_or_else(|| user.clone(), str::to_string),
        password: config
            .get_password()
            .map(|p| String::from_utf8_lossy(p).into_owned()),
        user,
    })
}

impl CatalogMirror {
    /// Starts the mirror `config` asks for, serving database `database` (`None`: the
    /// emulated catalog answers, as configured or because no PostgreSQL could be had).
    ///
    /// # Errors
    /// With `mode = "mirror"`, whatever kept the mirror from starting; a bad `uri`.
    pub async fn start(
        config: &CatalogConfig,
        database: &str,
        lake: Arc<Lake>,
    ) -> Result<Option<Arc<Self>>> {
        if config.mode == CatalogMode::Emulate {
            return Ok(None);
        }
        match Self::try_start(config, database, lake).await {
            Ok(m) => Ok(Some(Arc::new(m))),
            Err(e @ Error::Config { .. }) => Err(e),
            Err(e) if config.mode == CatalogMode::Mirror => Err(e),
            Err(e) => {
                warn!(
                    error = %e,
                    "catalog mirror unavailable: catalog statements are answered by the \
                     emulated pg_catalog, which some BI tools' introspection does not get \
                     exactly right (install PostgreSQL's server or set [pg_catalog] uri)"
                );
                Ok(None)
            }
        }
    }

    async fn try_start(config: &CatalogConfig, database: &str, lake: Arc<Lake>) -> Result<Self> {
        let (cluster, admin, endpoint) = if config.uri.is_empty() {
            let bin =
                cluster::find_bin_dir(&config.bin_dir).ok_or_else(|| Error::CatalogMirror {
                    reason: "no PostgreSQL server binaries (initdb, postgres) found".into(),
                })?;
            let cluster = Cluster::start(&bin).await?;
            let admin = cluster.endpoint.clone();
            create_database(&admin, database).await?;
            let endpoint = Endpoint {
                database: database.to_string(),
                ..admin.clone()
            };
            (Some(cluster), Some(admin), endpoint)
        } else {
            (None, None, endpoint_from_uri(&config.uri)?)
        };
        let mut conn = Connection::connect(&endpoint).await?;
        if cluster.is_none() {
            claim(&mut conn, &endpoint.database).await?;
        }
        let server_version = conn.server_version.clone();
        lakegate_engines::system_catalog::set_server_version(&server_version);
        report_locale(&mut conn).await;
        let main = Arc::new(MirrorDb::new(
            endpoint,
            Some(conn),
            lake.clone(),
            config.refresh,
        ));
        main.follow_lake(false).await?;
        info!(
            database = %main.name(),
            server_version = %server_version,
            "catalog mirror ready"
        );
        Ok(Self {
            _cluster: cluster,
            admin,
            main,
            others: tokio::sync::Mutex::new(HashMap::new()),
            lake,
            refresh: config.refresh,
        })
    }

    /// The mirror database for a client connected to `database`: its own in a private
    /// cluster (made on first use, so `pg_database` and `current_database()` name it), else
    /// the main one.
    pub async fn database(&self, database: &str) -> Arc<MirrorDb> {
        let Some(admin) = &self.admin else {
            return self.main.clone();
        };
        if database == self.main.name() || matches!(database, "template0" | "template1") {
            return self.main.clone();
        }
        let mut others = self.others.lock().await;
        if let Some(db) = others.get(database) {
            return db.clone();
        }
        if others.len() >= MAX_DATABASES {
            return self.main.clone();
        }
        match create_database(admin, database).await {
            Ok(()) => {
                let endpoint = Endpoint {
                    database: database.to_string(),
                    ..admin.clone()
                };
                let db = Arc::new(MirrorDb::new(
                    endpoint,
                    None,
                    self.lake.clone(),
                    self.refresh,
                ));
                others.insert(database.to_string(), db.clone());
                db
            }
            Err(e) => {
                warn!(error = %e, database, "catalog mirror: cannot make a database for this name");
                self.main.clone()
            }
        }
    }
}

/// Makes `database` in a private cluster (`postgres` is there already).
async fn create_database(admin: &Endpoint, database: &str) -> Result<()> {
    if database == "postgres" {
        return Ok(());
    }
    let mut conn = Connection::connect(admin).await?;
    conn.simple(&format!("CREATE DATABASE {}", ident(database)))
        .await
}
/// Reports the mirror database's collation and character type as `lc_collate`/`lc_ctype`
/// (kept at `C` when they cannot be read).
async fn report_locale(conn: &mut Connection) {
    let bound = wire::Bound {
        types: &[],
        formats: &[],
        values: &[],
        result_formats: &[],
    };
    let answer = conn
        .execute(
            "SELECT datcollate::text, datctype::text FROM pg_catalog.pg_database \
             WHERE datname = pg_catalog.current_database()",
            &bound,
            1 << 16,
        )
        .await;
    match answer
        .as_ref()
        .map(|a| a.rows.first().map(wire::RawRow::text_fields))
    {
        Ok(Some(fields)) if fields.len() == 2 => {
            if let [Some(collate), Some(ctype)] = fields.as_slice() {
                lakegate_engines::system_catalog::set_server_locale(collate, ctype);
            }
        }
        other => {
            warn!(answer = ?other.err(), "the catalog mirror's locale is unknown: lc_collate stays C")
        }
    }
}

/// Makes sure the configured database is empty or already a mirror, and marks it as one.
async fn claim(conn: &mut Connection, database: &str) -> Result<()> {
    let check = format!(
        "DO $lakegate$ BEGIN \
           IF coalesce(pg_catalog.shobj_description((SELECT oid FROM pg_catalog.pg_database \
                WHERE datname = pg_catalog.current_database()), 'pg_database'), '') <> {marker} \
              AND EXISTS (SELECT 1 FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n \
                ON n.oid = c.relnamespace WHERE n.nspname NOT LIKE 'pg\\_%' \
                AND n.nspname <> 'information_schema') THEN \
             RAISE EXCEPTION 'database % is not empty and not a lakegate catalog mirror: give \
               [pg_catalog] uri a database of its own', pg_catalog.current_database(); \
           END IF; END $lakegate$;\
         COMMENT ON DATABASE {db} IS {marker};",
        marker = literal(MARKER),
        db = ident(database),
    );
    conn.simple(&check).await.map_err(|e| match e {
        Error::Postgres(pg) => Error::Config {
            setting: "pg_catalog.uri".into(),
            reason: pg.message,
        },
        e => e,
    })?;
    // Whatever a previous run mirrored is replaced.
    conn.simple(
        "DO $lakegate$ DECLARE r record; BEGIN \
           FOR r IN SELECT nspname FROM pg_catalog.pg_namespace WHERE nspname NOT LIKE 'pg\\_%' \
             AND nspname NOT IN ('information_schema', 'public') LOOP \
             EXECUTE pg_catalog.format('DROP SCHEMA %I CASCADE', r.nspname); END LOOP; \
           FOR r IN SELECT tablename FROM pg_catalog.pg_tables WHERE schemaname = 'public' LOOP \
             EXECUTE pg_catalog.format('DROP TABLE public.%I CASCADE', r.tablename); END LOOP; \
         END $lakegate$",
    )
    .await
}
