//! Builds the services from a [`Config`] and owns the servers' start and stop: the lake, the
//! engines, the router, the history, the maintenance loop and the security rules become one
//! [`GatewayService`]; the pgwire, Flight SQL and HTTP endpoints are bound around it and run
//! until shutdown, when running queries get `limits.shutdown_grace` to finish.

use std::net::SocketAddr;
use std::sync::Arc;

use lakegate_engines::datafusion_engine::{DataFusionEngine, DataFusionOptions};
use lakegate_engines::duckdb_engine::{DuckDbEngine, DuckDbOptions};
use lakegate_engines::spark::{SparkEngine, SparkOptions};
use lakegate_engines::trino::{TrinoEngine, TrinoOptions};
use lakegate_engines::{Engine, Lake};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use lakegate_maintenance::Maintainer;

use crate::config::Config;
use crate::error::{Error, Result};
use crate::frontend::Server;
use crate::frontend::flight::{FlightServer, FlightSqlFrontend};
use crate::frontend::http::HttpServer;
use crate::frontend::pg::{PgHandlers, PgServer};
use crate::observe::history::QueryHistory;
use crate::observe::metrics::Metrics;
use crate::routing::Router;
use crate::security::Security;
use crate::security::access::Access;
use crate::security::auth::Auth;
use crate::security::mask::Masks;
use crate::service::{Engines, GatewayService, ServiceParts};

/// Connects to the lake and builds the engine and the query service every frontend shares.
///
/// # Errors
/// Catalog connection failures, engine setup failures.
pub async fn build_service(config: &Config) -> Result<Arc<GatewayService>> {
    config.validate()?;
    let lake = Arc::new(
        Lake::connect(config.lake())
            .await
            .map_err(|e| match e {
                lakegate_engines::Error::InvalidCatalogConfig { setting, reason } => {
                    Error::Config {
                        setting: setting.into(),
                        reason,
                    }
                }
                other => Error::Engine(other),
            })?
            .with_max_staleness(config.cache.max_staleness)
            .with_timeout(config.catalog.timeout),
    );
    // First: the mirror sets the PostgreSQL version every engine and session reports.
    let mirror =
        crate::mirror::CatalogMirror::start(&config.pg_catalog, &config.pg.database, lake.clone())
            .await?;
    let datafusion = DataFusionOptions {
        database: config.pg.database.clone(),
        target_partitions: config.datafusion.target_partitions,
        batch_size: config.datafusion.batch_size,
        memory_limit: config.datafusion.memory_limit_mb.saturating_mul(1 << 20),
    };
    let planner = Arc::new(DataFusionEngine::try_new(lake.clone(), datafusion.clone())?);
    // The accelerator indexes the columns the maintainer's telemetry finds hot; the maintainer
    // is built after the engines.
    let heat = Arc::new(std::sync::OnceLock::new());
    let accelerator =
        crate::acceleration::accelerator(&config.acceleration, lake.clone(), heat.clone())?;
    let mut engines = build_engines(config, planner).await?;
    if let Some(accelerator) = &accelerator {
        let engine = DataFusionEngine::accelerated(lake.clone(), datafusion, accelerator.clone())?;
        engines.all.insert(1, Arc::new(engine));
        engines.accelerator = Some(accelerator.clone());
    }
    info!(engines = ?engines.names(), default = %engines.default, "engines");
    let rules_dir = (!config.routing.rules_dir.is_empty())
        .then(|| std::path::PathBuf::from(&config.routing.rules_dir));
    let router = Arc::new(Router::new(
        rules_dir.as_deref(),
        &engines.names(),
        &engines.default,
    )?);
    router.spawn_reload();
    let history = Arc::new(if config.history.path.is_empty() {
        QueryHistory::new(config.history.capacity)
    } else {
        QueryHistory::persistent(
            config.history.capacity,
            std::path::Path::new(&config.history.path),
        )
        .map_err(|e| Error::Config {
            setting: "history.path".into(),
            reason: format!("{}: {e}", config.history.path),
        })?
    });
    let learned = router.learn_from(&history.all());
    if learned > 0 {
        info!(
            queries = learned,
            "routing statistics rebuilt from the kept history"
        );
    }
    let auth = Arc::new(Auth::from_config(
        &config.auth,
        &[
            ("pg.listen", config.pg_listen_addr()?),
            ("flight.listen", config.flight_listen_addr()?),
            ("http.listen", config.http_listen_addr()?),
        ],
    )?);
    let maintainer = Maintainer::new(lake.clone(), config.maintenance.clone()).await?;
    if config.maintenance.executor == lakegate_maintenance::executor::ExecutorKind::Spark {
        maintainer.set_executor(Arc::new(spark_executor(config)?));
    }
    history.set_telemetry(maintainer.telemetry().clone());
    if let Some(accelerator) = &accelerator {
        // Set once, here; a second set cannot happen.
        let _ = heat.set(maintainer.clone());
        accelerator.spawn();
    }
    let service = Arc::new(GatewayService::new(ServiceParts {
        lake,
        engines,
        cache: config.cache.clone(),
        router,
        history,
        maintainer,
        security: Security {
            auth,
            access: Access::new(config.access.clone())?,
            masks: Masks::new(config.mask.clone(), config.auth.mask_salt.clone())?,
            max_result_bytes: config.limits.max_result_bytes,
        },
        max_call_nesting: config.limits.max_call_nesting,
        mirror,
        agents: Arc::new(crate::agents::Agents::new(config.mcp.clone())),
    }));
    let replayed = service.replay_history();
    if replayed > 0 {
        info!(
            queries = replayed,
            "query heat rebuilt from the kept history"
        );
    }
    if config.state.enabled() {
        share_state(&service, &config.state).await?;
    }
    Ok(service)
}

/// The Spark session big compactions run in (`[maintenance] executor = "spark"`).
fn spark_executor(config: &Config) -> Result<lakegate_maintenance::executor::SparkExecutor> {
    if config.spark.url.is_empty() {
        return Err(Error::Config {
            setting: "maintenance.executor".into(),
            reason: "`spark` needs [spark] url (a Spark Connect server with the lake's \
                     Iceberg catalog)"
                .into(),
        });
    }
    let engine = SparkEngine::try_new(spark_options(config))?;
    Ok(lakegate_maintenance::executor::SparkExecutor::new(
        Arc::new(engine),
    ))
}

fn spark_options(config: &Config) -> SparkOptions {
    SparkOptions {
        url: config.spark.url.clone(),
        catalog: if config.spark.catalog.is_empty() {
            config.catalog.name.clone()
        } else {
            config.spark.catalog.clone()
        },
        user: if config.spark.user.is_empty() {
            "lakegate".into()
        } else {
            config.spark.user.clone()
        },
        connect_timeout: std::time::Duration::from_secs(2),
    }
}

/// Joins the gateways sharing `[state]`: the maintenance leader lease and table locks, the
/// operations log and the query history in the database; other replicas' queries feed this
/// one's maintenance heat (so whichever leads knows the whole estate's).
async fn share_state(
    service: &Arc<GatewayService>,
    config: &lakegate_maintenance::state::StateConfig,
) -> Result<()> {
    let state = lakegate_maintenance::state::SharedState::connect(config).await?;
    service.maintainer().share(Arc::clone(&state)).await?;
    crate::agents::approvals::share(
        Arc::clone(service.agents()),
        Arc::clone(&state),
        CancellationToken::new(),
    );
    let mut remote = service
        .history()
        .share(Arc::clone(&state), CancellationToken::new());
    let feeder = Arc::clone(service);
    tokio::spawn(async move {
        while let Some(record) = remote.recv().await {
            feeder.replay_record(&record);
        }
    });
    info!(
        replica = state.replica(),
        "sharing state with other gateways"
    );
    Ok(())
}

/// `lakegate mcp`: serves MCP on stdin/stdout as `user` until the client closes it. With
/// `admin_http`, the HTTP admin API (approvals of held statements, metrics) is served too, on
/// `http.listen`; its address goes to stderr (stdout is the protocol's).
///
/// # Errors
/// Catalog and engine failures, an unknown user, a bind failure.
pub async fn run_mcp_stdio(config: &Config, user: &str, admin_http: bool) -> Result<()> {
    let service = build_service(config).await?;
    let tools = Arc::new(crate::frontend::mcp::tools::Tools::new(
        service.clone(),
        config.pg.database.clone(),
        config.pg.default_schema.clone(),
    ));
    let shutdown = CancellationToken::new();
    let admin = if admin_http {
        let metrics = Arc::new(Metrics::new().map_err(|e| Error::Config {
            setting: "http".into(),
            reason: e.to_string(),
        })?);
        service.history().set_metrics(metrics.clone());
        let http = HttpServer::bind(config.http_listen_addr()?, service, metrics, None).await?;
        eprintln!("lakegate admin api listening http={}", http.local_addr());
        Some(tokio::spawn(Box::new(http).run(shutdown.clone())))
    } else {
        None
    };
    let served = crate::frontend::mcp::http::serve_stdio(tools, user).await;
    shutdown.cancel();
    if let Some(admin) = admin {
        let _ = admin.await;
    }
    served
}

/// The configured engines besides the planner: DuckDB when its extensions are there (or
/// required), Trino and Spark when their URLs are set. A remote engine that is down at start
/// is still added (it may come up later) with a warning.
async fn build_engines(config: &Config, planner: Arc<DataFusionEngine>) -> Result<Engines> {
    let mut engines = Engines::planner_only(planner);
    let connect_timeout = std::time::Duration::from_secs(2);
    let duck_dir = config.duckdb.extension_dir();
    match config.duckdb.enabled {
        Some(false) => {}
        required => {
            let options = DuckDbOptions {
                extension_dir: duck_dir.clone(),
                threads: config.duckdb.threads,
                memory_limit: config.duckdb.memory_limit.clone(),
                storage: (lakegate_engines::lake::scheme_of(&config.catalog.warehouse)
                    != lakegate_engines::lake::Scheme::Local)
                    .then(|| config.storage.with_environment()),
            };
            let duck = match DuckDbEngine::try_new(&options) {
                // Required: opened now, so a DuckDB that cannot load fails startup.
                Ok(duck) if required == Some(true) => duck.open_now().await.map(|()| duck),
                other => other,
            };
            match duck {
                Ok(duck) => engines.all.push(Arc::new(duck)),
                Err(e) if required == Some(true) => {
                    return Err(Error::Config {
                        setting: "duckdb.extension_dir".into(),
                        reason: e.to_string(),
                    });
                }
                Err(e) => info!(%e, "duckdb engine off"),
            }
        }
    }
    if !config.trino.url.is_empty() {
        let trino = TrinoEngine::try_new(TrinoOptions {
            url: config.trino.url.clone(),
            catalog: config.trino.catalog.clone(),
            user: config.trino.user.clone(),
            connect_timeout,
        })?;
        if let Err(e) = trino.health().await {
            warn!(%e, "trino is not answering yet");
        }
        engines.all.push(Arc::new(trino));
    }
    if !config.spark.url.is_empty() {
        let spark = SparkEngine::try_new(SparkOptions {
            connect_timeout,
            ..spark_options(config)
        })?;
        engines.all.push(Arc::new(spark));
    }
    engines
        .get(&config.engines.default)
        .map_err(|_| Error::Config {
            setting: "engines.default".into(),
            reason: format!(
                "`{}` is not configured here (configured: {})",
                config.engines.default,
                engines.names().join(", ")
            ),
        })?;
    engines.default = config.engines.default.clone();
    Ok(engines)
}

/// A built gateway, bound and ready to run.
pub struct Gateway {
    /// The endpoints, bound.
    servers: Vec<Box<dyn Server>>,
    /// The maintenance loop to run, when enabled.
    maintenance: Option<Arc<Maintainer>>,
    /// The query service (to drain at shutdown).
    service: Arc<GatewayService>,
    /// How long running queries may finish at shutdown.
    grace: std::time::Duration,
}

impl Gateway {
    /// Connects to the lake, builds the engines and the query service, binds the listeners.
    ///
    /// # Errors
    /// Catalog connection failures, bind failures, engine setup failures.
    pub async fn build(config: Config) -> Result<Self> {
        let service = build_service(&config).await?;
        Self::serve(config, service).await
    }

    async fn serve(config: Config, service: Arc<GatewayService>) -> Result<Self> {
        let flight_frontend = FlightSqlFrontend::try_new(
            service.clone(),
            config.pg.database.clone(),
            config.pg.default_schema.clone(),
            config.limits.statement_timeout,
        )?;
        let flight = FlightServer::bind(config.flight_listen_addr()?, flight_frontend)
            .await?
            .with_tls(crate::security::tls::acceptor(
                &config.tls,
                crate::security::tls::Alpn::Http2,
            )?);
        let metrics = Arc::new(Metrics::new().map_err(|e| Error::Config {
            setting: "http".into(),
            reason: e.to_string(),
        })?);
        service.history().set_metrics(metrics.clone());
        let mcp = config.mcp.enabled.then(|| {
            Arc::new(crate::frontend::mcp::tools::Tools::new(
                service.clone(),
                config.pg.database.clone(),
                config.pg.default_schema.clone(),
            ))
        });
        let http = HttpServer::bind(config.http_listen_addr()?, service.clone(), metrics, mcp)
            .await?
            .with_header_timeout(config.http.header_timeout);
        let handlers = PgHandlers::new(
            service.clone(),
            config.pg.default_schema.clone(),
            config.limits.clone(),
            config.tls.require,
        );
        let pg = PgServer::bind(config.pg_listen_addr()?, handlers)
            .await?
            .with_tls(crate::security::tls::acceptor(
                &config.tls,
                crate::security::tls::Alpn::Postgres,
            )?);
        let maintenance = config
            .maintenance
            .enabled
            .then(|| service.maintainer().clone());
        Ok(Self {
            servers: vec![Box::new(pg), Box::new(flight), Box::new(http)],
            maintenance,
            service,
            grace: config.limits.shutdown_grace,
        })
    }

    /// Each endpoint's name and bound address (`pg`, `flight`, `http`).
    pub fn addresses(&self) -> Vec<(&'static str, SocketAddr)> {
        self.servers
            .iter()
            .map(|s| (s.name(), s.local_addr()))
            .collect()
    }

    /// Serves until `shutdown` fires.
    pub async fn run(self, shutdown: CancellationToken) {
        let addresses: Vec<String> = self
            .addresses()
            .iter()
            .map(|(name, addr)| format!("{name}={addr}"))
            .collect();
        info!(endpoints = %addresses.join(" "), "lakegate serving");
        let maintenance = self.maintenance.map(|m| {
            info!(interval = ?m.config().interval, "maintenance loop on");
            m.spawn(shutdown.clone())
        });
        futures::future::join_all(self.servers.into_iter().map(|s| s.run(shutdown.clone()))).await;
        // No new connections or calls now; queries already running may finish.
        let started = std::time::Instant::now();
        loop {
            let running: usize = self
                .service
                .router()
                .load_by_group()
                .iter()
                .map(|(_, running, queued)| running + queued)
                .sum();
            if running == 0 {
                break;
            }
            if started.elapsed() >= self.grace {
                warn!(running, "shutdown grace over; ending running queries");
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        if let Some(loop_) = maintenance {
            // A cycle in flight finishes its current operation (commits are atomic; an
            // interrupted one leaves only unreferenced files, which orphan removal collects).
            if tokio::time::timeout(std::time::Duration::from_secs(10), loop_)
                .await
                .is_err()
            {
                warn!("maintenance operation still running at shutdown; abandoned");
            }
        }
    }
}
