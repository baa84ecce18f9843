//! `pg_catalog` over the lake, so BI tools can list schemas, tables and columns.
//!
//! The emulation itself comes from `datafusion-pg-catalog` (pg_class, pg_namespace,
//! pg_attribute, pg_type, ... and functions like `format_type`); this module feeds it the
//! lake's namespaces and tables and adds the session functions whose answers depend on the
//! connection (`current_database()`, `current_schema()`, `current_setting()`, `version()`).

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, StringArray};
use arrow::datatypes::{DataType, SchemaRef};
use async_trait::async_trait;
use datafusion::catalog::SchemaProvider;
use datafusion::datasource::TableType;
use datafusion::error::DataFusionError;
use datafusion::logical_expr::{ColumnarValue, ScalarUDF, Volatility, create_udf};
use datafusion_pg_catalog::pg_catalog::catalog_info::CatalogInfo;
use datafusion_pg_catalog::pg_catalog::context::EmptyContextProvider;
use datafusion_pg_catalog::pg_catalog::{PgCatalogSchemaProvider, PgCatalogStaticTables};

use crate::engine::Settings;
use crate::lake::Lake;

/// The PostgreSQL version reported until [`set_server_version`] is called.
const DEFAULT_SERVER_VERSION: &str = "16.6";

static SERVER_VERSION: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Reports PostgreSQL `version` (`15.14`, or `15.14 (Debian …)`) from now on: the catalog
/// mirror's, so that the catalog clients read is the one of the version they were told. The
/// first call wins.
pub fn set_server_version(version: &str) {
    if let Some(v) = version.split_whitespace().next().filter(|v| !v.is_empty()) {
        let _ = SERVER_VERSION.set(v.to_string());
    }
}

static SERVER_LOCALE: std::sync::OnceLock<(String, String)> = std::sync::OnceLock::new();

/// Reports `lc_collate` and `lc_ctype` from now on: the catalog mirror database's (what
/// PostgreSQL itself says for it). The first call wins.
pub fn set_server_locale(collate: &str, ctype: &str) {
    let _ = SERVER_LOCALE.set((collate.to_string(), ctype.to_string()));
}

/// (`lc_collate`, `lc_ctype`): `C` (byte order, as every engine compares text) until the
/// mirror's are known.
pub fn server_locale() -> (&'static str, &'static str) {
    SERVER_LOCALE
        .get()
        .map_or(("C", "C"), |(a, b)| (a.as_str(), b.as_str()))
}

/// `server_version`: `16.6`, or the catalog mirror's.
pub fn server_version() -> &'static str {
    SERVER_VERSION
        .get()
        .map_or(DEFAULT_SERVER_VERSION, String::as_str)
}

/// `server_version_num`: `160006` for 16.6.
pub fn server_version_num() -> String {
    let mut parts = server_version()
        .split(|c: char| !c.is_ascii_digit())
        .map(|p| p.parse::<u32>().unwrap_or(0));
    let major = parts.next().unwrap_or(0);
    let minor = parts.next().unwrap_or(0);
    (major * 10_000 + minor).to_string()
}

/// The server version string reported by `version()`; clients parse "PostgreSQL N.M".
pub fn version_string() -> String {
    format!(
        "PostgreSQL {} (lakegate {}) on {}-linux, compiled by rustc, 64-bit",
        server_version(),
        env!("CARGO_PKG_VERSION"),
        std::env::consts::ARCH
    )
}

/// Schemas every database has besides the lake's namespaces, and lakegate's own schema.
pub use lakegate_sql::classify::{LAKEGATE_SCHEMA, SYSTEM_SCHEMAS};

/// The lake as `datafusion-pg-catalog` sees it: one database whose schemas are namespaces.
#[derive(Debug, Clone)]
pub struct LakeCatalogInfo {
    lake: Arc<Lake>,
    database: String,
    visible: Option<crate::engine::Visibility>,
}

impl LakeCatalogInfo {
    /// Presents `lake` as the database `database`.
    pub fn new(lake: Arc<Lake>, database: String) -> Self {
        Self {
            lake,
            database,
            visible: None,
        }
    }

    /// The same catalog showing only the tables `visible` allows.
    pub fn with_visibility(mut self, visible: Option<crate::engine::Visibility>) -> Self {
        self.visible = visible;
        self
    }

    fn shows(&self, schema: &str, table: &str) -> bool {
        self.visible
            .as_ref()
            .is_none_or(|v| (v.allows)(schema, table))
    }
}

fn ext(e: crate::Error) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

#[async_trait]
impl CatalogInfo for LakeCatalogInfo {
    async fn catalog_names(&self) -> Result<Vec<String>, DataFusionError> {
        Ok(vec![self.database.clone()])
    }

    async fn schema_names(&self, catalog: &str) -> Result<Option<Vec<String>>, DataFusionError> {
        if catalog != self.database {
            return Ok(None);
        }
        let dir = self.lake.directory().await.map_err(ext)?;
        let mut names: Vec<String> = dir
            .schemas
            .iter()
            .filter(|(s, tables)| tables.iter().any(|t| self.shows(s, t)))
            .map(|(s, _)| s.clone())
            .collect();
        names.extend(SYSTEM_SCHEMAS.iter().map(|s| s.to_string()));
        Ok(Some(names))
    }

    async fn table_names(
        &self,
        catalog: &str,
        schema: &str,
    ) -> Result<Option<Vec<String>>, DataFusionError> {
        if catalog != self.database || SYSTEM_SCHEMAS.contains(&schema) {
            return Ok(None);
        }
        let dir = self.lake.directory().await.map_err(ext)?;
        Ok(dir.schemas.get(schema).map(|tables| {
            tables
                .iter()
                .filter(|t| self.shows(schema, t))
                .cloned()
                .collect()
        }))
    }

    async fn table_schema(
        &self,
        catalog: &str,
        schema: &str,
        table: &str,
    ) -> Result<Option<SchemaRef>, DataFusionError> {
        if catalog != self.database
            || SYSTEM_SCHEMAS.contains(&schema)
            || !self.shows(schema, table)
        {
            return Ok(None);
        }
        match self.lake.resolve(schema, table).await {
            Ok(t) => Ok(Some(t.schema.clone())),
            Err(crate::Error::TableNotFound { .. }) => Ok(None),
            Err(e) => Err(ext(e)),
        }
    }

    async fn table_type(
        &self,
        catalog: &str,
        schema: &str,
        table: &str,
    ) -> Result<Option<TableType>, DataFusionError> {
        Ok(self
            .table_schema(catalog, schema, table)
            .await?
            .map(|_| TableType::Base))
    }
}

/// Builds the shared `pg_catalog` schema. One instance serves every query so that the OIDs it
/// hands out stay stable across statements (psql and asyncpg look tables up by OID).
///
/// # Errors
/// When the static catalog tables bundled with `datafusion-pg-catalog` fail to load.
pub fn pg_catalog_schema(
    lake: Arc<Lake>,
    database: String,
) -> Result<Arc<dyn SchemaProvider>, DataFusionError> {
    pg_catalog_schema_for(lake, database, None, None)
}

/// `pg_catalog` over the lake as `visible` lets one session see it; `static_tables` (built
/// once per engine) are shared between views.
pub fn pg_catalog_schema_for(
    lake: Arc<Lake>,
    database: String,
    visible: Option<crate::engine::Visibility>,
    static_tables: Option<Arc<PgCatalogStaticTables>>,
) -> Result<Arc<dyn SchemaProvider>, DataFusionError> {
    let static_tables = match static_tables {
        Some(s) => s,
        None => Arc::new(PgCatalogStaticTables::try_new()?),
    };
    let info = LakeCatalogInfo::new(lake, database.clone()).with_visibility(visible);
    let provider =
        PgCatalogSchemaProvider::try_new(info.clone(), static_tables, EmptyContextProvider)?;
    Ok(Arc::new(crate::pg_attribute::PgCatalogSchema::new(
        Arc::new(provider),
        info,
        database,
    )))
}

fn constant_text_udf(name: &str, value: String, volatility: Volatility) -> ScalarUDF {
    let func = move |_args: &[ColumnarValue]| {
        Ok(ColumnarValue::Scalar(
            datafusion::scalar::ScalarValue::Utf8(Some(value.clone())),
        ))
    };
    create_udf(name, vec![], DataType::Utf8, volatility, Arc::new(func))
}

/// PostgreSQL type names (and common aliases) → OIDs, for `to_regtype`.
fn type_oids() -> &'static std::collections::HashMap<String, i32> {
    static OIDS: std::sync::OnceLock<std::collections::HashMap<String, i32>> =
        std::sync::OnceLock::new();
    OIDS.get_or_init(|| {
        let mut map = std::collections::HashMap::new();
        for oid in 0..6000u32 {
            if let Some(t) = postgres_types::Type::from_oid(oid) {
                map.insert(t.name().to_string(), oid as i32);
            }
        }
        for (alias, name) in [
            ("integer", "int4"),
            ("int", "int4"),
            ("bigint", "int8"),
            ("smallint", "int2"),
            ("boolean", "bool"),
            ("real", "float4"),
            ("double precision", "float8"),
            ("character varying", "varchar"),
            ("decimal", "numeric"),
            ("timestamp without time zone", "timestamp"),
            ("timestamp with time zone", "timestamptz"),
            ("time without time zone", "time"),
        ] {
            if let Some(oid) = map.get(name).copied() {
                map.insert(alias.to_string(), oid);
            }
        }
        map
    })
}

/// `pg_*_is_visible(oid)`: every object lakegate lists is on the search path.
fn visible_udf(name: &str) -> ScalarUDF {
    let f = |args: &[ColumnarValue]| {
        let arrays = ColumnarValue::values_to_arrays(args)?;
        let n = arrays.first().map_or(1, |a| a.len());
        Ok(ColumnarValue::Array(Arc::new(
            arrow::array::BooleanArray::from(vec![true; n]),
        )))
    };
    create_udf(
        name,
        vec![DataType::Int32],
        DataType::Boolean,
        Volatility::Stable,
        Arc::new(f),
    )
}

/// `to_regtype(name)`: the type's OID, NULL when there is no such type.
fn to_regtype(args: &[ColumnarValue]) -> Result<ColumnarValue, DataFusionError> {
    let arrays = ColumnarValue::values_to_arrays(args)?;
    let names = arrays
        .first()
        .and_then(|a| a.as_any().downcast_ref::<StringArray>())
        .ok_or_else(|| DataFusionError::Plan("to_regtype() takes a type name".into()))?;
    let oids: arrow::array::Int32Array = names
        .iter()
        .map(|n| {
            n.and_then(|n| {
                let n = n
                    .trim()
                    .trim_start_matches("pg_catalog.")
                    .to_ascii_lowercase();
                type_oids().get(&n).copied()
            })
        })
        .collect();
    Ok(ColumnarValue::Array(Arc::new(oids)))
}

/// Functions whose answer depends on the session: registered per statement.
pub fn session_udfs(database: &str, settings: &Settings) -> Vec<ScalarUDF> {
    let schema = settings
        .search_path
        .first()
        .cloned()
        .unwrap_or_else(|| "public".to_string());
    let settings_for_lookup = settings.clone();
    let current_setting = move |args: &[ColumnarValue]| {
        let arrays = ColumnarValue::values_to_arrays(args)?;
        let names = arrays
            .first()
            .and_then(|a| a.as_any().downcast_ref::<StringArray>())
            .ok_or_else(|| {
                DataFusionError::Plan("current_setting() takes a setting name".to_string())
            })?;
        let mut out = Vec::with_capacity(names.len());
        for name in names.iter() {
            let value = match name {
                None => None,
                Some(n) => match settings_for_lookup.get(n) {
                    Some(v) => Some(v),
                    None => {
                        return Err(DataFusionError::Plan(format!(
                            "unrecognized configuration parameter \"{n}\""
                        )));
                    }
                },
            };
            out.push(value);
        }
        let array: ArrayRef = Arc::new(StringArray::from(out));
        Ok(ColumnarValue::Array(array))
    };
    let set_config = |args: &[ColumnarValue]| {
        // Returns the new value, as PostgreSQL does; the gateway applies literal
        // `SELECT set_config(...)` calls to the session before planning.
        match args.get(1) {
            Some(v) => Ok(v.clone()),
            None => Err(DataFusionError::Plan(
                "set_config(name, value, is_local)".into(),
            )),
        }
    };
    vec![
        create_udf(
            "set_config",
            vec![DataType::Utf8, DataType::Utf8, DataType::Boolean],
            DataType::Utf8,
            Volatility::Volatile,
            Arc::new(set_config),
        ),
        visible_udf("pg_type_is_visible"),
        visible_udf("pg_function_is_visible"),
        create_udf(
            "to_regtype",
            vec![DataType::Utf8],
            DataType::Int32,
            Volatility::Stable,
            Arc::new(to_regtype),
        ),
        constant_text_udf("version", version_string(), Volatility::Immutable),
        constant_text_udf("current_database", database.to_string(), Volatility::Stable),
        constant_text_udf("current_catalog", database.to_string(), Volatility::Stable),
        constant_text_udf("current_schema", schema, Volatility::Stable),
        constant_text_udf("current_user", settings.user.clone(), Volatility::Stable),
        constant_text_udf("session_user", settings.user.clone(), Volatility::Stable),
        constant_text_udf("user", settings.user.clone(), Volatility::Stable),
        create_udf(
            "current_setting",
            vec![DataType::Utf8],
            DataType::Utf8,
            Volatility::Stable,
            Arc::new(current_setting),
        ),
    ]
}
