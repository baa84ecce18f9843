//! Catalog statements answered by the PostgreSQL catalog mirror: the decision (a catalog
//! statement, a mirror running, and a session that sees every table — access rules that hide
//! tables keep the emulated catalog, which filters by user) and the SQL sent.

use std::sync::Arc;

use datafusion::sql::parser::DFParser;
use datafusion::sql::sqlparser::ast::Statement;
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;

use super::GatewayService;
use crate::classify;
use crate::mirror::database::MirrorDb;
use crate::mirror::route;
use crate::session::Session;

/// A statement the mirror answers, and the SQL to send it.
#[derive(Debug, Clone)]
pub struct Forward {
    /// The mirror database that answers it.
    pub db: Arc<MirrorDb>,
    /// The SQL it runs.
    pub sql: String,
    /// The largest answer it may have (`[limits] max_result_bytes`, else 64 MiB).
    pub max_bytes: u64,
    /// Whether it reads `pg_catalog` or `information_schema` (then the mirror first checks
    /// that it lists the lake's tables of this moment).
    pub reads_catalog: bool,
}

/// The statements a connection last found the gateway answers entirely (none is the
/// mirror's), and the default schema that was judged in: a connection repeating its text
/// (every extended-protocol execution parses it again) is not walked again. The statements
/// are the parser's kept ones, compared by address (held here, so the address is theirs).
#[derive(Debug, Default)]
pub struct Answered(std::sync::Mutex<Option<(Arc<Vec<Statement>>, String)>>);

impl Answered {
    fn knows(&self, parsed: &Arc<Vec<Statement>>, default_schema: &str) -> bool {
        let last = self.0.lock().unwrap_or_else(|p| p.into_inner());
        last.as_ref()
            .is_some_and(|(s, d)| Arc::ptr_eq(s, parsed) && d == default_schema)
    }

    fn remember(&self, parsed: &Arc<Vec<Statement>>, default_schema: String) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some((parsed.clone(), default_schema));
    }
}

impl GatewayService {
    /// The statements of `text` (parsed by the gateway as `parsed`) the catalog mirror
    /// answers for `session`, by position (`None`: the gateway answers it; empty: all of
    /// them). A statement that reads a lake table costs one walk of `parsed`; the others are
    /// parsed again as the client wrote them (the gateway's parse rewrites catalog constructs
    /// for the emulation), and that text is what the mirror runs.
    pub async fn catalog_forwards(
        &self,
        text: &str,
        parsed: &Arc<Vec<Statement>>,
        session: &Session,
        answered: &Answered,
    ) -> Vec<Option<Forward>> {
        let Some(mirror) = self.mirror.as_ref() else {
            return vec![];
        };
        let default_schema = session.default_schema();
        if answered.knows(parsed, &default_schema) {
            return vec![];
        }
        // The gateway answers what reads the lake, and rows of literals (`SELECT 1`).
        let gateway_answers = |s: &Statement| {
            super::constant::of(s).is_some()
                || classify::references(s, &default_schema)
                    .map_or(true, |r| !r.lake.is_empty() || !r.system.is_empty())
        };
        if parsed.iter().all(gateway_answers) {
            answered.remember(parsed, default_schema.to_string());
            return vec![];
        }
        let Ok(statements) = DFParser::parse_sql_with_dialect(text, &PostgreSqlDialect {}) else {
            return vec![];
        };
        let statements: Vec<Statement> = statements
            .into_iter()
            .filter_map(|s| match s {
                datafusion::sql::parser::Statement::Statement(s) => Some(*s),
                _ => None,
            })
            .collect();
        // Per statement: whether the mirror answers it, and whether it reads the catalog.
        let forwardable: Vec<Option<bool>> = statements
            .iter()
            .map(|s| {
                if super::constant::of(s).is_some() {
                    return None;
                }
                let refs = classify::references(s, &default_schema).ok()?;
                route::forwardable(s, &refs).then_some(refs.catalog)
            })
            .collect();
        if forwardable.iter().all(Option::is_none) || !self.sees_every_table(session).await {
            return vec![];
        }
        let db = mirror.database(session.database()).await;
        let whole = (statements.len() == 1).then_some(text);
        statements
            .iter()
            .zip(forwardable)
            .map(|(s, catalog)| {
                catalog.map(|reads_catalog| Forward {
                    db: db.clone(),
                    sql: route::mirror_sql(s, whole, session.database(), db.name()),
                    max_bytes: match self.security.max_result_bytes {
                        0 => crate::mirror::wire::MAX_ANSWER_BYTES,
                        n => n,
                    },
                    reads_catalog,
                })
            })
            .collect()
    }

    /// Whether `session`'s user sees every table of the lake (no access rule hides one).
    async fn sees_every_table(&self, session: &Session) -> bool {
        let Some(visible) = self.security.visibility(session.user()) else {
            return true;
        };
        let Ok(directory) = self.lake.directory().await else {
            return false;
        };
        directory
            .schemas
            .iter()
            .all(|(ns, tables)| tables.iter().all(|t| (visible.allows)(ns, t)))
    }
}
