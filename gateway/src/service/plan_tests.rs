//! Tables of cases for the plan's decisions, with no I/O: who may read what (access), which
//! group a statement runs in, what a masked user's statement becomes, when the scan guardrail
//! refuses, and which engines are tried. Table versions are in-memory Iceberg tables.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use datafusion::sql::sqlparser::ast::Statement;
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;
use iceberg::TableIdent;
use iceberg::spec::{
    FormatVersion, NestedField, PrimitiveType, Schema, SortOrder, TableMetadataBuilder, Type,
    UnboundPartitionSpec,
};
use iceberg::table::Table;
use lakegate_engines::{ErrorKind, Pins, ResolvedTable, Settings};
use tokio_util::sync::CancellationToken;

use super::context::{Frontend, StatementContext};
use super::plan::{Estimate, Intent, Plan, Resolved, Rewrites, RunsOn, decide, intend};
use crate::error::Error;
use crate::routing::rules::{RoutingTable, RulesFile};
use crate::routing::{GroupChoice, Router};
use crate::security::Security;
use crate::security::access::{Access, AccessRule};
use crate::security::auth::{Auth, AuthConfig, UserConfig, hash_password};
use crate::security::mask::{MaskRule, Masks};

const ENGINES: &[&str] = &["datafusion", "duckdb", "trino"];

const RULES: &str = r#"
    default_group = "app"
    [[group]]
    name = "app"
    engines = ["duckdb", "datafusion"]
    explore = 0.0
    [[group]]
    name = "agents"
    engines = ["datafusion"]
    max_scan_bytes = 1000
    explore = 0.0
    [[group]]
    name = "reports"
    engines = ["trino", "duckdb"]
    selectable = false
    explore = 0.0
    [[rule]]
    name = "bots to agents"
    priority = 1
    group = "agents"
    match = { applications = ["bot*"] }
    [[rule]]
    name = "sales reports"
    priority = 2
    group = "reports"
    match = { shapes = ["aggregate"], tables = ["sales.orders"] }
"#;

pub(super) fn router() -> Router {
    let spec: RulesFile = toml::from_str(RULES).expect("rules");
    let table = RoutingTable::build(vec![(PathBuf::from("r.toml"), spec)], ENGINES).expect("table");
    Router::with_table(table, ENGINES)
}

/// alice: analyst (public.*, every group); bob: sales (sales.*, groups app and reports); carol: agent
/// (public.customers with `email` masked).
pub(super) fn security() -> Security {
    let user = |name: &str, roles: &[&str]| UserConfig {
        name: name.into(),
        password: hash_password("pw"),
        roles: roles.iter().map(|r| r.to_string()).collect(),
    };
    let auth = Auth::from_config(
        &AuthConfig {
            users: vec![
                user("alice", &["analyst"]),
                user("bob", &["sales"]),
                user("carol", &["agent"]),
            ],
            ..AuthConfig::default()
        },
        &[("pg.listen", "127.0.0.1:5433".parse().expect("addr"))],
    )
    .expect("auth");
    let rule = |roles: &[&str], groups: &[&str], tables: &[&str]| AccessRule {
        roles: roles.iter().map(|r| r.to_string()).collect(),
        groups: groups.iter().map(|r| r.to_string()).collect(),
        tables: tables.iter().map(|r| r.to_string()).collect(),
        ..AccessRule::default()
    };
    Security {
        auth: Arc::new(auth),
        access: Access::new(vec![
            rule(&["analyst"], &["*"], &["public.*"]),
            rule(&["sales"], &["app", "reports"], &["sales.*"]),
            rule(&["agent"], &["*"], &["public.customers"]),
        ])
        .expect("access"),
        masks: Masks::new(
            vec![MaskRule {
                roles: vec!["agent".into()],
                columns: vec!["public.customers.email".into()],
                ..MaskRule::default()
            }],
            "salt".into(),
        )
        .expect("masks"),
        max_result_bytes: 0,
    }
}

pub(super) fn parse(sql: &str) -> Statement {
    Parser::parse_sql(&PostgreSqlDialect {}, sql)
        .expect("sql")
        .remove(0)
}

pub(super) fn ctx(user: &str) -> StatementContext {
    StatementContext::new(1, user, Frontend::Pg, CancellationToken::new(), None)
}

pub(super) fn settings(application: &str) -> Settings {
    let mut s = Settings::default();
    std::sync::Arc::make_mut(&mut s.values)
        .insert("application_name".into(), application.to_string());
    s
}

/// The runtime in-memory tables belong to (nothing runs on it: no I/O happens).
fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime")
    })
}

/// An in-memory table version with text columns `columns`.
pub(super) fn table(ns: &str, name: &str, columns: &[&str]) -> ResolvedTable {
    let fields = columns
        .iter()
        .enumerate()
        .map(|(i, c)| {
            Arc::new(NestedField::optional(
                i as i32 + 1,
                *c,
                Type::Primitive(PrimitiveType::String),
            ))
        })
        .collect::<Vec<_>>();
    let schema = Schema::builder()
        .with_fields(fields)
        .build()
        .expect("schema");
    let metadata = TableMetadataBuilder::new(
        schema.clone(),
        UnboundPartitionSpec::builder().build(),
        SortOrder::unsorted_order(),
        format!("memory://{ns}/{name}"),
        FormatVersion::V2,
        HashMap::new(),
    )
    .expect("builder")
    .build()
    .expect("metadata")
    .metadata;
    let ident = TableIdent::from_strs([ns, name]).expect("ident");
    let location = format!("memory://{ns}/{name}/metadata/v1.metadata.json");
    let table = Table::builder()
        .metadata(metadata)
        .identifier(ident.clone())
        .file_io(iceberg::io::FileIO::new_with_memory())
        .metadata_location(location.clone())
        .runtime(iceberg::Runtime::new(runtime()))
        .build()
        .expect("table");
    lakegate_engines::TableVersion {
        ident,
        metadata_location: location,
        snapshot_id: None,
        table,
        schema: Arc::new(iceberg::arrow::schema_to_arrow_schema(&schema).expect("arrow")),
    }
    .into()
}

pub(super) fn pins(tables: &[ResolvedTable]) -> Pins {
    let mut pins = Pins::default();
    for t in tables {
        pins.insert(&t.ident.namespace().join("."), t.ident.name(), t.clone());
    }
    pins
}

fn intent(user: &str, application: &str, sql: &str) -> Result<Intent, Error> {
    intend(
        &parse(sql),
        &settings(application),
        &ctx(user),
        &router(),
        &security(),
        |_, _| Some(0),
    )
}

/// The whole plan of `sql` for `ctx`, with `tables` as the resolved versions.
fn plan_as(
    ctx: &StatementContext,
    sql: &str,
    tables: &[ResolvedTable],
    estimate: Estimate,
) -> Result<Plan, Error> {
    let s = security();
    let router = router();
    let settings = settings("psql");
    let intent = intend(&parse(sql), &settings, ctx, &router, &s, |_, _| Some(0))?;
    let resolved = Resolved {
        pins: pins(tables),
        ..Resolved::default()
    };
    let masked = s.masks.apply(
        &intent.statement,
        &s.masks_of(&ctx.user),
        &resolved.pins,
        settings.default_schema(),
    )?;
    let decided = decide(&intent.chosen, &resolved, estimate, ctx, ENGINES)?;
    let rewrites = Rewrites::new(intent.statement, masked, intent.names);
    Ok(Plan::new(
        Arc::new(rewrites),
        decided,
        resolved,
        Arc::new(settings),
    ))
}

fn plan(
    user: &str,
    sql: &str,
    tables: &[ResolvedTable],
    estimate: Estimate,
) -> Result<Plan, Error> {
    plan_as(&ctx(user), sql, tables, estimate)
}

const NONE: Estimate = Estimate {
    bytes: 0,
    bound: true,
};

#[test]
fn access_is_decided_before_any_io_for_every_table_and_the_group() {
    // (user, statement, allowed, what the refusal names)
    let cases = [
        ("alice", "SELECT * FROM orders", true, ""),
        (
            "alice",
            "SELECT * FROM public.customers c JOIN orders o ON true",
            true,
            "",
        ),
        (
            "alice",
            "SELECT * FROM sales.orders",
            false,
            "table sales.orders",
        ),
        ("bob", "SELECT * FROM sales.orders", true, ""),
        ("bob", "SELECT * FROM orders", false, "table public.orders"),
        // A join needs every table; a subquery or CTE reads its tables too.
        (
            "bob",
            "SELECT * FROM sales.orders s JOIN public.orders o ON true",
            false,
            "public.orders",
        ),
        (
            "bob",
            "SELECT (SELECT max(x) FROM public.orders) FROM sales.orders",
            false,
            "public.orders",
        ),
        (
            "bob",
            "WITH c AS (SELECT * FROM public.customers) SELECT * FROM c",
            false,
            "public.customers",
        ),
        ("carol", "SELECT * FROM customers", true, ""),
        (
            "carol",
            "SELECT * FROM orders",
            false,
            "table public.orders",
        ),
        // Unknown users may read nothing; catalog-only statements need no grant.
        (
            "mallory",
            "SELECT * FROM orders",
            false,
            "table public.orders",
        ),
        (
            "mallory",
            "SELECT relname FROM pg_catalog.pg_class",
            true,
            "",
        ),
        ("mallory", "SELECT 1", true, ""),
    ];
    for (user, sql, allowed, names) in cases {
        match intent(user, "psql", sql) {
            Ok(_) => assert!(allowed, "{user}: {sql} should be refused"),
            Err(e) => {
                assert!(!allowed, "{user}: {sql} refused: {e}");
                assert_eq!(e.kind(), ErrorKind::InsufficientPrivilege, "{sql}: {e}");
                assert!(e.to_string().contains(names), "{sql}: {e}");
            }
        }
    }
}

#[test]
fn the_group_comes_from_the_session_the_rules_or_the_default() {
    // (user, application, session group, statement, group, why)
    let cases = [
        (
            "alice",
            "psql",
            None,
            "SELECT * FROM orders",
            "app",
            GroupChoice::Default,
        ),
        (
            "alice",
            "bot-7",
            None,
            "SELECT * FROM orders",
            "agents",
            GroupChoice::Rule,
        ),
        (
            "bob",
            "psql",
            None,
            "SELECT count(*) FROM sales.orders",
            "reports",
            GroupChoice::Rule,
        ),
        (
            "alice",
            "psql",
            Some("agents"),
            "SELECT * FROM orders",
            "agents",
            GroupChoice::Session,
        ),
    ];
    for (user, app, group, sql, want, why) in cases {
        let c = ctx(user).with_routing(group, None);
        let got = intend(
            &parse(sql),
            &settings(app),
            &c,
            &router(),
            &security(),
            |_, _| Some(0),
        )
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
        let got = &got.chosen;
        assert_eq!((got.group.name.as_str(), got.choice), (want, why), "{sql}");
    }
    // A group the rules do not let sessions choose, and one the user is not granted.
    let c = ctx("alice").with_routing(Some("reports"), None);
    let refused = intend(
        &parse("SELECT 1"),
        &settings("psql"),
        &c,
        &router(),
        &security(),
        |_, _| None,
    );
    assert!(matches!(refused, Err(Error::GroupNotAllowed { .. })));
    let c = ctx("bob").with_routing(Some("agents"), None);
    let refused = intend(
        &parse("SELECT * FROM sales.orders"),
        &settings("psql"),
        &c,
        &router(),
        &security(),
        |_, _| None,
    )
    .expect_err("bob may not use agents");
    assert!(
        refused.to_string().contains("routing group \"agents\""),
        "{refused}"
    );
}

#[test]
fn a_masked_user_runs_a_statement_that_hashes_the_column_everywhere() {
    let customers = table("public", "customers", &["id", "name", "email"]);
    let sql = "SELECT name, email FROM customers WHERE email = 'a@b.c'";
    let carol = plan("carol", sql, std::slice::from_ref(&customers), NONE).expect("plan");
    let runs = carol.runs().to_string();
    assert!(carol.rewrites.masked.is_some(), "carol's email is masked");
    assert!(runs.contains("md5"), "{runs}");
    assert!(runs.contains("'salt'"), "the salt is hashed in: {runs}");
    // The profile and heat still see the statement as written.
    assert_eq!(carol.statement().to_string(), sql);
    let alice = plan("alice", sql, &[customers], NONE).expect("plan");
    assert!(alice.rewrites.masked.is_none(), "alice reads clear values");
    assert_eq!(alice.runs().to_string(), sql);
}

#[test]
fn the_scan_guardrail_refuses_bound_estimates_over_the_groups_cap() {
    let orders = table("public", "orders", &["id"]);
    let sql = "SELECT * FROM orders WHERE id = $1";
    let over = Estimate {
        bytes: 5000,
        bound: true,
    };
    // `SET lakegate.group = agents` (cap 1000 bytes): refused, with the numbers and a fix.
    let agents = ctx("alice").with_routing(Some("agents"), None);
    let refuse = |estimate| plan_as(&agents, sql, std::slice::from_ref(&orders), estimate);
    let e = refuse(over).err().expect("over the cap");
    assert_eq!(e.kind(), ErrorKind::LimitExceeded);
    let message = e.to_string();
    assert!(
        message.contains("4.9 KiB") && message.contains("1000 B"),
        "{message}"
    );
    assert!(
        message.contains("agents") && message.contains("filter"),
        "{message}"
    );
    // Under the cap, or not bound yet (a Parse before its parameters): planned.
    assert!(
        refuse(Estimate {
            bytes: 900,
            bound: true
        })
        .is_ok()
    );
    assert!(
        refuse(Estimate {
            bytes: 5000,
            bound: false
        })
        .is_ok(),
        "an unbound estimate waits for the parameters"
    );
}

#[test]
fn engines_are_the_planner_a_pinned_engine_or_the_groups_candidates() {
    let orders = table("public", "orders", &["id"]);
    let routed = plan(
        "alice",
        "SELECT * FROM orders",
        std::slice::from_ref(&orders),
        NONE,
    )
    .expect("plan");
    assert_eq!(routed.runs_on, RunsOn::Routed);
    assert_eq!(routed.engines(&router()), vec!["duckdb", "datafusion"]);
    // Catalog and constant statements: the planner only.
    let catalog = plan("alice", "SELECT 1", &[], NONE).expect("plan");
    assert_eq!(
        (catalog.runs_on.clone(), catalog.engines(&router())),
        (
            RunsOn::Planner("datafusion".into()),
            vec!["datafusion".to_string()]
        )
    );
    // A pinned engine, and one this gateway does not run.
    let pinned = |engine: &str| {
        let c = ctx("alice").with_routing(None, Some(engine));
        plan_as(
            &c,
            "SELECT * FROM orders",
            std::slice::from_ref(&orders),
            NONE,
        )
    };
    let trino = pinned("trino").expect("trino is configured");
    assert_eq!(
        (trino.runs_on.clone(), trino.engines(&router())),
        (RunsOn::Pinned("trino".into()), vec!["trino".to_string()])
    );
    assert!(matches!(
        pinned("spark"),
        Err(Error::EngineNotConfigured { .. })
    ));
}

#[test]
fn the_history_names_each_pinned_snapshot() {
    let orders = table("shop", "orders", &["status"]);
    let mut committed = (*orders).clone();
    committed.snapshot_id = Some(-9_223_372_036_854_775_807);
    let lines = table("shop", "lines", &["sku"]);
    let list = super::snapshot_list(&pins(&[committed.into(), lines]), ",");
    assert_eq!(list, "shop.lines@empty,shop.orders@-9223372036854775807");
    assert_eq!(super::snapshot_list(&Pins::default(), ", "), "");
}
