//! The `lakegate` command line: `serve` a catalog, or run the `demo`.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use lakegate_gateway::Gateway;
use lakegate_gateway::cli::{admin, demo, local};
use lakegate_gateway::config::{Config, Overrides};
use tokio_util::sync::CancellationToken;

/// jemalloc for the gateway's own (Rust) allocations: glibc's `malloc`/`free` were about 12%
/// of a served statement's CPU, jemalloc's thread caches about 2% (docs/findings.md, stop 51).
/// DuckDB's C++ keeps the system allocator (the symbols are prefixed).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[derive(Parser)]
#[command(
    name = "lakegate",
    version,
    about = "A SQL gateway for Apache Iceberg lakehouses"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve an existing Iceberg catalog over the Postgres wire protocol.
    Serve {
        /// TOML configuration file.
        #[arg(long)]
        config: Option<PathBuf>,
        #[command(flatten)]
        flags: Flags,
    },
    /// Run SQL in-process (no wire protocol) and print rows, bytes and time: a debugging aid and
    /// the benchmarks' no-wire baseline.
    Exec {
        /// The SQL to run.
        #[arg(long)]
        sql: String,
        /// TOML configuration file.
        #[arg(long)]
        config: Option<PathBuf>,
        #[command(flatten)]
        flags: Flags,
    },
    /// Serve the Model Context Protocol on stdin/stdout for an agent (what desktop agents
    /// launch): the same catalog flags as `serve`; the agent acts as `--user`. With
    /// `--http-listen`, the admin API runs too (to approve held statements).
    Mcp {
        /// TOML configuration file.
        #[arg(long)]
        config: Option<PathBuf>,
        /// The user the agent acts as (its access rules, masks and [[mcp.agent]] policy).
        #[arg(long, default_value = lakegate_gateway::frontend::mcp::ANONYMOUS)]
        user: String,
        #[command(flatten)]
        flags: Flags,
    },
    /// Agents' statements held for approval on a running gateway: list, approve or reject.
    Agents {
        #[command(subcommand)]
        action: AgentsAction,
    },
    /// Show how a query would be routed (`EXPLAIN ROUTE`): its profile, the matching rule and
    /// group, the snapshots, each candidate engine's expected latency and the choice.
    Route {
        /// The query.
        #[arg(long)]
        sql: String,
        /// TOML configuration file.
        #[arg(long)]
        config: Option<PathBuf>,
        #[command(flatten)]
        flags: Flags,
    },
    /// A running gateway at a glance: engines, routing groups and their load, cache, tables.
    Status {
        /// The gateway's admin API.
        #[arg(long, default_value = "http://127.0.0.1:8080")]
        http: String,
    },
    /// The health of every table of a running gateway's catalog, least healthy first.
    Tables {
        /// The gateway's admin API.
        #[arg(long, default_value = "http://127.0.0.1:8080")]
        http: String,
    },
    /// Recent queries of a running gateway (or the slowest).
    Queries {
        /// The gateway's admin API.
        #[arg(long, default_value = "http://127.0.0.1:8080")]
        http: String,
        /// Slowest first.
        #[arg(long)]
        slowest: bool,
        /// How many.
        #[arg(long, default_value_t = 20)]
        limit: usize,
    },
    /// Table maintenance: what it would do (`plan`) or do it now (`run --once`).
    Maintenance {
        #[command(subcommand)]
        action: MaintenanceAction,
    },
    /// Hash a password for `[[auth.users]] password = "…"`: reads it from the first line of
    /// standard input (e.g. `read -rs P && echo "$P" | lakegate hash-password`).
    HashPassword,
    /// Create a small demo lakehouse (SQLite catalog + local warehouse, or `--warehouse
    /// s3://bucket/path` with the AWS environment variables) and serve it.
    Demo {
        /// Directory for the demo's catalog and warehouse.
        #[arg(long, default_value = "demo-data")]
        dir: PathBuf,
        /// Number of small commits to the `orders` table.
        #[arg(long, default_value_t = 60)]
        order_commits: usize,
        /// Create the estate and exit without serving.
        #[arg(long)]
        no_serve: bool,
        #[command(flatten)]
        flags: Flags,
    },
}

/// A running gateway's admin API (with users: `http://user:password@host:port`, an admin to
/// decide).
#[derive(Args)]
struct AdminApi {
    /// The gateway's admin API.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    http: String,
}

/// One held item to decide, on a running gateway.
#[derive(Args)]
struct Held {
    /// Its number (from `pending`).
    id: u64,
    #[command(flatten)]
    api: AdminApi,
}

#[derive(Subcommand)]
enum AgentsAction {
    /// The statements waiting for approval, and the last decisions.
    Pending {
        #[command(flatten)]
        api: AdminApi,
    },
    /// Approve a held statement: the agent's call runs it.
    Approve {
        #[command(flatten)]
        held: Held,
    },
    /// Reject a held statement: the agent's call is refused (42501).
    Reject {
        #[command(flatten)]
        held: Held,
    },
}

#[derive(Subcommand)]
enum MaintenanceAction {
    /// Show the health of every table and the operations the next cycle would run, and why.
    Plan {
        #[command(flatten)]
        target: MaintenanceTarget,
    },
    /// A table's effective maintenance policy: each key, its value and the level it came from
    /// (default, catalog, namespace, table rule, or the table's own property).
    Policy {
        #[command(flatten)]
        target: MaintenanceTarget,
    },
    /// The operations a running gateway holds for approval (manual mode, `approve` kinds).
    Pending {
        #[command(flatten)]
        api: AdminApi,
    },
    /// Approve a held operation: it runs at the next cycle if the table has not moved on
    /// (else it is planned again and waits for a new approval).
    Approve {
        #[command(flatten)]
        held: Held,
    },
    /// Reject a held operation (it leaves the list).
    Reject {
        #[command(flatten)]
        held: Held,
    },
    /// Run one maintenance cycle now over every table (or one), printing progress.
    Run {
        /// Run one cycle and exit (the only mode; `serve --maintenance` runs the loop).
        #[arg(long, required = true)]
        once: bool,
        #[command(flatten)]
        target: MaintenanceTarget,
    },
}

/// Which tables, and the catalog they are in.
#[derive(Args)]
struct MaintenanceTarget {
    /// Only this table (`ns.table`).
    #[arg(long)]
    table: Option<String>,
    /// TOML configuration file.
    #[arg(long)]
    config: Option<PathBuf>,
    #[command(flatten)]
    flags: Flags,
}

/// Connection settings that override the config file.
#[derive(Args)]
struct Flags {
    /// Catalog URI: sqlite:///abs/catalog.db, postgresql://user@host:port/db or http(s):// (REST).
    #[arg(long)]
    catalog_uri: Option<String>,
    /// The catalog's name in the SQL catalog tables.
    #[arg(long)]
    catalog_name: Option<String>,
    /// Warehouse location, e.g. file:///abs/warehouse.
    #[arg(long)]
    warehouse: Option<String>,
    /// Postgres endpoint address (default 127.0.0.1:5433).
    #[arg(long)]
    pg_listen: Option<String>,
    /// Arrow Flight SQL endpoint address (default 127.0.0.1:32010).
    #[arg(long)]
    flight_listen: Option<String>,
    /// Trino coordinator URL (http://host:port), enabling the Trino engine.
    #[arg(long)]
    trino_url: Option<String>,
    /// Spark Connect URL (http://host:15002), enabling the Spark engine.
    #[arg(long)]
    spark_url: Option<String>,
    /// The engine for queries no session pinned: datafusion, duckdb, trino or spark.
    #[arg(long)]
    engine: Option<String>,
    /// Folder of routing rules (*.toml), e.g. routing-rules.
    #[arg(long)]
    rules_dir: Option<String>,
    /// Metrics and admin API address (default 127.0.0.1:8080).
    #[arg(long)]
    http_listen: Option<String>,
    /// Run the maintenance loop (compaction, snapshot expiry, orphan removal, manifest
    /// rewrites) inside `serve`.
    #[arg(long)]
    maintenance: bool,
}

impl Flags {
    fn overrides(&self) -> Overrides {
        Overrides {
            catalog_uri: self.catalog_uri.clone(),
            catalog_name: self.catalog_name.clone(),
            warehouse: self.warehouse.clone(),
            pg_listen: self.pg_listen.clone(),
            flight_listen: self.flight_listen.clone(),
            trino_url: self.trino_url.clone(),
            spark_url: self.spark_url.clone(),
            engine: self.engine.clone(),
            rules_dir: self.rules_dir.clone(),
            http_listen: self.http_listen.clone(),
            maintenance: self.maintenance.then_some(true),
        }
    }
}

/// Stack of each runtime thread. Planning deep statements (DataFusion's planner and
/// sqlparser recurse per nesting level) and the nested futures of one statement in a debug
/// build need more than tokio's 2 MiB default; 8 MiB of address space per thread costs no
/// memory until used.
const THREAD_STACK: usize = 8 << 20;

fn main() -> std::process::ExitCode {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(THREAD_STACK)
        .build();
    match runtime {
        Ok(runtime) => runtime.block_on(serve_main()),
        Err(e) => {
            eprintln!("lakegate: cannot start the runtime: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn serve_main() -> std::process::ExitCode {
    match run().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lakegate: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Warns when the environment makes every `std::backtrace::Backtrace::capture` walk the stack:
/// iceberg-rust builds an error per manifest while planning a scan, even when nothing fails, so
/// `RUST_BACKTRACE=1` alone costs about a third more CPU per lookup (docs/findings.md).
fn warn_if_errors_capture_backtraces() {
    let backtraces = std::env::var_os("RUST_BACKTRACE").is_some_and(|v| v != "0");
    if backtraces && std::env::var_os("RUST_LIB_BACKTRACE").is_none() {
        tracing::warn!(
            "RUST_BACKTRACE is set: every error value captures a backtrace, which slows scan \
             planning; set RUST_LIB_BACKTRACE=0 to keep panic backtraces without that cost"
        );
    }
}

async fn run() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("LAKEGATE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        // Colours only for a person at a terminal: escape codes cost CPU on every line and
        // garble log files.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let cli = Cli::parse();
    let config = match cli.command {
        Command::Serve { config, flags } => Config::load(config.as_deref(), &flags.overrides())?,
        Command::Exec { sql, config, flags } => {
            let config = Config::load(config.as_deref(), &flags.overrides())?;
            let started = std::time::Instant::now();
            let (rows, bytes) = local::execute_local(&config, &sql).await?;
            let secs = started.elapsed().as_secs_f64();
            println!("rows={rows} bytes={bytes} seconds={secs:.3}");
            return Ok(());
        }
        Command::Status { http } => {
            print!("{}", admin::status(&http).await?);
            return Ok(());
        }
        Command::Tables { http } => {
            print!("{}", admin::tables(&http).await?);
            return Ok(());
        }
        Command::Queries {
            http,
            slowest,
            limit,
        } => {
            print!("{}", admin::queries(&http, limit, slowest).await?);
            return Ok(());
        }
        Command::Mcp {
            config,
            user,
            flags,
        } => {
            let admin_http = flags.http_listen.is_some();
            let config = Config::load(config.as_deref(), &flags.overrides())?;
            warn_if_errors_capture_backtraces();
            lakegate_gateway::gateway::run_mcp_stdio(&config, &user, admin_http).await?;
            return Ok(());
        }
        Command::Agents { action } => {
            let out = match action {
                AgentsAction::Pending { api } => admin::pending(&api.http).await?,
                AgentsAction::Approve { held } => {
                    admin::decide(&held.api.http, held.id, true).await?
                }
                AgentsAction::Reject { held } => {
                    admin::decide(&held.api.http, held.id, false).await?
                }
            };
            print!("{out}");
            return Ok(());
        }
        Command::HashPassword => {
            let mut line = String::new();
            std::io::stdin()
                .read_line(&mut line)
                .context("reading the password from standard input")?;
            let password = line.trim_end_matches(['\n', '\r']);
            anyhow::ensure!(!password.is_empty(), "empty password on standard input");
            println!(
                "{}",
                lakegate_gateway::security::auth::hash_password(password)
            );
            return Ok(());
        }
        Command::Maintenance { action } => {
            let (target, run) = match action {
                MaintenanceAction::Plan { target } => (target, false),
                MaintenanceAction::Run { target, .. } => (target, true),
                MaintenanceAction::Pending { api } => {
                    print!("{}", admin::pending_operations(&api.http).await?);
                    return Ok(());
                }
                MaintenanceAction::Approve { held } => {
                    let out = admin::decide_operation(&held.api.http, held.id, true).await?;
                    print!("{out}");
                    return Ok(());
                }
                MaintenanceAction::Reject { held } => {
                    let out = admin::decide_operation(&held.api.http, held.id, false).await?;
                    print!("{out}");
                    return Ok(());
                }
                MaintenanceAction::Policy { target } => {
                    let MaintenanceTarget {
                        table,
                        config,
                        flags,
                    } = target;
                    let table = table.context("maintenance policy needs --table ns.table")?;
                    let config = Config::load(config.as_deref(), &flags.overrides())?;
                    print!("{}", local::policy_local(&config, &table).await?);
                    return Ok(());
                }
            };
            let MaintenanceTarget {
                table,
                config,
                flags,
            } = target;
            let config = Config::load(config.as_deref(), &flags.overrides())?;
            let out = local::maintenance_local(&config, table.as_deref(), run).await?;
            print!("{out}");
            return Ok(());
        }
        Command::Route { sql, config, flags } => {
            let config = Config::load(config.as_deref(), &flags.overrides())?;
            for (item, value) in local::explain_route_local(&config, &sql).await? {
                println!("{item:<16} {value}");
            }
            return Ok(());
        }
        Command::Demo {
            dir,
            order_commits,
            no_serve,
            flags,
        } => {
            let history = dir.join("history.jsonl");
            let mut overrides = flags.overrides();
            let lake = demo::create(&demo::DemoOptions {
                dir,
                order_commits,
                rows_per_commit: 200,
                warehouse: overrides.warehouse.clone(),
            })
            .await
            .context("creating the demo estate")?;
            if no_serve {
                println!(
                    "demo estate ready: --catalog-uri {} --warehouse {}",
                    lake.uri, lake.warehouse
                );
                return Ok(());
            }
            overrides.catalog_uri.get_or_insert(lake.uri);
            overrides.warehouse.get_or_insert(lake.warehouse);
            overrides.catalog_name.get_or_insert(lake.name);
            // The example routing rules when run from the repository.
            if overrides.rules_dir.is_none() && std::path::Path::new("routing-rules").is_dir() {
                overrides.rules_dir = Some("routing-rules".into());
            }
            let mut config = Config::load(None, &overrides)?;
            if config.history.path.is_empty() {
                config.history.path = history.display().to_string();
            }
            config
        }
    };
    warn_if_errors_capture_backtraces();
    let gateway = Gateway::build(config).await?;
    // Scripts and tests read this line to find the (possibly ephemeral) port.
    let endpoints: Vec<String> = gateway
        .addresses()
        .iter()
        .map(|(name, addr)| format!("{name}={addr}"))
        .collect();
    println!("lakegate listening {}", endpoints.join(" "));
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        stop.cancel();
    });
    #[cfg(unix)]
    {
        let stop = shutdown.clone();
        tokio::spawn(async move {
            if let Ok(mut term) =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            {
                term.recv().await;
                stop.cancel();
            }
        });
    }
    gateway.run(shutdown).await;
    Ok(())
}
