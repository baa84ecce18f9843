//! The MCP tools an agent calls, each answering compact JSON with the snapshots it read:
//!
//! | tool | answer |
//! |---|---|
//! | `list_tables` | the tables this agent may read: rows, files, bytes, freshness (snapshot lag) |
//! | `describe_table` | columns (PostgreSQL types, docs), partitioning, sort order, sample rows through masks |
//! | `query` | one read-only SQL query through the gateway's query path, under the agent's guardrails |
//! | `explain_query` | EXPLAIN ROUTE plus what the agent's policy would do with it, without running it |
//! | `table_health` | the maintenance loop's score, reasons and recent operations for one table |
//!
//! Every statement goes through [`GatewayService`]: access rules, masks, the routing group's
//! caps and `statement_timeout` apply as to any client; [`crate::agents`] adds the budget, the
//! agent's scan cap and the expensive-statement policy on top.

use std::sync::Arc;

use futures::StreamExt;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::errors::ToolError;
use super::json::{Rows, type_name};
use crate::agents::approvals::{Outcome, Verdict};
use crate::agents::{AGENT_TAG, DEFAULT_GROUP, Expensive, Policy, expensive};
use crate::classify::{self, StatementKind};
use crate::service::plan::Plan;
use crate::service::{Frontend, GatewayService, QueryOutput};
use crate::session::Session;
use datafusion::sql::sqlparser::ast::Statement;

/// Rows `describe_table` samples.
const SAMPLE_ROWS: u64 = 5;
/// Tables `list_tables` lists at most.
const MAX_TABLES: usize = 1000;

/// What the tools run on, shared by every MCP session.
pub struct Tools {
    pub(super) service: Arc<GatewayService>,
    database: String,
    default_schema: String,
}

/// Who is calling: the agent's user name and its effective policy.
pub struct Caller {
    /// The user.
    pub user: String,
    /// Its guardrails.
    pub policy: Policy,
    /// The MCP client's name, as the session's `application_name`.
    pub client: String,
}

impl Tools {
    /// Tools over `service`, with the pg endpoint's database and default schema.
    pub fn new(service: Arc<GatewayService>, database: String, default_schema: String) -> Self {
        Self {
            service,
            database,
            default_schema,
        }
    }

    /// `user`'s caller, with its policy.
    pub fn caller(&self, user: &str, client: &str) -> Caller {
        let roles = self.service.security().roles(user);
        Caller {
            user: user.to_string(),
            policy: self.service.agents().policy(user, &roles),
            client: client.to_string(),
        }
    }

    /// A session for one call: the agent's group (or tag), timeout and client name.
    fn session(&self, caller: &Caller) -> Result<Session, ToolError> {
        let limits = &caller.policy.limits;
        let mut session = Session::new(&caller.user, &self.default_schema)
            .with_frontend(Frontend::Mcp)
            .with_database(&self.database);
        let timeout = limits.statement_timeout.as_millis().to_string();
        session.apply_startup(&[("statement_timeout".into(), timeout)])?;
        session.set("lakegate.tag", AGENT_TAG)?;
        session.set("application_name", &caller.client)?;
        let defined = self
            .service
            .router()
            .table()
            .groups
            .contains_key(&limits.group);
        // The default group only where the rules define it; a group named on purpose always
        // (a missing one is an error the operator sees).
        if defined || limits.group != DEFAULT_GROUP {
            session.set("lakegate.group", &limits.group)?;
        }
        Ok(session)
    }

    /// The one read-only query in `sql`.
    fn one_query(&self, sql: &str) -> Result<Statement, ToolError> {
        let mut statements = self.service.parse(sql)?;
        let statement = match statements.len() {
            1 => statements.remove(0),
            0 => return Err(ToolError::usage("empty statement", "pass one SELECT")),
            n => {
                return Err(ToolError::usage(
                    format!("{n} statements given"),
                    "pass exactly one SELECT per call",
                ));
            }
        };
        if classify::kind(&statement) != StatementKind::Query
            || crate::service::parse::explain_route_target(&statement).is_some()
        {
            return Err(ToolError::usage(
                "only read-only queries run here",
                "pass one SELECT (or WITH … SELECT); use explain_query to see a plan",
            ));
        }
        Ok(statement)
    }

    /// Plans `statement` for `session` exactly as running it would (access, group caps), its
    /// scan estimate pruned past `prune_above` bytes (the agent's thresholds).
    async fn plan(
        &self,
        statement: &Statement,
        session: &Session,
        cancel: &CancellationToken,
        prune_above: u64,
    ) -> Result<Plan, ToolError> {
        let ctx = self
            .service
            .context(session, cancel.clone())
            .with_prune_above(prune_above);
        match self.service.explain_plan(statement, session, &ctx).await {
            Ok(plan) => Ok(plan),
            Err(e) => Err(self.refusal(e, statement, session).await),
        }
    }

    /// `e` as a tool error, with the columns that would narrow a refused scan.
    async fn refusal(
        &self,
        e: crate::Error,
        statement: &Statement,
        session: &Session,
    ) -> ToolError {
        let scan_refused = matches!(e, crate::Error::Guardrail { .. });
        let error = ToolError::from(e);
        if !scan_refused {
            return error;
        }
        let schema = session.engine_settings().default_schema().to_string();
        let tables = classify::references(statement, &schema)
            .map(|r| r.lake)
            .unwrap_or_default();
        error.with_fix(narrowing_fix(&self.service, &tables).await)
    }

    /// `query`: runs one read-only statement under the agent's guardrails.
    pub async fn query(
        &self,
        caller: &Caller,
        sql: &str,
        cancel: CancellationToken,
    ) -> Result<Value, ToolError> {
        let limits = &caller.policy.limits;
        let statement = self.one_query(sql)?;
        let mut session = self.session(caller)?;
        let plan = self
            .plan(&statement, &session, &cancel, prune_above(limits))
            .await?;
        let bytes = plan.scan_bytes();
        let tables = plan.profile.tables.clone();
        if limits.max_scan_bytes > 0 && bytes > limits.max_scan_bytes {
            let human = lakegate_engines::units::human_bytes;
            return Err(ToolError::scan(format!(
                "estimated scan of {} exceeds agent \"{}\"'s max_scan_bytes ({})",
                human(bytes),
                caller.user,
                human(limits.max_scan_bytes)
            ))
            .with_fix(narrowing_fix(&self.service, &tables).await));
        }
        let budgets = &self.service.agents().budgets;
        budgets.fits(&caller.user, limits, bytes)?;
        let mut approved_by = None;
        if let Some(reason) = expensive::reason(&plan.profile, bytes, limits) {
            match limits.expensive {
                Expensive::Allow => {}
                Expensive::Refuse => {
                    return Err(ToolError::scan(format!("expensive statement: {reason}"))
                        .with_fix(narrowing_fix(&self.service, &tables).await));
                }
                Expensive::Approve => {
                    approved_by = Some(self.approval(caller, sql, &reason, bytes, &cancel).await?);
                }
            }
        }
        drop(plan);
        budgets.take(&caller.user, limits, bytes)?;
        let ctx = self.service.context(&session, cancel);
        let output = self
            .service
            .execute(&statement, None, &mut session, &ctx)
            .await?;
        let QueryOutput::Rows { mut stream, .. } = output else {
            return Err(ToolError::usage(
                "the statement returned no rows",
                "pass one SELECT",
            ));
        };
        let mut rows = Rows::new(&stream.schema(), limits.max_rows, limits.max_result_bytes);
        while let Some(batch) = stream.next().await {
            let batch = batch.map_err(|e| crate::Error::Engine(e.into()))?;
            if !rows.push(&batch).map_err(arrow_error)? {
                break;
            }
        }
        // The history record is written when the stream goes.
        drop(stream);
        let record = self.service.history().find(ctx.query_id);
        let truncated = rows.truncated;
        let count = rows.len();
        let (columns, values) = rows.into_json();
        let mut answer = json!({
            "columns": columns,
            "rows": values,
            "row_count": count,
            "truncated": truncated,
            "scan_bytes": bytes,
            "query_id": ctx.query_id,
        });
        if truncated {
            answer["note"] = json!(format!(
                "cut at {count} rows (max_rows = {}, max_result_bytes = {}): aggregate or add a \
                 LIMIT / WHERE to see what matters",
                limits.max_rows, limits.max_result_bytes
            ));
        }
        if let Some(r) = record {
            answer["engine"] = json!(r.engine);
            answer["cache"] = json!(r.cache);
            answer["group"] = json!(r.group);
            answer["snapshots"] = json!(snapshots(&r.snapshots));
            answer["millis"] = json!((r.millis * 10.0).round() / 10.0);
        }
        if let Some(by) = approved_by {
            answer["approved_by"] = json!(by);
        }
        Ok(answer)
    }

    /// Holds the statement until an admin decides; the approver's name when approved.
    async fn approval(
        &self,
        caller: &Caller,
        sql: &str,
        reason: &str,
        bytes: u64,
        cancel: &CancellationToken,
    ) -> Result<String, ToolError> {
        let agents = self.service.agents();
        let ticket = agents.approvals.request(&caller.user, sql, reason, bytes);
        let id = ticket.id();
        let timeout = agents.config().approval_timeout;
        let outcome = tokio::select! {
            outcome = ticket.wait(timeout) => outcome,
            () = cancel.cancelled() => return Err(crate::Error::Canceled.into()),
        };
        match outcome {
            Outcome::Decided(d) if d.verdict == Verdict::Approved => Ok(d.by),
            Outcome::Decided(d) => Err(ToolError::new(
                "42501",
                format!("statement {id} ({reason}) was rejected by {}", d.by),
                "ask for less: filter, aggregate or limit it",
            )),
            Outcome::TimedOut => Err(ToolError::new(
                "57014",
                format!(
                    "statement {id} ({reason}) waited {} s for approval and nobody decided",
                    timeout.as_secs()
                ),
                "ask an admin to approve it (lakegate agents approve), or make it cheaper",
            )),
        }
    }

    /// `explain_query`: the plan and what the policy would do, without running anything.
    pub async fn explain(
        &self,
        caller: &Caller,
        sql: &str,
        cancel: CancellationToken,
    ) -> Result<Value, ToolError> {
        let limits = &caller.policy.limits;
        let statement = self.one_query(sql)?;
        let mut session = self.session(caller)?;
        let plan = match self
            .plan(&statement, &session, &cancel, prune_above(limits))
            .await
        {
            Ok(plan) => plan,
            Err(refused) => {
                return Ok(json!({"would_run": false, "refused": refused.to_json()}));
            }
        };
        let bytes = plan.scan_bytes();
        let expensive = expensive::reason(&plan.profile, bytes, limits);
        drop(plan);
        let text = format!("EXPLAIN (ROUTE) {}", sql.trim().trim_end_matches(';'));
        let explain = self.service.parse(&text)?.remove(0);
        let route = self.run_rows(&explain, &mut session, cancel).await?;
        let mut plan = serde_json::Map::new();
        for row in route.as_array().into_iter().flatten() {
            if let (Some(k), Some(v)) = (row[0].as_str(), row[1].as_str()) {
                plan.insert(k.to_string(), json!(v));
            }
        }
        let over_cap = limits.max_scan_bytes > 0 && bytes > limits.max_scan_bytes;
        let action = match (&expensive, limits.expensive) {
            _ if over_cap => "refuse (over max_scan_bytes)",
            (None, _) | (Some(_), Expensive::Allow) => "run",
            (Some(_), Expensive::Refuse) => "refuse",
            (Some(_), Expensive::Approve) => "wait for approval",
        };
        let budget = self
            .service
            .agents()
            .budgets
            .fits(&caller.user, limits, bytes);
        Ok(json!({
            "would_run": !over_cap && action != "refuse" && budget.is_ok(),
            "action": action,
            "scan_bytes": bytes,
            "expensive": expensive,
            "budget": {
                "used": self.service.agents().budgets.standing(&caller.user),
                "queries_per_minute": limits.queries_per_minute,
                "scan_bytes_per_hour": limits.scan_bytes_per_hour,
                "refusal": budget.err().map(|e| ToolError::from(e).to_json()),
            },
            "route": plan,
        }))
    }

    /// Runs a statement the tools make themselves; its rows as JSON arrays of values.
    async fn run_rows(
        &self,
        statement: &Statement,
        session: &mut Session,
        cancel: CancellationToken,
    ) -> Result<Value, ToolError> {
        let ctx = self.service.context(session, cancel);
        let output = self.service.execute(statement, None, session, &ctx).await?;
        let QueryOutput::Rows { mut stream, .. } = output else {
            return Ok(json!([]));
        };
        let mut rows = Rows::new(&stream.schema(), 1000, 0);
        while let Some(batch) = stream.next().await {
            let batch = batch.map_err(|e| crate::Error::Engine(e.into()))?;
            if !rows.push(&batch).map_err(arrow_error)? {
                break;
            }
        }
        Ok(rows.into_json().1)
    }

    /// The tables `caller` may read, each `(namespace, table)`.
    async fn visible(&self, caller: &Caller) -> Result<Vec<(String, String)>, ToolError> {
        let directory = self.service.directory_for(&caller.user).await?;
        Ok(directory
            .schemas
            .iter()
            .flat_map(|(ns, tables)| tables.iter().map(move |t| (ns.clone(), t.clone())))
            .take(MAX_TABLES)
            .collect())
    }

    /// `list_tables`.
    pub async fn list_tables(&self, caller: &Caller) -> Result<Value, ToolError> {
        let now_ms = chrono::Utc::now().timestamp_millis();
        let mut tables = Vec::new();
        for (ns, name) in self.visible(caller).await? {
            // Current versions: the lag and row counts are the freshness the agent asked for.
            let Ok(resolved) = self.service.lake().resolve(&ns, &name).await else {
                continue;
            };
            let snapshot = resolved.table.metadata().current_snapshot();
            let summary = |k: &str| {
                snapshot
                    .and_then(|s| s.summary().additional_properties.get(k))
                    .and_then(|v| v.parse::<u64>().ok())
            };
            tables.push(json!({
                "table": format!("{ns}.{name}"),
                "rows": summary("total-records"),
                "data_files": summary("total-data-files"),
                "bytes": summary("total-files-size"),
                "snapshot_id": resolved.snapshot_id,
                "snapshot_lag_s": snapshot.map(|s| (now_ms - s.timestamp_ms()).max(0) as f64 / 1000.0),
            }));
        }
        Ok(json!({"database": self.database, "tables": tables}))
    }

    /// Checks that `caller` may read `name` (`ns.table`) and splits it.
    fn readable(&self, caller: &Caller, name: &str) -> Result<(String, String), ToolError> {
        let (ns, table) = name.rsplit_once('.').ok_or_else(|| {
            ToolError::usage(
                format!("`{name}` is not namespace.table"),
                "name a table as namespace.table (list_tables shows them)",
            )
        })?;
        let pair = (ns.to_string(), table.to_string());
        self.service
            .security()
            .check(&caller.user, std::slice::from_ref(&pair), None)?;
        Ok(pair)
    }

    /// `describe_table` (`sample`: with a few rows, through masks).
    pub async fn describe_table(
        &self,
        caller: &Caller,
        name: &str,
        sample: bool,
        cancel: CancellationToken,
    ) -> Result<Value, ToolError> {
        let (ns, table) = self.readable(caller, name)?;
        let resolved = self.service.lake().resolve(&ns, &table).await?;
        let metadata = resolved.table.metadata();
        let schema = metadata.current_schema();
        let column_name = |id: i32| {
            schema
                .name_by_field_id(id)
                .map_or_else(|| format!("field {id}"), str::to_string)
        };
        let identifier: Vec<i32> = schema.identifier_field_ids().collect();
        let columns: Vec<Value> = resolved
            .schema
            .fields()
            .iter()
            .zip(schema.as_struct().fields())
            .map(|(arrow, iceberg)| {
                json!({
                    "name": arrow.name(),
                    "type": type_name(arrow),
                    "nullable": !iceberg.required,
                    "doc": iceberg.doc,
                    "identifier": identifier.contains(&iceberg.id),
                })
            })
            .collect();
        let partitioning: Vec<Value> = metadata
            .default_partition_spec()
            .fields()
            .iter()
            .map(|f| json!({"column": column_name(f.source_id), "transform": f.transform.to_string()}))
            .collect();
        let sort_order: Vec<Value> = metadata
            .default_sort_order()
            .fields
            .iter()
            .map(|f| json!({"column": column_name(f.source_id), "direction": f.direction.to_string()}))
            .collect();
        let rows = metadata
            .current_snapshot()
            .and_then(|s| s.summary().additional_properties.get("total-records"))
            .and_then(|v| v.parse::<u64>().ok());
        let mut answer = json!({
            "table": format!("{ns}.{table}"),
            "columns": columns,
            "partitioning": partitioning,
            "sort_order": sort_order,
            "rows": rows,
            "snapshot_id": resolved.snapshot_id,
        });
        if sample {
            let sql = format!(
                "SELECT * FROM {}.{} LIMIT {SAMPLE_ROWS}",
                quote(&ns),
                quote(&table)
            );
            let mut session = self.session(caller)?;
            match self.service.parse(&sql) {
                Ok(mut statements) if statements.len() == 1 => {
                    let statement = statements.remove(0);
                    match self.run_rows(&statement, &mut session, cancel).await {
                        Ok(sample) => answer["sample_rows"] = sample,
                        Err(e) => answer["sample_error"] = e.to_json(),
                    }
                }
                _ => {}
            }
        }
        Ok(answer)
    }

    /// `table_health`.
    pub async fn table_health(&self, caller: &Caller, name: &str) -> Result<Value, ToolError> {
        let (ns, table) = self.readable(caller, name)?;
        let maintainer = self.service.maintainer();
        let assessment = maintainer.assess(&ns, &table).await?;
        let key = format!("{ns}.{table}");
        let operations: Vec<Value> = maintainer
            .log()
            .all()
            .into_iter()
            .rev()
            .filter(|o| o.table == key)
            .take(10)
            .map(|o| serde_json::to_value(&o).unwrap_or(Value::Null))
            .collect();
        Ok(json!({
            "table": key,
            "health": assessment.health,
            "recent_operations": operations,
        }))
    }

    /// The JSON schema of `ns.table` (the resource a client reads).
    pub async fn schema_resource(&self, caller: &Caller, name: &str) -> Result<Value, ToolError> {
        self.describe_table(caller, name, false, CancellationToken::new())
            .await
    }

    /// Names of the tables `caller` may read (the resources listed).
    pub async fn table_names(&self, caller: &Caller) -> Result<Vec<String>, ToolError> {
        Ok(self
            .visible(caller)
            .await?
            .into_iter()
            .map(|(ns, t)| format!("{ns}.{t}"))
            .collect())
    }
}

/// Estimates past this are worth pruning exactly for `limits`: the smaller of the agent's scan
/// cap and its expensive threshold (0: none).
fn prune_above(limits: &crate::agents::Limits) -> u64 {
    [limits.max_scan_bytes, limits.expensive_scan_bytes]
        .into_iter()
        .filter(|b| *b > 0)
        .min()
        .unwrap_or(0)
}

/// `schema.table@snapshot` items of a history record.
fn snapshots(list: &str) -> Vec<&str> {
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect()
}

/// A batch that could not be turned into JSON.
fn arrow_error(e: arrow::error::ArrowError) -> crate::Error {
    crate::Error::Engine(datafusion::error::DataFusionError::from(e).into())
}

/// A SQL identifier, quoted.
fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// The one-line fix for a refused scan: filter on the tables' partition (else sort) columns.
async fn narrowing_fix(service: &GatewayService, tables: &[(String, String)]) -> String {
    let mut columns = Vec::new();
    for (ns, name) in tables {
        let Some(resolved) = service.lake().peek(ns, name) else {
            continue;
        };
        let metadata = resolved.table.metadata();
        let schema = metadata.current_schema();
        let mut ids: Vec<i32> = metadata
            .default_partition_spec()
            .fields()
            .iter()
            .map(|f| f.source_id)
            .collect();
        if ids.is_empty() {
            ids = metadata
                .default_sort_order()
                .fields
                .iter()
                .map(|f| f.source_id)
                .collect();
        }
        columns.extend(
            ids.into_iter()
                .filter_map(|id| schema.name_by_field_id(id).map(str::to_string)),
        );
    }
    columns.dedup();
    if columns.is_empty() {
        "add a selective WHERE, aggregate, or LIMIT to read less".into()
    } else {
        format!("filter on {} to read less", columns.join(" or "))
    }
}
