//! The Model Context Protocol frontend: agents call [`tools`] (and read each table's schema as
//! a resource) over stdio (`lakegate mcp`, what desktop agents launch) or streamable HTTP
//! (`/mcp` on the HTTP listener). It is a translator like the other frontends: every
//! statement goes through the [`GatewayService`], under the agent's guardrails
//! ([`crate::agents`]).
//!
//! Who calls: over stdio, the user `lakegate mcp --user` names (it must be configured when users
//! are); over HTTP, the user of the request's basic auth or Flight SQL bearer token — and without
//! configured users only loopback clients, as the user `mcp` (see [`http`]).

pub mod errors;
pub mod http;
pub mod json;
pub mod tools;

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListResourcesResult, ListToolsResult, PaginatedRequestParams, ReadResourceRequestParams,
    ReadResourceResponse, ReadResourceResult, Resource, ResourceContents, ServerCapabilities,
    ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};

use errors::ToolError;
use tools::{Caller, Tools};

/// The user an unauthenticated loopback client (no users configured) acts as.
pub const ANONYMOUS: &str = "mcp";

/// The authenticated HTTP user of a request (set by [`http`]'s auth layer).
#[derive(Debug, Clone)]
pub struct Agent(pub String);

/// Resource URIs: `lakegate://table/<ns>.<table>`.
const TABLE_URI: &str = "lakegate://table/";

/// One MCP session's handler.
#[derive(Clone)]
pub struct McpHandler {
    tools: Arc<Tools>,
    /// stdio: the user named at launch; HTTP: `None` (each request's [`Agent`]).
    user: Option<String>,
}

impl McpHandler {
    /// A handler acting as `user` (stdio), or as each HTTP request's authenticated agent.
    pub fn new(tools: Arc<Tools>, user: Option<String>) -> Self {
        Self { tools, user }
    }

    /// The caller of a request.
    fn caller(&self, context: &RequestContext<RoleServer>) -> Result<Caller, ErrorData> {
        let user = match &self.user {
            Some(user) => user.clone(),
            None => context
                .extensions
                .get::<::http::request::Parts>()
                .and_then(|p| p.extensions.get::<Agent>())
                .map(|a| a.0.clone())
                .ok_or_else(|| ErrorData::invalid_request("no authenticated agent", None))?,
        };
        let client = context
            .peer
            .peer_info()
            .map(|info| format!("mcp:{}", info.client_info.name))
            .unwrap_or_else(|| "mcp".to_string());
        Ok(self.tools.caller(&user, &client))
    }
}

/// A tool's input schema: an object of `properties`, `required` ones listed.
fn schema(properties: Value, required: &[&str]) -> Arc<serde_json::Map<String, Value>> {
    let mut object = serde_json::Map::new();
    object.insert("type".into(), json!("object"));
    object.insert("properties".into(), properties);
    object.insert("required".into(), json!(required));
    object.insert("additionalProperties".into(), json!(false));
    Arc::new(object)
}

/// The tools, as listed.
fn tool_list() -> Vec<Tool> {
    let read_only = ToolAnnotations::new().read_only(true).destructive(false);
    let table = json!({"table": {"type": "string", "description": "namespace.table, as list_tables names it"}});
    let sql = json!({"sql": {"type": "string", "description": "one read-only SQL query, PostgreSQL dialect"}});
    vec![
        Tool::new(
            "list_tables",
            "The tables you may read: rows, data files, bytes, and freshness (seconds since the \
             last commit).",
            schema(json!({}), &[]),
        ),
        Tool::new(
            "describe_table",
            "One table's columns (PostgreSQL types, docs, identifier columns), partitioning, sort \
             order, row count, and a few sample rows (masked columns hashed).",
            schema(table.clone(), &["table"]),
        ),
        Tool::new(
            "query",
            "Run one read-only SQL query (PostgreSQL dialect) on the lakehouse. Answers columns, \
             rows (capped; `truncated` says when), the engine, the snapshots read and the scan \
             estimate. Filter on partition columns (describe_table) to read less; a query over \
             this agent's limits is refused with the reason and a fix.",
            schema(sql.clone(), &["sql"]),
        ),
        Tool::new(
            "explain_query",
            "What `query` would do with a SQL query, without running it: its shape, the tables \
             and snapshots, the estimated scan, the engine it would run on, and whether this \
             agent's policy would run it, refuse it, or hold it for approval.",
            schema(sql, &["sql"]),
        ),
        Tool::new(
            "table_health",
            "A table's health as the maintenance loop sees it: score, reasons (small files, \
             delete files, snapshots), and its recent maintenance operations.",
            schema(table, &["table"]),
        ),
    ]
    .into_iter()
    .map(|t| t.with_annotations(read_only.clone()))
    .collect()
}

/// A string argument of a call.
fn argument<'a>(request: &'a CallToolRequestParams, name: &str) -> Result<&'a str, ToolError> {
    request
        .arguments
        .as_ref()
        .and_then(|a| a.get(name))
        .and_then(Value::as_str)
        .ok_or_else(|| {
            ToolError::new(
                "22023",
                format!("{} needs the argument `{name}`", request.name),
                format!("call {} with {{\"{name}\": \"…\"}}", request.name),
            )
        })
}

impl McpHandler {
    async fn call(
        &self,
        request: &CallToolRequestParams,
        caller: &Caller,
        context: &RequestContext<RoleServer>,
    ) -> Result<Value, ToolError> {
        let t = &self.tools;
        let cancel = context.ct.child_token();
        match request.name.as_ref() {
            "list_tables" => t.list_tables(caller).await,
            "describe_table" => {
                let table = argument(request, "table")?;
                t.describe_table(caller, table, true, cancel).await
            }
            "query" => t.query(caller, argument(request, "sql")?, cancel).await,
            "explain_query" => t.explain(caller, argument(request, "sql")?, cancel).await,
            "table_health" => t.table_health(caller, argument(request, "table")?).await,
            other => Err(ToolError::new(
                "42883",
                format!("no tool named `{other}`"),
                "call list_tools for the tools there are",
            )),
        }
    }
}

impl ServerHandler for McpHandler {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .build(),
        )
        .with_server_info(Implementation::new("lakegate", env!("CARGO_PKG_VERSION")))
        .with_instructions(
            "lakegate answers read-only SQL (PostgreSQL dialect) over an Apache Iceberg \
             lakehouse, always at the tables' latest snapshots. Start with list_tables and \
             describe_table; use explain_query before a query that may read a lot.",
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tool_list()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        tool_list().into_iter().find(|t| t.name == name)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let caller = self.caller(&context)?;
        let span = tracing::info_span!("mcp", tool = %request.name, user = %caller.user);
        let answer =
            tracing::Instrument::instrument(self.call(&request, &caller, &context), span).await;
        Ok(match answer {
            Ok(value) => {
                let mut result = CallToolResult::success(vec![ContentBlock::text(value.to_string())]);
                result.structured_content = Some(value);
                result
            }
            Err(e) => {
                tracing::debug!(tool = %request.name, sqlstate = %e.sqlstate, message = %e.message, "tool error");
                e.into_result()
            }
        }
        .into())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let caller = self.caller(&context)?;
        let names = self
            .tools
            .table_names(&caller)
            .await
            .map_err(|e| ErrorData::internal_error(e.message, None))?;
        Ok(ListResourcesResult::with_all_items(
            names
                .into_iter()
                .map(|name| {
                    Resource::new(format!("{TABLE_URI}{name}"), name.clone())
                        .with_description(format!("The schema of {name}"))
                        .with_mime_type("application/json")
                })
                .collect(),
        ))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let caller = self.caller(&context)?;
        let Some(name) = request.uri.strip_prefix(TABLE_URI) else {
            return Err(ErrorData::resource_not_found(
                format!(
                    "no resource {} (tables are {TABLE_URI}<ns>.<table>)",
                    request.uri
                ),
                None,
            ));
        };
        let schema = self
            .tools
            .schema_resource(&caller, name)
            .await
            .map_err(|e| {
                ErrorData::resource_not_found(format!("ERROR {}: {}", e.sqlstate, e.message), None)
            })?;
        Ok(ReadResourceResult::new(vec![
            ResourceContents::text(schema.to_string(), request.uri.clone())
                .with_mime_type("application/json"),
        ])
        .into())
    }
}
