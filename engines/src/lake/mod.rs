//! The lake: one Iceberg catalog, its namespaces and tables, and the version token of each table.
//!
//! lakegate reads a catalog it does not own. Every statement resolves the tables it reads to
//! their *current* metadata location (the version token) with one cheap lookup, so a commit by
//! any writer is visible to the very next query; parsed metadata is cached by location, so an
//! unchanged table costs no metadata read.

pub mod decoded;
pub mod estimate;
pub(crate) mod files;
mod jdbc_schema;
pub mod object_cache;
pub mod objects;
mod sqlite_tokens;
pub mod storage;
mod tokens;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use arrow::datatypes::SchemaRef;
use iceberg::arrow::schema_to_arrow_schema;
use iceberg::io::{LocalFsStorageFactory, StorageFactory};
use iceberg::table::Table;
use iceberg::{Catalog, CatalogBuilder, NamespaceIdent, TableIdent};
use iceberg_catalog_rest::{
    REST_CATALOG_PROP_URI, REST_CATALOG_PROP_WAREHOUSE, RestCatalogBuilder,
};
use iceberg_catalog_sql::{
    SQL_CATALOG_PROP_BIND_STYLE, SQL_CATALOG_PROP_URI, SQL_CATALOG_PROP_WAREHOUSE,
    SqlCatalogBuilder,
};
use iceberg_storage_opendal::OpenDalResolvingStorageFactory;
use tracing::debug;

use crate::error::{Error, Result};
use object_cache::{CachingStorageFactory, ObjectCache};
pub use object_cache::{ObjectCacheConfig, ObjectCacheStats};
pub use storage::{Scheme, StorageConfig, scheme_of};
use tokens::TokenSource;

/// Where the lake's catalog and warehouse are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LakeConfig {
    /// `sqlite:///abs/catalog.db`, `postgresql://user@host:port/db` or `http(s)://…` (REST).
    pub uri: String,
    /// The catalog's name (the `catalog_name` column of a SQL catalog).
    pub name: String,
    /// The warehouse location, e.g. `file:///abs/warehouse`.
    pub warehouse: String,
    /// Extra catalog properties passed through to iceberg-rust.
    pub props: BTreeMap<String, String>,
    /// How to reach the object store (`[storage]`).
    pub storage: StorageConfig,
}

/// The kind of catalog a URI points at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CatalogKind {
    /// The Iceberg SQL ("JDBC") catalog on a SQLite file.
    Sqlite,
    /// The Iceberg SQL ("JDBC") catalog on PostgreSQL.
    Postgres,
    /// The Iceberg REST catalog.
    Rest,
}

impl LakeConfig {
    /// Which kind of catalog `uri` names.
    ///
    /// # Errors
    /// [`Error::InvalidCatalogConfig`] when the scheme is not one lakegate knows.
    pub fn kind(&self) -> Result<CatalogKind> {
        let scheme = self.uri.split(':').next().unwrap_or_default();
        match scheme {
            "sqlite" => Ok(CatalogKind::Sqlite),
            "postgres" | "postgresql" => Ok(CatalogKind::Postgres),
            "http" | "https" => Ok(CatalogKind::Rest),
            _ => Err(Error::InvalidCatalogConfig {
                setting: "catalog.uri",
                reason: format!(
                    "`{}` is not a catalog URI: use sqlite:///abs/path.db, postgresql://user@host:port/db or http(s)://host/ (REST)",
                    self.uri
                ),
            }),
        }
    }

    /// Checks the settings without connecting.
    ///
    /// # Errors
    /// [`Error::InvalidCatalogConfig`] naming the first bad setting.
    pub fn validate(&self) -> Result<()> {
        let kind = self.kind()?;
        if self.name.trim().is_empty() {
            return Err(Error::InvalidCatalogConfig {
                setting: "catalog.name",
                reason: "must not be empty".into(),
            });
        }
        if kind != CatalogKind::Rest && self.warehouse.trim().is_empty() {
            return Err(Error::InvalidCatalogConfig {
                setting: "catalog.warehouse",
                reason: "a SQL catalog needs a warehouse location, e.g. file:///abs/warehouse"
                    .into(),
            });
        }
        if kind == CatalogKind::Sqlite && !self.uri.contains("mode=rwc") {
            let path = sqlite_path(&self.uri);
            if !std::path::Path::new(path).exists() {
                return Err(Error::InvalidCatalogConfig {
                    setting: "catalog.uri",
                    reason: format!("SQLite catalog file `{path}` does not exist"),
                });
            }
        }
        Ok(())
    }
}

/// The file path in a `sqlite://` URI (query string removed).
pub fn sqlite_path(uri: &str) -> &str {
    let rest = uri
        .strip_prefix("sqlite://")
        .or_else(|| uri.strip_prefix("sqlite:"))
        .unwrap_or(uri);
    rest.split('?').next().unwrap_or(rest)
}

/// A table resolved to one version: a shared handle (a statement's pins, a batch's kept
/// versions and the lake's loaded tables hold the same [`TableVersion`]; a copy is one
/// reference count, not the identifier, location and table).
#[derive(Debug, Clone)]
pub struct ResolvedTable(Arc<TableVersion>);

impl From<TableVersion> for ResolvedTable {
    fn from(version: TableVersion) -> Self {
        Self(Arc::new(version))
    }
}

impl std::ops::Deref for ResolvedTable {
    type Target = TableVersion;

    fn deref(&self) -> &TableVersion {
        &self.0
    }
}

/// What a [`ResolvedTable`] is: the metadata file that was current when it was resolved.
#[derive(Debug, Clone)]
pub struct TableVersion {
    /// The table's identifier in the catalog.
    pub ident: TableIdent,
    /// The version token: the metadata file current at resolution.
    pub metadata_location: String,
    /// The current snapshot at that version (`None` for a table with no data yet).
    pub snapshot_id: Option<i64>,
    /// The loaded table (metadata and file IO).
    pub table: Table,
    /// The table's current schema as Arrow.
    pub schema: SchemaRef,
}

/// The namespaces and table names of the catalog at one moment.
#[derive(Debug, Clone, Default)]
pub struct Directory {
    /// Namespace (as a dotted name) → table names, both sorted.
    pub schemas: BTreeMap<String, Vec<String>>,
}

impl Directory {
    /// The tables `allows(namespace, table)` keeps; namespaces left empty are dropped.
    pub fn filtered(&self, allows: impl Fn(&str, &str) -> bool) -> Directory {
        let schemas = self
            .schemas
            .iter()
            .filter_map(|(ns, tables)| {
                let shown: Vec<String> = tables.iter().filter(|t| allows(ns, t)).cloned().collect();
                (!shown.is_empty()).then(|| (ns.clone(), shown))
            })
            .collect();
        Directory { schemas }
    }
}

/// A connected catalog.
pub struct Lake {
    config: LakeConfig,
    catalog: Arc<dyn Catalog>,
    tokens: TokenSource,
    /// Parsed tables by metadata location: an unchanged table is never re-read.
    loaded: Mutex<HashMap<String, ResolvedTable, foldhash::fast::RandomState>>,
    /// How old a version token may be before it is looked up again (zero: every statement).
    max_staleness: std::time::Duration,
    /// Longest wait for one resolution (catalog lookup and metadata load).
    timeout: std::time::Duration,
    /// Recent tokens by table, for `max_staleness`.
    recent: Mutex<HashMap<TableIdent, (std::time::Instant, String), foldhash::fast::RandomState>>,
    stats: TokenStats,
    /// The cache of immutable objects of an object-store lake.
    object_cache: Option<Arc<ObjectCache>>,
    /// Each snapshot's data files, kept for scan planning.
    files: files::FileIndex,
}

/// Version-token lookups: how many, and the time they took.
#[derive(Debug, Default)]
pub struct TokenStats {
    /// Lookups made against the catalog.
    pub lookups: std::sync::atomic::AtomicU64,
    /// Total time of those lookups, in microseconds.
    pub lookup_micros: std::sync::atomic::AtomicU64,
    /// Resolutions answered from a token younger than `max_staleness`.
    pub reused: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for Lake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lake")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// How many parsed table versions to keep before the cache is cleared.
const LOADED_CAPACITY: usize = 4096;

impl Lake {
    /// Connects to the catalog `config` names.
    ///
    /// # Errors
    /// [`Error::InvalidCatalogConfig`] for bad settings, [`Error::CatalogUnavailable`] when the
    /// catalog cannot be reached.
    pub async fn connect(config: LakeConfig) -> Result<Self> {
        config.validate()?;
        let kind = config.kind()?;
        let mut props: HashMap<String, String> = config
            .props
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let unavailable = |source: iceberg::Error| Error::CatalogUnavailable {
            catalog: config.name.clone(),
            source: Box::new(source),
        };
        // An object-store lake (or a REST catalog's, wherever its tables are) reads through
        // opendal's resolving storage with the `[storage]` credentials; a local one as before.
        let remote = scheme_of(&config.warehouse) != Scheme::Local
            || (kind == CatalogKind::Rest && config.warehouse.trim().is_empty());
        let mut object_cache = None;
        let factory: Arc<dyn StorageFactory> = if remote {
            for (k, v) in config.storage.with_environment().iceberg_props() {
                props.entry(k).or_insert(v);
            }
            let cache = Arc::new(ObjectCache::new(config.storage.cache));
            object_cache = Some(Arc::clone(&cache));
            Arc::new(CachingStorageFactory::new(
                Box::new(OpenDalResolvingStorageFactory::new()),
                cache,
            ))
        } else {
            Arc::new(LocalFsStorageFactory)
        };
        let catalog: Arc<dyn Catalog> = match kind {
            CatalogKind::Sqlite | CatalogKind::Postgres => {
                props.insert(SQL_CATALOG_PROP_URI.into(), config.uri.clone());
                props.insert(SQL_CATALOG_PROP_WAREHOUSE.into(), config.warehouse.clone());
                let style = if kind == CatalogKind::Postgres {
                    "DollarNumeric"
                } else {
                    "QMark"
                };
                props.insert(SQL_CATALOG_PROP_BIND_STYLE.into(), style.into());
                jdbc_schema::upgrade_v0(&config.uri).await?;
                let catalog = SqlCatalogBuilder::default()
                    .with_storage_factory(factory)
                    .load(config.name.clone(), props)
                    .await
                    .map_err(unavailable)?;
                Arc::new(catalog)
            }
            CatalogKind::Rest => {
                props.insert(REST_CATALOG_PROP_URI.into(), config.uri.clone());
                if !config.warehouse.is_empty() {
                    props.insert(REST_CATALOG_PROP_WAREHOUSE.into(), config.warehouse.clone());
                }
                let catalog = RestCatalogBuilder::default()
                    .with_storage_factory(factory)
                    .load(config.name.clone(), props)
                    .await
                    .map_err(unavailable)?;
                Arc::new(catalog)
            }
        };
        let tokens = TokenSource::connect(kind, &config).await?;
        // `[storage.cache] enabled = false`: nothing read from the lake is kept, decoded files
        // included (every statement reads the files).
        let cache = &config.storage.cache;
        let files = files::FileIndex::new(if cache.enabled {
            cache.decoded_bytes
        } else {
            0
        });
        Ok(Self {
            config,
            catalog,
            tokens,
            loaded: Mutex::new(HashMap::default()),
            max_staleness: std::time::Duration::ZERO,
            timeout: std::time::Duration::from_secs(10),
            recent: Mutex::new(HashMap::default()),
            stats: TokenStats::default(),
            object_cache,
            files,
        })
    }

    /// The kept data files of the snapshots read so far (scan planning).
    pub(crate) fn files(&self) -> &files::FileIndex {
        &self.files
    }

    /// The decoded small files' numbers (`None`: `[storage.cache] decoded_bytes = 0`).
    pub fn decoded_stats(&self) -> Option<decoded::DecodedStats> {
        self.files.decoded().map(|d| d.stats())
    }

    /// The object cache's numbers (`None` for a local lake, which has no object cache).
    pub fn object_cache_stats(&self) -> Option<ObjectCacheStats> {
        self.object_cache.as_ref().map(|c| c.stats())
    }

    /// Lets statements reuse a table's version token for up to `staleness` instead of looking it
    /// up every time (zero, the default, means every statement sees the latest commit).
    pub fn with_timeout(mut self, timeout: std::time::Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Builder: how old a table's version token may be (see [`Lake::resolve_within`]).
    pub fn with_max_staleness(mut self, staleness: std::time::Duration) -> Self {
        self.max_staleness = staleness;
        self
    }

    /// Version-token lookup statistics.
    pub fn token_stats(&self) -> &TokenStats {
        &self.stats
    }

    async fn token(
        &self,
        ident: &TableIdent,
        max_staleness: std::time::Duration,
    ) -> Result<Option<String>> {
        use std::sync::atomic::Ordering;
        if !max_staleness.is_zero() {
            let recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
            if let Some((at, location)) = recent.get(ident)
                && at.elapsed() < max_staleness
            {
                self.stats.reused.fetch_add(1, Ordering::Relaxed);
                return Ok(Some(location.clone()));
            }
        }
        let started = std::time::Instant::now();
        let location = self.tokens.lookup(&self.catalog, ident).await?;
        if let Some(location) = &location {
            self.looked_up(ident, started, location.clone());
        } else {
            self.count_lookup(started);
        }
        Ok(location)
    }

    /// Counts a token lookup begun at `started`.
    fn count_lookup(&self, started: std::time::Instant) {
        use std::sync::atomic::Ordering;
        self.stats.lookups.fetch_add(1, Ordering::Relaxed);
        self.stats
            .lookup_micros
            .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
    }

    /// Counts a token lookup begun at `started` that found `ident` at `location`, and keeps
    /// that as its recent token (known tables, staleness); no key is built when it is there.
    fn looked_up(&self, ident: &TableIdent, started: std::time::Instant, location: String) {
        self.count_lookup(started);
        let mut recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
        match recent.get_mut(ident) {
            // Most lookups find the version they found last: only the time moves.
            Some(slot) if slot.1 == location => slot.0 = started,
            Some(slot) => *slot = (started, location),
            None => {
                if recent.len() >= LOADED_CAPACITY {
                    recent.clear();
                }
                recent.insert(ident.clone(), (started, location));
            }
        }
    }

    /// The catalog configuration this lake was connected with.
    pub fn config(&self) -> &LakeConfig {
        &self.config
    }

    /// The underlying iceberg-rust catalog.
    pub fn catalog(&self) -> &Arc<dyn Catalog> {
        &self.catalog
    }

    /// Lists every namespace and its tables, as they are now.
    ///
    /// # Errors
    /// [`Error::CatalogUnavailable`] when the catalog fails.
    pub async fn directory(&self) -> Result<Directory> {
        self.bounded(|| "listing tables".into(), self.directory_now())
            .await
    }

    /// `work` against the catalog, failing with [`Error::CatalogUnavailable`] after the
    /// configured timeout (a frozen catalog must not hang statements). `what` names the work
    /// in that error (printed only then).
    async fn bounded<T>(
        &self,
        what: impl FnOnce() -> String,
        work: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        match tokio::time::timeout(self.timeout, work).await {
            Ok(r) => r,
            Err(_) => Err(Error::CatalogUnavailable {
                catalog: self.config.name.clone(),
                source: Box::new(iceberg::Error::new(
                    iceberg::ErrorKind::Unexpected,
                    format!(
                        "no answer within {:?} {} (catalog.timeout)",
                        self.timeout,
                        what()
                    ),
                )),
            }),
        }
    }

    async fn directory_now(&self) -> Result<Directory> {
        let unavailable = |source: iceberg::Error| Error::CatalogUnavailable {
            catalog: self.config.name.clone(),
            source: Box::new(source),
        };
        let mut schemas = BTreeMap::new();
        let namespaces = self
            .catalog
            .list_namespaces(None)
            .await
            .map_err(unavailable)?;
        for ns in namespaces {
            let mut tables: Vec<String> = self
                .catalog
                .list_tables(&ns)
                .await
                .map_err(unavailable)?
                .into_iter()
                .map(|t| t.name().to_string())
                .collect();
            tables.sort();
            schemas.insert(ns.join("."), tables);
        }
        Ok(Directory { schemas })
    }

    /// Resolves `schema.table` to its current version.
    ///
    /// # Errors
    /// [`Error::TableNotFound`] when there is no such table; catalog and metadata errors.
    pub async fn resolve(&self, schema: &str, table: &str) -> Result<ResolvedTable> {
        self.resolve_within(schema, table, self.max_staleness).await
    }

    /// Every table resolved so far, at the version last resolved (for metrics and the admin
    /// API; no catalog round trip).
    pub fn known_tables(&self) -> Vec<ResolvedTable> {
        let locations: Vec<String> = {
            let recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
            recent.values().map(|(_, l)| l.clone()).collect()
        };
        let mut tables: Vec<ResolvedTable> =
            locations.iter().filter_map(|l| self.cached(l)).collect();
        tables.sort_by_key(|t| t.ident.to_string());
        tables
    }

    /// The version of `schema.table` last resolved, without asking the catalog (`None`: never
    /// resolved yet). For estimates made before a statement's real resolution.
    pub fn peek(&self, schema: &str, table: &str) -> Option<ResolvedTable> {
        let ident = TableIdent::new(namespace_ident(schema), table.to_string());
        let location = {
            let recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
            recent.get(&ident)?.1.clone()
        };
        self.cached(&location)
    }

    /// Resolves `schema.table`, reusing a version resolved less than `max_staleness` ago
    /// (zero: always ask the catalog).
    ///
    /// # Errors
    /// As [`Lake::resolve`].
    pub async fn resolve_within(
        &self,
        schema: &str,
        table: &str,
        max_staleness: std::time::Duration,
    ) -> Result<ResolvedTable> {
        if max_staleness.is_zero()
            && let Some(resolved) = self.resolve_in_place(schema, table)
        {
            return Ok(resolved);
        }
        // Boxed: the catalog round trip holds far more state than the answer in place, and
        // inline it would be part of (and copied with) every plan's future.
        Box::pin(self.bounded(
            || format!("resolving {schema}.{table}"),
            self.resolve_now(schema, table, max_staleness),
        ))
        .await
    }

    /// `schema.table` at its current version when that is known without waiting: its token
    /// read in place ([`TokenSource::lookup_in_place`]) names metadata loaded before. No
    /// timer, no task: a lookup that would wait (another catalog, a locked file, a version
    /// not loaded yet) is left to [`Self::resolve_now`] (`None`).
    fn resolve_in_place(&self, schema: &str, table: &str) -> Option<ResolvedTable> {
        let started = std::time::Instant::now();
        let location = self.tokens.lookup_in_place(schema, table)??;
        let resolved = self.cached(&location)?;
        // Counted when it answers (else `resolve_now` looks up and counts).
        self.looked_up(&resolved.ident, started, location);
        Some(resolved)
    }

    async fn resolve_now(
        &self,
        schema: &str,
        table: &str,
        max_staleness: std::time::Duration,
    ) -> Result<ResolvedTable> {
        let ident = TableIdent::new(namespace_ident(schema), table.to_string());
        let not_found = || Error::TableNotFound {
            name: format!("{schema}.{table}"),
        };
        let location = match self.token(&ident, max_staleness).await? {
            Some(location) => location,
            None => return Err(not_found()),
        };
        if let Some(hit) = self.cached(&location) {
            return Ok(hit);
        }
        debug!(table = %ident, location = %location, "loading table metadata");
        let loaded = match self.catalog.load_table(&ident).await {
            Ok(t) => t,
            Err(e) if e.kind() == iceberg::ErrorKind::TableNotFound => return Err(not_found()),
            Err(e) => return Err(e.into()),
        };
        let resolved = Self::to_resolved(ident, loaded)?;
        let mut loaded = self.loaded.lock().unwrap_or_else(|p| p.into_inner());
        if loaded.len() >= LOADED_CAPACITY {
            loaded.clear();
        }
        loaded.insert(resolved.metadata_location.clone(), resolved.clone());
        Ok(resolved)
    }

    fn cached(&self, location: &str) -> Option<ResolvedTable> {
        let loaded = self.loaded.lock().unwrap_or_else(|p| p.into_inner());
        loaded.get(location).cloned()
    }

    fn to_resolved(ident: TableIdent, table: Table) -> Result<ResolvedTable> {
        let metadata_location = table.metadata_location().unwrap_or_default().to_string();
        let snapshot_id = table.metadata().current_snapshot_id();
        let schema = Arc::new(schema_to_arrow_schema(table.metadata().current_schema())?);
        Ok(TableVersion {
            ident,
            metadata_location,
            snapshot_id,
            table,
            schema,
        }
        .into())
    }
}

/// A dotted schema name as an Iceberg namespace (`a.b` → `["a", "b"]`).
pub fn namespace_ident(schema: &str) -> NamespaceIdent {
    let parts: Vec<String> = schema.split('.').map(str::to_string).collect();
    NamespaceIdent::from_vec(parts).unwrap_or_else(|_| NamespaceIdent::new(schema.to_string()))
}

#[cfg(test)]
#[path = "lake_tests.rs"]
mod tests;
