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
use crate::mirror::{CatalogMirror, route};
use crate::session::Session;

/// A statement the mirror answers, and the SQL to send it.
#[derive(Debug, Clone)]
pub struct Forward {
    /// The mirror database that answers it.
    pub db: Arc<MirrorDb>,
    /// The SQL it runs.
    pub sql: String,
}

impl GatewayService {
    /// The statements of `text` the catalog mirror answers for `session`, by position
    /// (`None`: the gateway answers it; empty: all of them). The text is parsed as the client
    /// wrote it — the gateway's own parse rewrites catalog constructs for the emulation — and
    /// only when it can name the catalog at all.
    pub async fn catalog_forwards(&self, text: &str, session: &Session) -> Vec<Option<Forward>> {
        let Some(mirror) = self.mirror.as_ref() else {
            return vec![];
        };
        if !route::may_read_catalog(text) {
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
        let settings = session.engine_settings();
        let forwardable: Vec<bool> = statements
            .iter()
            .map(|s| {
                classify::references(s, settings.default_schema())
                    .is_ok_and(|refs| route::forwardable(s, &refs))
            })
            .collect();
        if !forwardable.contains(&true) || !self.sees_every_table(session).await {
            return vec![];
        }
        let db = mirror.database(session.database()).await;
        let whole = (statements.len() == 1).then_some(text);
        statements
            .iter()
            .zip(forwardable)
            .map(|(s, yes)| {
                yes.then(|| Forward {
                    db: db.clone(),
                    sql: route::mirror_sql(s, whole, session.database(), db.name()),
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

    /// The catalog mirror, when one runs.
    pub fn mirror(&self) -> Option<&Arc<CatalogMirror>> {
        self.mirror.as_ref()
    }
}
