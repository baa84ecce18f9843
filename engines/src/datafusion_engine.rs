//! The embedded DataFusion engine: reads pinned Iceberg snapshots through `iceberg-datafusion`
//! (partition pruning, predicate and projection pushdown) and answers `pg_catalog` and
//! `information_schema` queries over the lake.

use std::any::Any;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use arrow::datatypes::{DataType, Field, Schema};
use async_trait::async_trait;
use datafusion::catalog::{
    CatalogProvider, CatalogProviderList, MemoryCatalogProvider, MemoryCatalogProviderList,
    SchemaProvider,
};
use datafusion::common::ParamValues;
use datafusion::datasource::TableProvider;
use datafusion::error::DataFusionError;
use datafusion::execution::session_state::{SessionState, SessionStateBuilder};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::Statement;
use datafusion_pg_catalog::pg_catalog::context::EmptyContextProvider;
use datafusion_pg_catalog::pg_catalog::setup_pg_catalog;

use crate::accel::Accelerator;
use crate::engine::{Described, Engine, EngineRequest, Pins, Settings, Started};
use crate::error::{Error, Result};
use crate::lake::{Directory, Lake};

/// The name of the engine that answers from accelerated copies.
pub const ACCELERATED: &str = "accelerated";
use crate::system_catalog::{SYSTEM_SCHEMAS, pg_catalog_schema, session_udfs};

/// Options for the embedded DataFusion engine.
#[derive(Debug, Clone)]
pub struct DataFusionOptions {
    /// The database name clients see (`current_database()`, the DataFusion catalog name).
    pub database: String,
    /// Parallelism per query (DataFusion `target_partitions`).
    pub target_partitions: usize,
    /// Rows per batch produced by scans and operators.
    pub batch_size: usize,
    /// Memory all running queries may hold in buffers (sorts, joins, aggregates); a query that
    /// needs more fails with "resources exhausted" instead of taking the gateway down.
    pub memory_limit: usize,
}

impl Default for DataFusionOptions {
    fn default() -> Self {
        Self {
            database: "lakegate".into(),
            target_partitions: std::thread::available_parallelism().map_or(2, |n| n.get()),
            batch_size: 8192,
            memory_limit: 4 << 30,
        }
    }
}

/// What one visibility key sees, built from one listing.
struct VisibleView {
    source: Arc<Directory>,
    filtered: Arc<Directory>,
    pg_catalog: Arc<dyn SchemaProvider>,
}

/// The embedded DataFusion engine.
pub struct DataFusionEngine {
    lake: Arc<Lake>,
    database: String,
    /// Functions and configuration shared by every statement; each statement gets its own
    /// catalog list holding its pinned tables.
    base: SessionState,
    pg_catalog: Arc<dyn SchemaProvider>,
    /// pg_catalog's static tables, shared by every per-session view.
    static_tables: Arc<datafusion_pg_catalog::pg_catalog::PgCatalogStaticTables>,
    /// For sessions that may not see every table, by visibility key: the listing it was
    /// filtered from, the filtered listing and the `pg_catalog` view.
    views: Mutex<std::collections::HashMap<String, VisibleView>>,
    /// The last listing of namespaces and tables; refreshed for metadata queries.
    directory: Mutex<Arc<Directory>>,
    /// `datafusion`, or `accelerated` for the engine that reads only [`Accelerator`] copies.
    name: &'static str,
    /// The copies this engine reads instead of files (the `accelerated` engine).
    held: Option<Arc<Accelerator>>,
    /// Plans kept across executions of the same statement on the same table versions.
    plans: crate::plan_cache::PlanCache,
}

impl std::fmt::Debug for DataFusionEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DataFusionEngine")
            .field("database", &self.database)
            .finish_non_exhaustive()
    }
}

impl DataFusionEngine {
    /// Builds the engine over `lake`.
    ///
    /// # Errors
    /// When the `pg_catalog` emulation cannot be set up.
    pub fn try_new(lake: Arc<Lake>, options: DataFusionOptions) -> Result<Self> {
        let mut config = SessionConfig::new()
            .with_information_schema(true)
            .with_create_default_catalog_and_schema(false)
            .with_default_catalog_and_schema(&options.database, "public")
            .with_target_partitions(options.target_partitions.max(1))
            .with_batch_size(options.batch_size.max(1));
        // Round-robin repartitioning lets producers run ahead of a slow client through
        // unbounded channels; results must stream at the client's pace instead.
        config
            .options_mut()
            .optimizer
            .enable_round_robin_repartition = false;
        // PostgreSQL reads a literal with a decimal point as numeric, not float:
        // `amount < 9999999999.99` compares exactly.
        config.options_mut().sql_parser.parse_float_as_decimal = true;
        let runtime = datafusion::execution::runtime_env::RuntimeEnvBuilder::new()
            .with_memory_limit(options.memory_limit.max(64 << 20), 1.0)
            .build_arc()?;
        let ctx = SessionContext::new_with_config_rt(config, runtime);
        // Common-subexpression elimination fails DataFusion's own physical-plan check when the
        // expressions it shares carry Parquet field metadata or differ in nullability
        // (`count(*) FILTER (WHERE returned), count(*) FILTER (WHERE NOT returned)`: internal
        // error, measured); a repeated expression is computed twice instead.
        ctx.remove_optimizer_rule("common_sub_expression_eliminate");
        ctx.add_analyzer_rule(Arc::new(crate::pg_temporal::PgTemporal));
        ctx.add_analyzer_rule(Arc::new(crate::semantics::PgTextCasts));
        ctx.add_analyzer_rule(Arc::new(crate::pg_integer::PgIntegerArithmetic));
        ctx.add_analyzer_rule(Arc::new(crate::session_zone::SessionZoneCasts));
        ctx.add_analyzer_rule(Arc::new(crate::pg_datetime_input::PgDateTimeInput));
        ctx.add_analyzer_rule(Arc::new(crate::pg_float_keys::PgFloatKeys));
        ctx.register_udwf(crate::pg_window::ntile());
        for udf in crate::pg_functions::udfs() {
            ctx.register_udf(udf);
        }
        ctx.register_udaf(crate::pg_functions::percentile_disc());
        // PostgreSQL's `variance` is the sample variance (DataFusion's `var`).
        ctx.register_udaf(
            datafusion::functions_aggregate::variance::var_samp_udaf()
                .as_ref()
                .clone()
                .with_aliases(["variance"]),
        );
        ctx.register_catalog(&options.database, Arc::new(MemoryCatalogProvider::new()));
        setup_pg_catalog(&ctx, &options.database, EmptyContextProvider)
            .map_err(Error::DataFusion)?;
        let pg_catalog = pg_catalog_schema(lake.clone(), options.database.clone())?;
        let static_tables =
            Arc::new(datafusion_pg_catalog::pg_catalog::PgCatalogStaticTables::try_new()?);
        Ok(Self {
            lake,
            database: options.database,
            base: unknown_literals_first(ctx.state()),
            pg_catalog,
            static_tables,
            views: Mutex::new(std::collections::HashMap::new()),
            directory: Mutex::new(Arc::new(Directory::default())),
            name: "datafusion",
            held: None,
            plans: crate::plan_cache::PlanCache::default(),
        })
    }

    /// The `accelerated` engine: DataFusion over `accelerator`'s in-memory copies. It answers
    /// only statements whose every table is held at the snapshot they pinned
    /// ([`Accelerator::declines`]), so its answers are the planner's, from memory.
    ///
    /// # Errors
    /// As [`DataFusionEngine::try_new`].
    pub fn accelerated(
        lake: Arc<Lake>,
        options: DataFusionOptions,
        accelerator: Arc<Accelerator>,
    ) -> Result<Self> {
        let mut engine = Self::try_new(lake, options)?;
        engine.name = ACCELERATED;
        engine.held = Some(accelerator);
        Ok(engine)
    }

    /// Plans the statement without running it: parameter types and result schema. This is
    /// the description clients get whichever engine later answers.
    ///
    /// # Errors
    /// Planning errors (unknown column, type mismatch, unsupported SQL).
    pub async fn describe(&self, request: EngineRequest<'_>) -> Result<Described> {
        let ctx = self.context(&request).await?;
        let (plan, replaced) = self.plan(&ctx, request.statement).await?;
        let param_types = ordered_param_types(&plan.get_parameter_types()?)?;
        let planned = plan.schema().as_arrow().clone();
        let mut constructs = crate::constructs::constructs(&plan);
        constructs.extend(replaced);
        // What of PostgreSQL's semantics it relies on, read once type coercion made every
        // implicit cast explicit.
        let state = ctx.state();
        let analyzed =
            state
                .analyzer()
                .execute_and_check(plan, state.config_options(), |_, _| {})?;
        let schema = Arc::new(described_types(planned, analyzed.schema().as_arrow()));
        Ok(Described {
            param_types,
            schema,
            features: crate::semantics::features(&analyzed),
            constructs: Arc::new(constructs),
        })
    }

    /// The database name this engine presents.
    pub fn database(&self) -> &str {
        &self.database
    }

    /// The lake's listing: the last one, refreshed when the statement lists the catalog.
    async fn directory_for(&self, lists_catalog: bool) -> Result<Arc<Directory>> {
        let mut current = self
            .directory
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if lists_catalog || current.schemas.is_empty() {
            current = Arc::new(self.lake.directory().await?);
            *self.directory.lock().unwrap_or_else(|p| p.into_inner()) = current.clone();
        }
        Ok(current)
    }

    /// The catalog listing and `pg_catalog` this request may see, for the database the client
    /// connected to (filtered and built once per listing, database and visibility key, not
    /// per statement).
    fn view(
        &self,
        directory: Arc<Directory>,
        database: &str,
        visible: Option<&crate::engine::Visibility>,
    ) -> Result<(Arc<Directory>, Arc<dyn SchemaProvider>)> {
        if visible.is_none() && database == self.database {
            return Ok((directory, self.pg_catalog.clone()));
        }
        let key = format!("{database}\u{0}{}", visible.map_or("", |v| v.key.as_str()));
        let mut views = self.views.lock().unwrap_or_else(|p| p.into_inner());
        let pg_catalog = match views.get(&key) {
            Some(view) if Arc::ptr_eq(&view.source, &directory) => {
                return Ok((view.filtered.clone(), view.pg_catalog.clone()));
            }
            Some(view) => view.pg_catalog.clone(),
            None => {
                if views.len() >= 1024 {
                    views.clear();
                }
                crate::system_catalog::pg_catalog_schema_for(
                    self.lake.clone(),
                    database.to_string(),
                    visible.cloned(),
                    Some(self.static_tables.clone()),
                )?
            }
        };
        let filtered = match visible {
            Some(v) => Arc::new(directory.filtered(|ns, t| (v.allows)(ns, t))),
            None => directory.clone(),
        };
        views.insert(
            key,
            VisibleView {
                source: directory,
                filtered: filtered.clone(),
                pg_catalog: pg_catalog.clone(),
            },
        );
        Ok((filtered, pg_catalog))
    }

    /// A context for one statement: the shared functions, this statement's pinned tables and
    /// the session's settings.
    async fn context(&self, request: &EngineRequest<'_>) -> Result<SessionContext> {
        let directory = self.directory_for(request.lists_catalog).await?;
        let database = request.settings.database.as_str();
        let (directory, pg_catalog) =
            self.view(directory, database, request.settings.visible.as_ref())?;
        let catalogs = Arc::new(MemoryCatalogProviderList::new());
        let system = Arc::new(datafusion::catalog::MemorySchemaProvider::new());
        for (name, batch) in request.system_tables {
            let table = datafusion::datasource::MemTable::try_new(
                batch.schema(),
                vec![vec![batch.clone()]],
            )?;
            system.register_table(name.clone(), Arc::new(table))?;
        }
        catalogs.register_catalog(
            database.to_string(),
            Arc::new(LakeCatalog {
                lake: self.lake.clone(),
                pins: request.pins.clone(),
                held: self.held.clone(),
                zone: crate::session_zone::column_zone(&request.settings.time_zone),
                directory,
                pg_catalog,
                system,
            }),
        );
        let mut config = self.base.config().clone();
        apply_settings(&mut config, request.settings);
        let state = SessionStateBuilder::new_from_existing(self.base.clone())
            .with_config(config)
            .with_catalog_list(catalogs as Arc<dyn CatalogProviderList>)
            .build();
        let ctx = SessionContext::new_with_state(state);
        for udf in session_udfs(database, request.settings) {
            ctx.register_udf(udf);
        }
        ctx.register_udf(crate::to_char::udf(&request.settings.time_zone));
        for udf in crate::pg_extract::udfs() {
            ctx.register_udf(udf);
        }
        ctx.register_udf(crate::pg_like::udf());
        ctx.register_udf(crate::pg_zone::udf(&request.settings.time_zone));
        Ok(ctx)
    }

    /// The statement's plan, and the constructs DataFusion's rewrites replaced in it (other
    /// engines run them as written: see [`crate::constructs`]).
    async fn plan(
        &self,
        ctx: &SessionContext,
        statement: &Statement,
    ) -> Result<(LogicalPlan, crate::constructs::Constructs)> {
        let mut statement = statement.clone();
        // PostgreSQL's spellings DataFusion plans differently (see each module).
        crate::pg_extract::rewrite(&mut statement);
        crate::pg_like::rewrite(&mut statement);
        crate::pg_zone::rewrite(&mut statement)?;
        let replaced = crate::pg_text_rules::rewrite(&mut statement)?;
        let plan = ctx
            .state()
            .statement_to_plan(DfStatement::Statement(Box::new(statement)))
            .await?;
        crate::refusals::check(&plan)?;
        let plan = crate::pg_result_types::rewrite(plan)?;
        datafusion::execution::context::SQLOptions::new()
            .with_allow_ddl(false)
            .with_allow_dml(false)
            .with_allow_statements(false)
            .verify_plan(&plan)
            .map_err(|_| Error::Unsupported {
                what: "this statement (lakegate is read-only)".to_string(),
            })?;
        Ok((plan, replaced))
    }
}

/// `state` with PostgreSQL's typing of quoted literals ([`crate::pg_unknown_literals`]) before
/// every other analyzer rule: it must see the literals before type coercion casts the number
/// to text instead.
fn unknown_literals_first(state: SessionState) -> SessionState {
    let mut rules = state.analyzer().rules.clone();
    rules.insert(0, Arc::new(crate::pg_unknown_literals::PgUnknownLiterals));
    SessionStateBuilder::new_from_existing(state)
        .with_analyzer_rules(rules)
        .build()
}

fn apply_settings(config: &mut SessionConfig, settings: &Settings) {
    let options = config.options_mut();
    options.catalog.default_catalog = settings.database.clone();
    options.catalog.default_schema = settings.default_schema().to_string();
    options.execution.time_zone = Some(settings.time_zone.clone());
}

fn is_decimal(t: &DataType) -> bool {
    matches!(t, DataType::Decimal128(..) | DataType::Decimal256(..))
}

/// `planned` with the date and time types [`PgTemporal`](crate::pg_temporal::PgTemporal) gave
/// the analyzed plan (`date + interval` is a timestamp, `date_trunc` of a date a timestamptz):
/// the types execution returns, and an integer column's analyzed float or decimal type (a
/// branch's type before coercion). Other columns keep the planned type (the analyzed one of a
/// decimal expression is not always what execution returns).
fn described_types(planned: Schema, analyzed: &Schema) -> Schema {
    let temporal = |t: &DataType| {
        matches!(
            t,
            DataType::Date32 | DataType::Date64 | DataType::Timestamp(..) | DataType::Interval(_)
        )
    };
    let fields: Vec<Field> = planned
        .fields()
        .iter()
        .zip(
            analyzed
                .fields()
                .iter()
                .map(Some)
                .chain(std::iter::repeat(None)),
        )
        .map(|(p, a)| match a {
            Some(a) if temporal(p.data_type()) && temporal(a.data_type()) => {
                p.as_ref().clone().with_data_type(a.data_type().clone())
            }
            // Before coercion a CASE or coalesce has its first branch's type (`CASE WHEN … THEN 0
            // ELSE price END` would be a bigint); coercion gives every branch the common one.
            Some(a)
                if p.data_type().is_integer()
                    && (a.data_type().is_floating() || is_decimal(a.data_type())) =>
            {
                p.as_ref().clone().with_data_type(a.data_type().clone())
            }
            _ => p.as_ref().clone(),
        })
        .collect();
    Schema::new_with_metadata(fields, planned.metadata().clone())
}

/// The most `$n` parameters a statement may have (PostgreSQL's limit).
pub const MAX_PARAMETERS: usize = 65_535;

/// Parameter types in `$1, $2, …` order (numeric, so `$10` follows `$9`).
///
/// # Errors
/// When a placeholder number exceeds [`MAX_PARAMETERS`] (`$1000000000` must not allocate).
pub fn ordered_param_types(
    types: &std::collections::HashMap<String, Option<arrow::datatypes::DataType>>,
) -> Result<Vec<Option<arrow::datatypes::DataType>>> {
    let mut entries: Vec<(usize, Option<arrow::datatypes::DataType>)> = types
        .iter()
        .filter_map(|(k, v)| {
            k.trim_start_matches('$')
                .parse::<usize>()
                .ok()
                .map(|i| (i, v.clone()))
        })
        .collect();
    entries.sort_by_key(|(i, _)| *i);
    let len = entries.last().map_or(0, |(i, _)| *i);
    if len > MAX_PARAMETERS {
        return Err(Error::from(DataFusionError::Plan(format!(
            "there is no parameter ${len}: at most {MAX_PARAMETERS} parameters are allowed"
        ))));
    }
    let mut out = vec![None; len];
    for (i, t) in entries {
        if i >= 1 {
            out[i - 1] = t;
        }
    }
    Ok(out)
}

#[async_trait]
impl Engine for DataFusionEngine {
    fn name(&self) -> &str {
        self.name
    }

    fn declines(&self, pins: &Pins, reads_system: bool) -> Option<String> {
        self.held
            .as_ref()
            .and_then(|held| held.declines(pins, reads_system))
    }

    fn record_declined(&self) {
        if let Some(held) = &self.held {
            held.record_declined();
        }
    }

    async fn execute(&self, request: EngineRequest<'_>) -> Result<SendableRecordBatchStream> {
        Ok(self.start(request).await?.stream)
    }

    async fn start(&self, request: EngineRequest<'_>) -> Result<Started> {
        let began = Instant::now();
        let key = self.plans.key(&request);
        let kept = match key.and_then(|k| self.plans.get(k, &request)) {
            Some(kept) => kept,
            None => {
                let ctx = self.context(&request).await?;
                let (plan, _) = self.plan(&ctx, request.statement).await?;
                match key.filter(|k| self.plans.admits(*k, &request, &plan)) {
                    Some(key) => self.plans.insert(key, &request, &plan, ctx.state()),
                    None => {
                        let plan = bind(plan, request.params)?;
                        // Statements DataFusion executes itself (`SET`, DDL) go to it.
                        if matches!(
                            plan,
                            LogicalPlan::Ddl(_) | LogicalPlan::Statement(_) | LogicalPlan::Dml(_)
                        ) {
                            let df = ctx.execute_logical_plan(plan).await?;
                            let planning = began.elapsed();
                            return Ok(Started {
                                stream: df.execute_stream().await?,
                                planning,
                            });
                        }
                        let state = ctx.state();
                        let task = Arc::new(TaskContext::from(&state));
                        let optimized = state.optimize(&plan)?;
                        let planning = began.elapsed();
                        return Ok(Started {
                            stream: run(&optimized, &state, &task).await?,
                            planning,
                        });
                    }
                }
            }
        };
        let optimized = match kept.optimized.as_ref().and_then(|o| o.bind(request.params)) {
            Some(optimized) => optimized?,
            None => kept
                .state
                .optimize(&bind(kept.plan.clone(), request.params)?)?,
        };
        let planning = began.elapsed();
        Ok(Started {
            stream: run(&optimized, &kept.state, &kept.task).await?,
            planning,
        })
    }
}

/// An optimised `plan` run in `state`: directly when it is a simple scan ([`crate::direct`]),
/// else planned physically.
async fn run(
    plan: &LogicalPlan,
    state: &SessionState,
    task: &Arc<TaskContext>,
) -> Result<SendableRecordBatchStream> {
    if let Some(direct) = crate::direct::stream(plan, state, task).await {
        return direct;
    }
    let physical = state
        .query_planner()
        .create_physical_plan(plan, state)
        .await?;
    Ok(datafusion::physical_plan::execute_stream(
        physical,
        Arc::clone(task),
    )?)
}

/// `plan` with `params` bound (an error when it has placeholders and none were bound).
fn bind(plan: LogicalPlan, params: Option<&ParamValues>) -> Result<LogicalPlan> {
    if let Some(params) = params {
        return Ok(plan.replace_params_with_values(params)?);
    }
    if !plan.get_parameter_types()?.is_empty() {
        return Err(Error::from(DataFusionError::Plan(
            "statement has $n placeholders but no parameters were bound".into(),
        )));
    }
    Ok(plan)
}

/// Parameters for [`EngineRequest::params`] from positional values.
pub fn positional_params(values: Vec<datafusion::scalar::ScalarValue>) -> ParamValues {
    ParamValues::List(values.into_iter().map(Into::into).collect())
}

/// The lake as one DataFusion catalog for one statement.
#[derive(Debug)]
struct LakeCatalog {
    lake: Arc<Lake>,
    pins: Pins,
    held: Option<Arc<Accelerator>>,
    /// The zone `timestamptz` columns are read in ([`crate::session_zone`]).
    zone: Option<Arc<str>>,
    directory: Arc<Directory>,
    pg_catalog: Arc<dyn SchemaProvider>,
    system: Arc<dyn SchemaProvider>,
}

impl CatalogProvider for LakeCatalog {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn schema_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.directory.schemas.keys().cloned().collect();
        names.push("pg_catalog".to_string());
        names.push(crate::system_catalog::LAKEGATE_SCHEMA.to_string());
        names
    }

    fn schema(&self, name: &str) -> Option<Arc<dyn SchemaProvider>> {
        if name == "pg_catalog" {
            return Some(self.pg_catalog.clone());
        }
        if name == crate::system_catalog::LAKEGATE_SCHEMA {
            return Some(self.system.clone());
        }
        if SYSTEM_SCHEMAS.contains(&name) {
            return None;
        }
        Some(Arc::new(LakeSchema {
            lake: self.lake.clone(),
            schema: name.to_string(),
            pins: self.pins.clone(),
            held: self.held.clone(),
            zone: self.zone.clone(),
            names: self
                .directory
                .schemas
                .get(name)
                .cloned()
                .unwrap_or_default(),
        }))
    }
}

/// One namespace for one statement: pinned tables first, anything else resolved on demand.
#[derive(Debug)]
struct LakeSchema {
    lake: Arc<Lake>,
    schema: String,
    pins: Pins,
    /// The accelerated copies this statement reads instead of files.
    held: Option<Arc<Accelerator>>,
    zone: Option<Arc<str>>,
    names: Vec<String>,
}

#[async_trait]
impl SchemaProvider for LakeSchema {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn table_names(&self) -> Vec<String> {
        self.names.clone()
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>, DataFusionError> {
        if let Some(held) = &self.held {
            let pinned = self.pins.get(&self.schema, name).map(|t| t.snapshot_id);
            return match pinned.and_then(|s| held.copy(&self.schema, name, s)) {
                Some(copy) => Ok(Some(Arc::new(crate::accel::scan::HeldTable::new(
                    copy,
                    self.zone.clone(),
                )))),
                None => Err(DataFusionError::External(Box::new(Error::Unsupported {
                    what: format!(
                        "{}.{name} on the accelerated engine (not held at the statement's snapshot)",
                        self.schema
                    ),
                }))),
            };
        }
        let resolved = match self.pins.get(&self.schema, name) {
            Some(t) => t.clone(),
            None => match self.lake.resolve(&self.schema, name).await {
                Ok(t) => t,
                Err(Error::TableNotFound { .. }) => return Ok(None),
                Err(e) => return Err(DataFusionError::External(Box::new(e))),
            },
        };
        let provider = crate::lake_scan::LakeTable::try_new(
            self.lake.clone(),
            resolved.table.clone(),
            resolved.snapshot_id,
            self.zone.clone(),
        )
        .await?;
        Ok(Some(Arc::new(provider)))
    }

    fn table_exist(&self, name: &str) -> bool {
        self.pins.get(&self.schema, name).is_some() || self.names.iter().any(|n| n == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::DataType;
    use std::collections::HashMap;

    #[test]
    fn parameters_are_ordered_numerically() {
        let mut types = HashMap::new();
        for i in 1..=11 {
            types.insert(
                format!("${i}"),
                Some(if i == 10 {
                    DataType::Utf8
                } else {
                    DataType::Int64
                }),
            );
        }
        let ordered = ordered_param_types(&types).expect("within the limit");
        assert_eq!(ordered.len(), 11);
        assert_eq!(ordered[9], Some(DataType::Utf8));
        assert_eq!(ordered[10], Some(DataType::Int64));
    }

    #[test]
    fn absurd_parameter_numbers_are_refused_without_allocating() {
        let mut types = HashMap::new();
        types.insert("$1000000000".to_string(), Some(DataType::Int64));
        let err = ordered_param_types(&types).expect_err("too many");
        assert!(err.to_string().contains("$1000000000"), "{err}");
    }
}
