//! Configuration: a TOML file (`lakegate serve --config lakegate.toml`) with every connection
//! setting overridable by a command-line flag. Unknown keys are errors; defaults are the
//! documented ones (see `README.md`, "Configuration reference").

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;

use lakegate_engines::LakeConfig;
use serde::Deserialize;

use crate::error::{Error, Result};

/// The whole configuration.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// The Iceberg catalog lakegate reads.
    pub catalog: CatalogConfig,
    /// How to reach the object store holding the lake (endpoint, region, credentials; unset:
    /// the AWS environment variables).
    pub storage: lakegate_engines::lake::StorageConfig,
    /// The Postgres wire protocol endpoint.
    pub pg: PgConfig,
    /// The Arrow Flight SQL endpoint.
    pub flight: FlightConfig,
    /// The embedded DataFusion engine.
    pub datafusion: DataFusionConfig,
    /// The result cache.
    pub cache: crate::service::cache::CacheConfig,
    /// Which engine answers queries no session pinned.
    pub engines: EnginesConfig,
    /// The embedded DuckDB engine.
    pub duckdb: DuckDbConfig,
    /// A Trino coordinator.
    pub trino: TrinoConfig,
    /// A Spark Connect server.
    pub spark: SparkConfig,
    /// Routing groups and rules.
    pub routing: RoutingConfig,
    /// The query history.
    pub history: HistoryConfig,
    /// Metrics and the admin API.
    pub http: HttpConfig,
    /// The maintenance loop (off unless enabled).
    pub maintenance: lakegate_maintenance::MaintenanceConfig,
    /// State shared with other gateways on the same catalog (none: this gateway alone).
    pub state: lakegate_maintenance::state::StateConfig,
    /// Users and how they authenticate.
    pub auth: crate::security::auth::AuthConfig,
    /// Connection limits.
    pub limits: crate::security::limits::LimitsConfig,
    /// TLS for the Postgres endpoint.
    pub tls: crate::security::tls::TlsConfig,
    /// Who may read which tables and use which routing groups (none: everyone, everything).
    pub access: Vec<crate::security::access::AccessRule>,
    /// Columns some users see only hashed (none: every column in the clear).
    pub mask: Vec<crate::security::mask::MaskRule>,
    /// The PostgreSQL that answers catalog statements (`pg_catalog`, `information_schema`).
    pub pg_catalog: crate::mirror::CatalogConfig,
    /// Serving tables held in memory by the `accelerated` engine.
    pub acceleration: crate::acceleration::AccelerationConfig,
    /// The MCP endpoint for agents and their guardrails.
    pub mcp: crate::agents::McpConfig,
}

/// `[http]`: Prometheus metrics and the JSON admin API.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct HttpConfig {
    /// Address to listen on (default `127.0.0.1:8080`).
    pub listen: String,
    /// A client must send a request's headers within this long, or the connection is closed
    /// (a slow or silent client cannot hold connections open; default 10 s).
    #[serde(with = "humantime_serde")]
    pub header_timeout: std::time::Duration,
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:8080".into(),
            header_timeout: std::time::Duration::from_secs(10),
        }
    }
}

/// `[history]`: the query history (`lakegate.queries`).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct HistoryConfig {
    /// Queries kept (default 10000).
    pub capacity: usize,
    /// JSON-lines file that keeps the history across restarts; empty: memory only.
    pub path: String,
}

impl Default for HistoryConfig {
    fn default() -> Self {
        Self {
            capacity: 10_000,
            path: String::new(),
        }
    }
}

/// `[routing]`: where the routing groups and rules are.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct RoutingConfig {
    /// Folder of `*.toml` rules files (see `routing-rules/`); empty: one group, `default`,
    /// with every configured engine (the default engine first).
    pub rules_dir: String,
}

/// `[engines]`: choices across engines.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct EnginesConfig {
    /// The engine for queries no session pinned (default `datafusion`).
    pub default: String,
}

impl Default for EnginesConfig {
    fn default() -> Self {
        Self {
            default: "datafusion".into(),
        }
    }
}

/// `[duckdb]`: the embedded DuckDB engine.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct DuckDbConfig {
    /// `true`: required (startup fails without it); `false`: off; unset: on when its
    /// extensions are found.
    pub enabled: Option<bool>,
    /// Folder with `avro.duckdb_extension` and `iceberg.duckdb_extension` for DuckDB 1.5.5
    /// (default: `$LAKEGATE_DUCKDB_EXTENSIONS`, else `.cache/duckdb/v1.5.5`, where
    /// `scripts/setup.sh` puts them).
    pub extension_dir: String,
    /// Threads per query (default 2).
    pub threads: usize,
    /// Memory DuckDB may use (default `2GB`).
    pub memory_limit: String,
}

impl Default for DuckDbConfig {
    fn default() -> Self {
        Self {
            enabled: None,
            extension_dir: String::new(),
            threads: 2,
            memory_limit: "2GB".into(),
        }
    }
}

impl DuckDbConfig {
    /// Where the extensions are looked for.
    pub fn extension_dir(&self) -> std::path::PathBuf {
        if !self.extension_dir.is_empty() {
            return self.extension_dir.clone().into();
        }
        if let Ok(dir) = std::env::var("LAKEGATE_DUCKDB_EXTENSIONS")
            && !dir.is_empty()
        {
            return dir.into();
        }
        std::path::PathBuf::from(".cache/duckdb")
            .join(lakegate_engines::duckdb_engine::DUCKDB_VERSION)
    }
}

/// `[trino]`: a Trino coordinator whose Iceberg connector reads the same catalog.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct TrinoConfig {
    /// `http://host:port` of the coordinator; empty: no Trino engine.
    pub url: String,
    /// The Trino catalog mapped to the lake (default `lake`).
    pub catalog: String,
    /// The Trino user queries run as (default `lakegate`).
    pub user: String,
}

impl Default for TrinoConfig {
    fn default() -> Self {
        Self {
            url: String::new(),
            catalog: "lake".into(),
            user: "lakegate".into(),
        }
    }
}

/// `[spark]`: a Spark Connect server with an Iceberg catalog on the same catalog.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct SparkConfig {
    /// `http://host:port` of Spark Connect (usually port 15002); empty: no Spark engine.
    pub url: String,
    /// The Spark catalog mapped to the lake (default: `catalog.name`, which Iceberg's
    /// `JdbcCatalog` requires to match).
    pub catalog: String,
    /// The user Spark sessions belong to (default `lakegate`).
    pub user: String,
}

/// `[catalog]`: where the lake is.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct CatalogConfig {
    /// `sqlite:///abs/catalog.db`, `postgresql://user@host:port/db` or `http(s)://…` (REST).
    pub uri: String,
    /// The catalog's name in the SQL catalog tables (default `lake`).
    pub name: String,
    /// The warehouse location, e.g. `file:///abs/warehouse`.
    pub warehouse: String,
    /// Extra properties passed to the iceberg-rust catalog.
    pub props: BTreeMap<String, String>,
    /// Longest wait for the catalog per lookup before the statement fails (default 10 s).
    #[serde(with = "humantime_serde")]
    pub timeout: std::time::Duration,
}

impl Default for CatalogConfig {
    fn default() -> Self {
        Self {
            uri: String::new(),
            name: "lake".into(),
            warehouse: String::new(),
            props: BTreeMap::new(),
            timeout: std::time::Duration::from_secs(10),
        }
    }
}

/// `[pg]`: the Postgres wire endpoint.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct PgConfig {
    /// Address to listen on (default `127.0.0.1:5433`).
    pub listen: String,
    /// The database name clients see (default `lakegate`); any name is accepted at connect.
    pub database: String,
    /// The schema unqualified table names resolve to (default `public`).
    pub default_schema: String,
}

impl Default for PgConfig {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:5433".into(),
            database: "lakegate".into(),
            default_schema: "public".into(),
        }
    }
}

/// `[flight]`: the Arrow Flight SQL endpoint.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct FlightConfig {
    /// Address to listen on (default `127.0.0.1:32010`).
    pub listen: String,
}

impl Default for FlightConfig {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:32010".into(),
        }
    }
}

/// `[datafusion]`: the embedded engine.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct DataFusionConfig {
    /// Threads per query (default: the number of cores).
    pub target_partitions: usize,
    /// Rows per batch (default 8192).
    pub batch_size: usize,
    /// Memory, in MiB, that running queries may hold in operator buffers (default 4096).
    pub memory_limit_mb: usize,
}

impl Default for DataFusionConfig {
    fn default() -> Self {
        Self {
            target_partitions: std::thread::available_parallelism().map_or(2, |n| n.get()),
            batch_size: 8192,
            memory_limit_mb: 4096,
        }
    }
}

/// Command-line overrides; `None` keeps the file's (or the default) value.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// `--catalog-uri`
    pub catalog_uri: Option<String>,
    /// `--catalog-name`
    pub catalog_name: Option<String>,
    /// `--warehouse`
    pub warehouse: Option<String>,
    /// `--pg-listen`
    pub pg_listen: Option<String>,
    /// `--flight-listen`
    pub flight_listen: Option<String>,
    /// `--trino-url`
    pub trino_url: Option<String>,
    /// `--spark-url`
    pub spark_url: Option<String>,
    /// `--engine` (the default engine)
    pub engine: Option<String>,
    /// `--rules-dir`
    pub rules_dir: Option<String>,
    /// `--http-listen`
    pub http_listen: Option<String>,
    /// `--maintenance` (run the maintenance loop)
    pub maintenance: Option<bool>,
}

impl Config {
    /// Reads `path` (or starts from defaults when `None`), applies `overrides`, validates.
    ///
    /// # Errors
    /// [`Error::ConfigFile`] when the file cannot be read or parsed (unknown keys included),
    /// [`Error::Config`] naming the first invalid setting.
    pub fn load(path: Option<&Path>, overrides: &Overrides) -> Result<Self> {
        let mut config = match path {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| Error::ConfigFile {
                    path: path.display().to_string(),
                    reason: e.to_string(),
                })?;
                Self::from_toml(&text).map_err(|reason| Error::ConfigFile {
                    path: path.display().to_string(),
                    reason,
                })?
            }
            None => Self::default(),
        };
        config.apply(overrides);
        config.validate()?;
        Ok(config)
    }

    /// Parses TOML text.
    ///
    /// # Errors
    /// The parser's message, which names the offending key.
    pub fn from_toml(text: &str) -> std::result::Result<Self, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }

    /// Applies command-line overrides.
    pub fn apply(&mut self, o: &Overrides) {
        if let Some(v) = &o.catalog_uri {
            self.catalog.uri = v.clone();
        }
        if let Some(v) = &o.catalog_name {
            self.catalog.name = v.clone();
        }
        if let Some(v) = &o.warehouse {
            self.catalog.warehouse = v.clone();
        }
        if let Some(v) = &o.pg_listen {
            self.pg.listen = v.clone();
        }
        if let Some(v) = &o.flight_listen {
            self.flight.listen = v.clone();
        }
        if let Some(v) = &o.trino_url {
            self.trino.url = v.clone();
        }
        if let Some(v) = &o.spark_url {
            self.spark.url = v.clone();
        }
        if let Some(v) = &o.engine {
            self.engines.default = v.clone();
        }
        if let Some(v) = &o.rules_dir {
            self.routing.rules_dir = v.clone();
        }
        if let Some(v) = &o.http_listen {
            self.http.listen = v.clone();
        }
        if let Some(v) = o.maintenance {
            self.maintenance.enabled = v;
        }
    }

    /// Checks every setting that can be checked without connecting.
    ///
    /// # Errors
    /// [`Error::Config`] naming the setting and its flag.
    pub fn validate(&self) -> Result<()> {
        let bad = |setting: &str, reason: String| Error::Config {
            setting: setting.into(),
            reason,
        };
        if self.catalog.uri.trim().is_empty() {
            return Err(bad(
                "catalog.uri",
                "not set: pass --catalog-uri (e.g. sqlite:///abs/catalog.db) or set [catalog] uri"
                    .into(),
            ));
        }
        self.lake().validate().map_err(|e| match e {
            lakegate_engines::Error::InvalidCatalogConfig { setting, reason } => {
                bad(setting, reason)
            }
            other => bad("catalog", other.to_string()),
        })?;
        if let Some(path) = self.catalog.warehouse.strip_prefix("file://")
            && !path.starts_with('/')
        {
            return Err(bad(
                "catalog.warehouse",
                format!(
                    "`{}` must be an absolute file:/// URI",
                    self.catalog.warehouse
                ),
            ));
        }
        self.pg_listen_addr()?;
        self.flight_listen_addr()?;
        self.acceleration.options()?;
        self.http_listen_addr()?;
        self.maintenance.validate().map_err(|e| match e {
            lakegate_maintenance::Error::Config { setting, reason } => {
                bad(&format!("maintenance.{setting}"), reason)
            }
            other => bad("maintenance", other.to_string()),
        })?;
        if self.pg.database.trim().is_empty() {
            return Err(bad("pg.database", "must not be empty".into()));
        }
        if self.datafusion.batch_size == 0 {
            return Err(bad("datafusion.batch_size", "must be at least 1".into()));
        }
        let engines = crate::session::ENGINE_NAMES;
        if !engines[1..].contains(&self.engines.default.as_str()) {
            return Err(bad(
                "engines.default",
                format!(
                    "`{}` is not an engine: use one of {} (flag --engine)",
                    self.engines.default,
                    engines[1..].join(", ")
                ),
            ));
        }
        for (setting, url) in [
            ("trino.url", &self.trino.url),
            ("spark.url", &self.spark.url),
        ] {
            if !(url.is_empty() || url.starts_with("http://") || url.starts_with("https://")) {
                return Err(bad(
                    setting,
                    format!("`{url}` must be an http:// or https:// URL"),
                ));
            }
        }
        Ok(())
    }

    /// The pg listen address, parsed.
    ///
    /// # Errors
    /// [`Error::Config`] for `pg.listen` when it is not `host:port`.
    pub fn pg_listen_addr(&self) -> Result<SocketAddr> {
        self.pg.listen.parse().map_err(|_| Error::Config {
            setting: "pg.listen".into(),
            reason: format!(
                "`{}` is not an address: use IP:PORT, e.g. 127.0.0.1:5433 (flag --pg-listen)",
                self.pg.listen
            ),
        })
    }

    /// The Flight SQL listen address, parsed.
    ///
    /// # Errors
    /// [`Error::Config`] for `flight.listen` when it is not `host:port`.
    pub fn flight_listen_addr(&self) -> Result<SocketAddr> {
        self.flight.listen.parse().map_err(|_| Error::Config {
            setting: "flight.listen".into(),
            reason: format!(
                "`{}` is not an address: use IP:PORT, e.g. 127.0.0.1:32010 (flag --flight-listen)",
                self.flight.listen
            ),
        })
    }

    /// The HTTP listen address, parsed.
    ///
    /// # Errors
    /// [`Error::Config`] for `http.listen` when it is not `host:port`.
    pub fn http_listen_addr(&self) -> Result<SocketAddr> {
        self.http.listen.parse().map_err(|_| Error::Config {
            setting: "http.listen".into(),
            reason: format!(
                "`{}` is not an address: use IP:PORT, e.g. 127.0.0.1:8080 (flag --http-listen)",
                self.http.listen
            ),
        })
    }

    /// The lake connection settings.
    pub fn lake(&self) -> LakeConfig {
        LakeConfig {
            uri: self.catalog.uri.clone(),
            name: self.catalog.name.clone(),
            warehouse: self.catalog.warehouse.clone(),
            props: self.catalog.props.clone(),
            storage: self.storage.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_keys_are_rejected_with_their_name() {
        let err = Config::from_toml("[catalog]\nurl = \"x\"\n").expect_err("typo must fail");
        assert!(err.contains("url"), "{err}");
    }

    #[test]
    fn defaults_match_the_documentation() {
        let c = Config::from_toml("").expect("empty config parses");
        assert_eq!(c.pg.listen, "127.0.0.1:5433");
        assert_eq!(c.catalog.name, "lake");
        assert_eq!(c.pg.database, "lakegate");
        assert_eq!(c.pg.default_schema, "public");
        assert_eq!(c.flight.listen, "127.0.0.1:32010");
    }

    #[test]
    fn flags_override_the_file_and_bad_values_name_the_setting() {
        let mut c = Config::from_toml("[pg]\nlisten = \"127.0.0.1:1\"\n").expect("parses");
        c.apply(&Overrides {
            pg_listen: Some("nonsense".into()),
            ..Default::default()
        });
        assert_eq!(c.pg.listen, "nonsense");
        let err = c.pg_listen_addr().expect_err("bad address");
        assert!(err.to_string().contains("pg.listen"), "{err}");

        let missing = Config::default().validate().expect_err("no catalog uri");
        assert!(missing.to_string().contains("catalog.uri"), "{missing}");
        assert!(missing.to_string().contains("--catalog-uri"), "{missing}");
    }

    #[test]
    fn relative_warehouse_is_rejected() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = dir.path().join("c.db");
        std::fs::write(&db, b"").expect("touch");
        let mut c = Config::default();
        c.apply(&Overrides {
            catalog_uri: Some(format!("sqlite://{}", db.display())),
            warehouse: Some("file://relative/w".into()),
            ..Default::default()
        });
        let err = c.validate().expect_err("relative warehouse");
        assert!(err.to_string().contains("catalog.warehouse"), "{err}");
    }
}
