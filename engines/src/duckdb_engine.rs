//! Embedded DuckDB (bundled 1.5.5) reading the lake through DuckDB's own Iceberg extension:
//! `iceberg_scan('<metadata.json>', snapshot_from_id => <pinned id>)`, which applies position
//! and equality deletes itself. The extension binaries come from PyPI's
//! `duckdb-extension-{avro,iceberg,httpfs}` 1.5.5 wheels (`scripts/setup.sh` unpacks them) and
//! are loaded offline; nothing is downloaded at run time. A lake on S3 is read through httpfs
//! with one secret made from the lake's `[storage]` settings (endpoint, region, path style,
//! credentials).
//!
//! The bundled DuckDB has no ICU, so it computes in UTC; answers are instants and the frontends
//! render them in the session's time zone.
//!
//! DuckDB calls block, so each query runs on a blocking thread and hands its batches to the
//! async side through a bounded channel; dropping the stream interrupts the query.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use arrow::array::RecordBatch;
use async_trait::async_trait;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use duckdb::{Config, Connection};
use tokio::sync::mpsc;

use crate::conform::conform_batch;
use crate::dialect::{Dialect, prepare};
use crate::engine::{Engine, EngineRequest};
use crate::error::{Error, ErrorKind, Result};
use crate::idle::Idle;
use crate::semantics::Feature;

/// The DuckDB version the bundled library and the extension binaries must share.
pub const DUCKDB_VERSION: &str = "v1.5.5";

/// Options for the embedded DuckDB engine.
#[derive(Debug, Clone)]
pub struct DuckDbOptions {
    /// Folder holding `avro.duckdb_extension` and `iceberg.duckdb_extension` for
    /// [`DUCKDB_VERSION`].
    pub extension_dir: PathBuf,
    /// Worker threads DuckDB may use per query.
    pub threads: usize,
    /// Memory DuckDB may use, e.g. `2GB`.
    pub memory_limit: String,
    /// The object store the lake lives on (already completed from the environment), if any:
    /// httpfs is loaded and given these settings as its S3 secret.
    pub storage: Option<crate::lake::StorageConfig>,
}

/// Idle DuckDB connections kept for reuse.
const IDLE_CONNECTIONS: usize = 16;

/// The embedded DuckDB engine.
///
/// The database is opened (and its extensions loaded) by the first statement DuckDB runs, not
/// at startup: an estate that never routes to DuckDB keeps ~30 MB less resident (measured:
/// idle gateway 115 MB opened, 84 MB not). Missing extension files are still found at startup.
pub struct DuckDbEngine {
    options: DuckDbOptions,
    /// The extensions to load, in order.
    extensions: Vec<&'static str>,
    /// Kept to open more connections when all are busy; the reason it could not be opened
    /// (given to every statement after, without trying again).
    root: tokio::sync::OnceCell<std::result::Result<Mutex<Connection>, String>>,
    /// Idle connections to the one in-memory database (extensions loaded once, shared).
    idle: Arc<Idle<Pooled>>,
}

impl std::fmt::Debug for DuckDbEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DuckDbEngine").finish_non_exhaustive()
    }
}

fn unavailable(reason: String) -> Error {
    Error::EngineUnavailable {
        engine: "duckdb".into(),
        reason,
    }
}

impl DuckDbEngine {
    /// DuckDB with the extensions of `options.extension_dir`, opened by its first statement
    /// ([`Self::open_now`] opens it at once).
    ///
    /// # Errors
    /// [`Error::EngineUnavailable`] when the extensions are missing.
    pub fn try_new(options: &DuckDbOptions) -> Result<Self> {
        // avro first: iceberg's initialisation otherwise tries to install it; httpfs reads a
        // lake on S3.
        let mut extensions = vec!["avro", "iceberg"];
        if options.storage.is_some() {
            extensions.push("httpfs");
        }
        for ext in &extensions {
            let path = extension_path(&options.extension_dir, ext);
            if !path.is_file() {
                return Err(unavailable(format!(
                    "extension {} not found (scripts/setup.sh installs it; or set duckdb.extension_dir)",
                    path.display()
                )));
            }
        }
        Ok(Self {
            options: options.clone(),
            extensions,
            root: tokio::sync::OnceCell::new(),
            idle: Arc::new(Idle::new(IDLE_CONNECTIONS)),
        })
    }

    /// Opens the database now (a required DuckDB fails startup rather than its first query).
    ///
    /// # Errors
    /// [`Error::EngineUnavailable`] when it cannot be opened or an extension does not load.
    pub async fn open_now(&self) -> Result<()> {
        self.root().await.map(|_| ())
    }

    /// The database, opened on a blocking thread by the first caller.
    async fn root(&self) -> Result<&Mutex<Connection>> {
        let opened = self
            .root
            .get_or_init(|| async {
                let options = self.options.clone();
                let extensions = self.extensions.clone();
                match tokio::task::spawn_blocking(move || open(&options, &extensions)).await {
                    Ok(Ok(conn)) => {
                        tracing::info!("duckdb opened");
                        Ok(Mutex::new(conn))
                    }
                    Ok(Err(e)) => Err(e.to_string()),
                    Err(e) => Err(format!("opening it stopped: {e}")),
                }
            })
            .await;
        opened
            .as_ref()
            .map_err(|reason| unavailable(reason.clone()))
    }

    async fn connection(&self) -> Result<Pooled> {
        if let Some(c) = self.idle.take() {
            return Ok(c);
        }
        let conn = self
            .root()
            .await?
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .try_clone()
            .map_err(|e| duck_error(&e))?;
        Ok(Pooled {
            conn,
            zone: "UTC".into(),
        })
    }
}

/// Opens an in-memory DuckDB computing in UTC with PostgreSQL's division and loads
/// `extensions` from `options.extension_dir`.
fn open(options: &DuckDbOptions, extensions: &[&str]) -> Result<Connection> {
    let config = Config::default()
        .allow_unsigned_extensions()
        .and_then(|c| c.enable_autoload_extension(false))
        .and_then(|c| c.with("autoinstall_known_extensions", "false"))
        .and_then(|c| c.threads(options.threads.max(1) as i64))
        .and_then(|c| c.max_memory(&options.memory_limit))
        .map_err(|e| unavailable(e.to_string()))?;
    let conn =
        Connection::open_in_memory_with_flags(config).map_err(|e| unavailable(e.to_string()))?;
    for ext in extensions {
        let path = extension_path(&options.extension_dir, ext);
        conn.execute_batch(&format!(
            "LOAD '{}'",
            path.display().to_string().replace('\'', "''")
        ))
        .map_err(|e| unavailable(format!("loading {}: {e}", path.display())))?;
    }
    if let Some(storage) = &options.storage {
        conn.execute_batch(&s3_secret(storage))
            .map_err(|e| unavailable(format!("making its S3 secret: {e}")))?;
        if storage.cache.enabled {
            conn.execute_batch(IMMUTABLE_OBJECT_CACHING)
                .map_err(|e| unavailable(format!("turning its object caches on: {e}")))?;
        }
    }
    // The official build has ICU, whose time zone is the machine's: compute in UTC, as the
    // bundled build (without ICU) did, whatever the host's zone.
    conn.execute_batch("SET GLOBAL TimeZone = 'UTC'")
        .map_err(|e| unavailable(format!("setting its time zone: {e}")))?;
    conn.execute_batch(PG_DIVISION)
        .map_err(|e| unavailable(format!("setting up PostgreSQL's division: {e}")))?;
    Ok(conn)
}

/// A connection and the `TimeZone` it computes in (`SET TimeZone` is per connection).
struct Pooled {
    conn: Connection,
    zone: String,
}

impl Pooled {
    /// Computes in `zone` from now on.
    fn set_zone(&mut self, zone: &str) -> std::result::Result<(), duckdb::Error> {
        if self.zone != zone {
            self.conn
                .execute_batch(&format!("SET TimeZone = '{}'", zone.replace('\'', "''")))?;
            self.zone = zone.to_string();
        }
        Ok(())
    }
}

/// The zone DuckDB (ICU) computes a session's `TimeZone` in: a tz database name as it is, a
/// whole-hour offset as ICU's `Etc/GMT∓h` (POSIX signs: `Etc/GMT-5` is five hours east);
/// `None` for an offset ICU has no zone for (`+05:30`).
fn duckdb_zone(time_zone: &str) -> Option<String> {
    if crate::session_zone::is_utc(time_zone) {
        return Some("UTC".into());
    }
    if time_zone.parse::<chrono_tz::Tz>().is_ok() {
        return Some(time_zone.to_string());
    }
    let seconds = match crate::pg_text::zone_for(time_zone) {
        crate::pg_text::Zone::Fixed(offset) => offset.local_minus_utc(),
        crate::pg_text::Zone::Named(_) => return None,
    };
    (seconds % 3600 == 0).then(|| match seconds / 3600 {
        h if h > 0 => format!("Etc/GMT-{h}"),
        h => format!("Etc/GMT+{}", -h),
    })
}

/// PostgreSQL's division: `/` of integers is an integer (truncated toward zero, as DuckDB's
/// `integer_division` does), and a zero divisor of `/` or `%` is an error, where DuckDB
/// answers NULL or infinity. The dialect wraps every divisor in `lakegate_divisor`.
const PG_DIVISION: &str = "SET GLOBAL integer_division = true; \
     CREATE OR REPLACE MACRO lakegate_divisor(x) AS \
     CASE WHEN x = 0 THEN error('division by zero') ELSE x END;";

/// How DuckDB reports `lakegate_divisor`'s error.
const DIVISION_BY_ZERO: &str = "Invalid Input Error: division by zero";

/// DuckDB's own caches for remote files, trusted without revalidation: Iceberg never rewrites a
/// file under the same path, so a cached Parquet range, footer or HEAD answer stays true (the
/// default re-validates every cached file with a request per query).
const IMMUTABLE_OBJECT_CACHING: &str = "SET GLOBAL enable_external_file_cache = true; \
     SET GLOBAL validate_external_file_cache = 'NO_VALIDATION'; \
     SET GLOBAL parquet_metadata_cache = true; \
     SET GLOBAL enable_http_metadata_cache = true;";

/// `CREATE SECRET` for httpfs from the lake's storage settings.
fn s3_secret(storage: &crate::lake::StorageConfig) -> String {
    let quote = |v: &str| format!("'{}'", v.replace('\'', "''"));
    let mut parts = vec![
        "TYPE s3".to_string(),
        format!("REGION {}", quote(storage.region())),
        format!(
            "URL_STYLE {}",
            quote(if storage.path_style() {
                "path"
            } else {
                "vhost"
            })
        ),
    ];
    if let Some(endpoint) = &storage.endpoint {
        // DuckDB takes the host (and port) and whether to use TLS separately.
        let (tls, host) = match endpoint.split_once("://") {
            Some((scheme, rest)) => (!scheme.eq_ignore_ascii_case("http"), rest),
            None => (true, endpoint.as_str()),
        };
        parts.push(format!("ENDPOINT {}", quote(host.trim_end_matches('/'))));
        parts.push(format!("USE_SSL {tls}"));
    }
    match (&storage.access_key_id, &storage.secret_access_key) {
        (Some(key), Some(secret)) => {
            parts.push(format!("KEY_ID {}", quote(key)));
            parts.push(format!("SECRET {}", quote(secret)));
            if let Some(token) = &storage.session_token {
                parts.push(format!("SESSION_TOKEN {}", quote(token)));
            }
        }
        // No static keys: DuckDB's own AWS credential chain.
        _ => parts.push("PROVIDER credential_chain".to_string()),
    }
    format!("CREATE SECRET lakegate_s3 ({})", parts.join(", "))
}

/// Where a DuckDB extension binary lives under `dir`.
pub fn extension_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.duckdb_extension"))
}

/// Interrupts the DuckDB query when the consumer goes away before it finished.
struct InterruptOnDrop {
    handle: Arc<duckdb::InterruptHandle>,
    done: Arc<AtomicBool>,
}

impl Drop for InterruptOnDrop {
    fn drop(&mut self) {
        if !self.done.load(Ordering::Acquire) {
            self.handle.interrupt();
        }
    }
}

#[async_trait]
impl Engine for DuckDbEngine {
    fn name(&self) -> &str {
        "duckdb"
    }

    /// Measured against PostgreSQL (tests/conformance): DuckDB divides and averages decimals
    /// in double precision, prints floats its own way and casts a float to a decimal from its
    /// binary value (Trino and Spark from its shortest text; PostgreSQL from 15 significant
    /// digits); its timestamps, dates and intervals print as PostgreSQL's.
    fn verified(&self) -> Option<&'static [&'static str]> {
        Some(crate::verified::DUCKDB)
    }

    fn inexact(&self) -> &'static [Feature] {
        &[
            Feature::FloatText,
            Feature::NumericDivision,
            Feature::NumericAverage,
            Feature::FractionalDatePart,
            Feature::FloatToNumeric,
            Feature::EmbeddedFunction,
        ]
    }

    /// DuckDB computes in the session's zone ([`duckdb_zone`]) when ICU has one for it.
    fn refuses(&self, feature: Feature, settings: &crate::engine::Settings) -> bool {
        match feature {
            Feature::SessionZone => duckdb_zone(&settings.time_zone).is_none(),
            other => self.inexact().contains(&other),
        }
    }

    fn ready(&self) -> bool {
        self.root.initialized()
    }

    async fn execute(&self, request: EngineRequest<'_>) -> Result<SendableRecordBatchStream> {
        let (schema, sql) = prepare(&request, "duckdb", Dialect::DuckDb)?;
        let zone = duckdb_zone(&request.settings.time_zone).unwrap_or_else(|| "UTC".into());
        let mut conn = self.connection().await?;
        let done = Arc::new(AtomicBool::new(false));
        let guard = InterruptOnDrop {
            handle: conn.conn.interrupt_handle(),
            done: done.clone(),
        };
        let (tx, rx) = mpsc::channel::<datafusion::error::Result<RecordBatch>>(2);
        let (first_tx, first_rx) = tokio::sync::oneshot::channel::<Result<()>>();
        let this_schema = schema.clone();
        let idle = self.idle.clone();
        tokio::task::spawn_blocking(move || {
            let outcome = match conn.set_zone(&zone) {
                Ok(()) => run_blocking(&conn.conn, &sql, &this_schema, &tx, first_tx),
                Err(e) => {
                    let _ = first_tx.send(Err(duck_error(&e)));
                    Ok(())
                }
            };
            if let Err(e) = outcome {
                let _ = tx.blocking_send(Err(e.into_datafusion()));
            }
            done.store(true, Ordering::Release);
            idle.give_back(conn);
        });
        // Errors before the first batch (syntax, missing files) are returned, not streamed.
        match first_rx.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(Error::Internal("duckdb worker stopped".into())),
        }
        let stream = futures::stream::unfold((rx, guard), |(mut rx, guard)| async move {
            rx.recv().await.map(|b| (b, (rx, guard)))
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            schema.clone(),
            stream,
        )))
    }

    async fn health(&self) -> Result<()> {
        let conn = self.connection().await?;
        let conn =
            tokio::task::spawn_blocking(move || conn.conn.execute_batch("SELECT 1").map(|_| conn))
                .await
                .map_err(|e| Error::Internal(e.to_string()))?
                .map_err(|e| duck_error(&e))?;
        self.idle.give_back(conn);
        Ok(())
    }
}

fn run_blocking(
    conn: &Connection,
    sql: &str,
    schema: &arrow::datatypes::SchemaRef,
    tx: &mpsc::Sender<datafusion::error::Result<RecordBatch>>,
    first: tokio::sync::oneshot::Sender<Result<()>>,
) -> Result<()> {
    let prepared = (|| {
        let mut stmt = conn.prepare(sql)?;
        // Executes in streaming mode; batches are then pulled with `step`, which reports
        // errors (the iterator `stream_arrow` returns would panic on them).
        let _ = stmt.stream_arrow([])?;
        Ok::<_, duckdb::Error>(stmt)
    })();
    let stmt = match prepared {
        Ok(stmt) => {
            let _ = first.send(Ok(()));
            stmt
        }
        Err(e) => {
            let _ = first.send(Err(duck_error(&e)));
            return Ok(());
        }
    };
    loop {
        let chunk = stmt.step().map_err(|e| duck_error(&e))?;
        let Some(array) = chunk else { return Ok(()) };
        let batch = conform_batch(&RecordBatch::from(&array), schema)?;
        if tx.blocking_send(Ok(batch)).is_err() {
            return Ok(()); // the client went away
        }
    }
}

/// A DuckDB error with its kind, from DuckDB's message prefixes.
fn duck_error(e: &duckdb::Error) -> Error {
    let message = e.to_string();
    let kind = if message.starts_with("Parser Error") {
        ErrorKind::Syntax
    } else if message.starts_with("Catalog Error") && message.contains("Function") {
        ErrorKind::UndefinedFunction
    } else if message.starts_with("Binder Error") && message.contains("column") {
        ErrorKind::UndefinedColumn
    } else if message.starts_with(DIVISION_BY_ZERO) {
        return Error::Value {
            kind: ErrorKind::DivisionByZero,
            message: "division by zero".into(),
        };
    } else if message.starts_with("Out of Range") {
        ErrorKind::NumericOutOfRange
    } else if message.starts_with("Conversion Error") {
        ErrorKind::DataException
    } else if message.starts_with("Not implemented") {
        ErrorKind::Unsupported
    } else if message.starts_with("INTERRUPT") || message.contains("Interrupted") {
        ErrorKind::Canceled
    } else if message.contains("HTTP 403") {
        // httpfs: the object store refused the secret's credentials.
        ErrorKind::StorageDenied
    } else {
        ErrorKind::Internal
    };
    Error::Engine {
        engine: "duckdb".into(),
        kind,
        message,
    }
}
