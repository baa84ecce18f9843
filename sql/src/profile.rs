//! The query profile the router decides on, read from the sqlparser AST (never the SQL text):
//! the statement's shape (point lookup, filtered scan, aggregate, join, window, metadata,
//! utility), the lake tables it reads, the columns it filters, joins and groups on, its LIMIT,
//! and (filled in after resolution) an estimate of the bytes it scans.

use std::collections::BTreeSet;
use std::fmt;

use sqlparser::ast::{
    BinaryOperator, Expr, FunctionArguments, GroupByExpr, JoinConstraint, JoinOperator,
    LimitClause, Query, Select, SelectItem, SetExpr, Statement, TableFactor, TableWithJoins, Value,
};

use crate::classify::{References, StatementKind, TableName};

/// What kind of work a statement is, for routing and latency statistics.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Shape {
    /// One table, an equality filter (`WHERE id = 42`), no aggregation.
    PointLookup,
    /// One table with a filter that is not a point lookup.
    FilteredScan,
    /// One table, no filter.
    Scan,
    /// GROUP BY or aggregate functions over one table.
    Aggregate,
    /// More than one table.
    Join,
    /// Window functions.
    Window,
    /// Catalog or lakegate tables only (`pg_catalog`, `information_schema`, `lakegate.*`) or
    /// constants.
    Metadata,
    /// Not a query (SET, SHOW, BEGIN, cursors...).
    Utility,
}

impl Shape {
    /// Every shape, in a stable order.
    pub const ALL: [Shape; 8] = [
        Shape::PointLookup,
        Shape::FilteredScan,
        Shape::Scan,
        Shape::Aggregate,
        Shape::Join,
        Shape::Window,
        Shape::Metadata,
        Shape::Utility,
    ];

    /// The name used in routing rules and system tables (`point_lookup`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Shape::PointLookup => "point_lookup",
            Shape::FilteredScan => "filtered_scan",
            Shape::Scan => "scan",
            Shape::Aggregate => "aggregate",
            Shape::Join => "join",
            Shape::Window => "window",
            Shape::Metadata => "metadata",
            Shape::Utility => "utility",
        }
    }

    /// The shape called `name`.
    pub fn from_name(name: &str) -> Option<Shape> {
        Self::ALL.into_iter().find(|s| s.name() == name)
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Everything the router knows about a statement before it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryProfile {
    /// The statement's shape.
    pub shape: Shape,
    /// Lake tables read (CTEs resolved to the tables they read).
    pub tables: Vec<TableName>,
    /// Columns compared in WHERE / HAVING.
    pub filter_columns: Vec<String>,
    /// Columns in JOIN conditions.
    pub join_columns: Vec<String>,
    /// Columns in GROUP BY.
    pub group_columns: Vec<String>,
    /// The outermost LIMIT, when it is a number.
    pub limit: Option<u64>,
    /// Estimated bytes to scan (data files after pruning), once resolved.
    pub scan_bytes: Option<u64>,
}

impl QueryProfile {
    /// The profile of a statement that is not a query.
    pub fn utility() -> Self {
        Self {
            shape: Shape::Utility,
            tables: vec![],
            filter_columns: vec![],
            join_columns: vec![],
            group_columns: vec![],
            limit: None,
            scan_bytes: None,
        }
    }

    /// The profile of a statement of `kind` reading `refs`.
    pub fn of(statement: &Statement, kind: &StatementKind, refs: &References) -> Self {
        let mut profile = Self {
            tables: refs.lake.clone(),
            ..Self::utility()
        };
        if *kind != StatementKind::Query {
            return profile;
        }
        let query = match statement {
            Statement::Query(q) => q.as_ref(),
            Statement::Explain { statement, .. } => match statement.as_ref() {
                Statement::Query(q) => q.as_ref(),
                _ => return profile,
            },
            _ => return profile,
        };
        let mut walk = Walk::default();
        walk.query(query);
        profile.limit = limit_of(query);
        profile.filter_columns = walk.filter.into_iter().collect();
        profile.join_columns = walk.join.into_iter().collect();
        profile.group_columns = walk.group.into_iter().collect();
        profile.shape = if refs.lake.is_empty() {
            Shape::Metadata
        } else if walk.window {
            Shape::Window
        } else if refs.lake.len() > 1 || walk.joins > 0 {
            Shape::Join
        } else if walk.aggregate {
            Shape::Aggregate
        } else if walk.equality {
            Shape::PointLookup
        } else if !profile.filter_columns.is_empty() {
            Shape::FilteredScan
        } else {
            Shape::Scan
        };
        profile
    }
}

/// The WHERE of a plain `SELECT ... FROM t WHERE ...` (the top-level select), if any.
pub fn top_where(statement: &Statement) -> Option<&Expr> {
    let Statement::Query(q) = statement else {
        return None;
    };
    match q.body.as_ref() {
        SetExpr::Select(select) => select.selection.as_ref(),
        _ => None,
    }
}

/// `expr` with bound parameters (`$1`, …) replaced by string literals of their values
/// (`value(n)` for `$n`; `None` leaves the placeholder), so a parameterised WHERE translates to
/// an Iceberg predicate like a literal one would.
pub fn bind_parameters(expr: &Expr, value: impl Fn(usize) -> Option<String>) -> Expr {
    use sqlparser::ast::{ValueWithSpan, visit_expressions_mut};
    let mut expr = expr.clone();
    let _ = visit_expressions_mut(&mut expr, |e| {
        if let Expr::Value(ValueWithSpan {
            value: Value::Placeholder(p),
            ..
        }) = e
            && let Some(text) = p
                .strip_prefix('$')
                .and_then(|n| n.parse::<usize>().ok())
                .and_then(&value)
        {
            *e = Expr::Value(Value::SingleQuotedString(text).into());
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
    expr
}

/// Functions that make a query an aggregate.
const AGGREGATES: &[&str] = &[
    "count",
    "sum",
    "avg",
    "min",
    "max",
    "stddev",
    "stddev_pop",
    "stddev_samp",
    "variance",
    "var_pop",
    "var_samp",
    "array_agg",
    "string_agg",
    "bool_and",
    "bool_or",
    "approx_distinct",
    "approx_percentile_cont",
    "median",
    "percentile_cont",
];

#[derive(Default)]
struct Walk {
    filter: BTreeSet<String>,
    join: BTreeSet<String>,
    group: BTreeSet<String>,
    joins: usize,
    aggregate: bool,
    window: bool,
    /// A `column = constant` conjunct at the top of a WHERE.
    equality: bool,
}

impl Walk {
    fn query(&mut self, query: &Query) {
        if let Some(with) = &query.with {
            for cte in &with.cte_tables {
                self.query(&cte.query);
            }
        }
        self.set_expr(&query.body);
    }

    fn set_expr(&mut self, body: &SetExpr) {
        match body {
            SetExpr::Select(select) => self.select(select),
            SetExpr::Query(q) => self.query(q),
            SetExpr::SetOperation { left, right, .. } => {
                self.set_expr(left);
                self.set_expr(right);
            }
            _ => {}
        }
    }

    fn select(&mut self, select: &Select) {
        for from in &select.from {
            self.from(from);
        }
        if let Some(selection) = &select.selection {
            self.equality |= has_equality(selection);
            columns(selection, &mut self.filter);
            self.expr_calls(selection);
        }
        if let Some(having) = &select.having {
            columns(having, &mut self.filter);
        }
        if let GroupByExpr::Expressions(exprs, _) = &select.group_by {
            for e in exprs {
                columns(e, &mut self.group);
            }
            self.aggregate |= !exprs.is_empty();
        }
        for item in &select.projection {
            if let SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } = item {
                self.expr_calls(e);
            }
        }
    }

    fn from(&mut self, from: &TableWithJoins) {
        self.factor(&from.relation);
        for join in &from.joins {
            self.joins += 1;
            self.factor(&join.relation);
            let constraint = match &join.join_operator {
                JoinOperator::Join(c)
                | JoinOperator::Inner(c)
                | JoinOperator::Left(c)
                | JoinOperator::LeftOuter(c)
                | JoinOperator::Right(c)
                | JoinOperator::RightOuter(c)
                | JoinOperator::FullOuter(c)
                | JoinOperator::Semi(c)
                | JoinOperator::LeftSemi(c)
                | JoinOperator::RightSemi(c)
                | JoinOperator::Anti(c)
                | JoinOperator::LeftAnti(c)
                | JoinOperator::RightAnti(c) => Some(c),
                _ => None,
            };
            match constraint {
                Some(JoinConstraint::On(e)) => columns(e, &mut self.join),
                Some(JoinConstraint::Using(names)) => {
                    for n in names {
                        self.join.insert(n.to_string().to_lowercase());
                    }
                }
                _ => {}
            }
        }
    }

    fn factor(&mut self, factor: &TableFactor) {
        match factor {
            TableFactor::Derived { subquery, .. } => self.query(subquery),
            TableFactor::NestedJoin {
                table_with_joins, ..
            } => self.from(table_with_joins),
            _ => {}
        }
    }

    /// Notes aggregate and window calls, and walks subqueries, inside an expression.
    fn expr_calls(&mut self, expr: &Expr) {
        use sqlparser::ast::Visit;
        use std::ops::ControlFlow;
        struct Calls<'a>(&'a mut Walk);
        impl sqlparser::ast::Visitor for Calls<'_> {
            type Break = ();
            fn pre_visit_expr(&mut self, e: &Expr) -> ControlFlow<()> {
                match e {
                    Expr::Function(f) => {
                        if f.over.is_some() {
                            self.0.window = true;
                        } else {
                            let name = f.name.to_string().to_lowercase();
                            let name = name.rsplit('.').next().unwrap_or_default();
                            if AGGREGATES.contains(&name)
                                && !matches!(f.args, FunctionArguments::None)
                            {
                                self.0.aggregate = true;
                            }
                        }
                    }
                    Expr::Subquery(q) | Expr::Exists { subquery: q, .. } => self.0.query(q),
                    Expr::InSubquery { subquery, .. } => self.0.query(subquery),
                    _ => {}
                }
                ControlFlow::Continue(())
            }
        }
        let _ = expr.visit(&mut Calls(self));
    }
}

/// Whether a WHERE has a `column = constant` conjunct (AND-ed at the top).
fn has_equality(e: &Expr) -> bool {
    match e {
        Expr::BinaryOp {
            left,
            op: BinaryOperator::And,
            right,
        } => has_equality(left) || has_equality(right),
        Expr::Nested(inner) => has_equality(inner),
        Expr::BinaryOp {
            left,
            op: BinaryOperator::Eq,
            right,
        } => (is_column(left) && is_constant(right)) || (is_column(right) && is_constant(left)),
        _ => false,
    }
}

fn is_column(e: &Expr) -> bool {
    matches!(e, Expr::Identifier(_) | Expr::CompoundIdentifier(_))
}

fn is_constant(e: &Expr) -> bool {
    match e {
        Expr::Value(_) | Expr::TypedString { .. } => true,
        Expr::Cast { expr, .. } | Expr::Nested(expr) | Expr::UnaryOp { expr, .. } => {
            is_constant(expr)
        }
        _ => false,
    }
}

/// The column names an expression mentions (last part of compound names, lower-cased unless
/// quoted).
fn columns(e: &Expr, out: &mut BTreeSet<String>) {
    use sqlparser::ast::Visit;
    use std::ops::ControlFlow;
    struct Names<'a>(&'a mut BTreeSet<String>);
    impl sqlparser::ast::Visitor for Names<'_> {
        type Break = ();
        fn pre_visit_expr(&mut self, e: &Expr) -> ControlFlow<()> {
            let ident = match e {
                Expr::Identifier(i) => Some(i),
                Expr::CompoundIdentifier(parts) => parts.last(),
                _ => None,
            };
            if let Some(i) = ident {
                self.0.insert(if i.quote_style.is_some() {
                    i.value.clone()
                } else {
                    i.value.to_lowercase()
                });
            }
            ControlFlow::Continue(())
        }
    }
    let _ = e.visit(&mut Names(out));
}

fn limit_of(query: &Query) -> Option<u64> {
    match &query.limit_clause {
        Some(LimitClause::LimitOffset {
            limit: Some(Expr::Value(v)),
            ..
        }) => match &v.value {
            Value::Number(n, _) => n.parse().ok(),
            _ => None,
        },
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify;
    use sqlparser::dialect::PostgreSqlDialect;
    use sqlparser::parser::Parser;

    fn profile(sql: &str) -> QueryProfile {
        let statement = Parser::parse_sql(&PostgreSqlDialect {}, sql)
            .expect("valid SQL")
            .remove(0);
        let kind = classify::kind(&statement);
        let refs = classify::references(&statement, "public").expect("references");
        QueryProfile::of(&statement, &kind, &refs)
    }

    #[test]
    fn shapes_of_real_queries() {
        let cases = [
            (
                "SELECT * FROM orders WHERE order_id = 42",
                Shape::PointLookup,
            ),
            (
                "SELECT * FROM orders WHERE order_id = $1",
                Shape::PointLookup,
            ),
            (
                "SELECT amount FROM orders WHERE order_id = 42 AND status <> 'x'",
                Shape::PointLookup,
            ),
            (
                "SELECT * FROM orders WHERE amount > 10",
                Shape::FilteredScan,
            ),
            (
                "SELECT * FROM orders WHERE status IN ('a', 'b') LIMIT 10",
                Shape::FilteredScan,
            ),
            ("SELECT * FROM orders", Shape::Scan),
            (
                "SELECT status, count(*) FROM orders GROUP BY status",
                Shape::Aggregate,
            ),
            ("SELECT count(*) FROM orders WHERE id = 3", Shape::Aggregate),
            (
                "SELECT * FROM orders o JOIN customers c ON o.customer_id = c.id",
                Shape::Join,
            ),
            ("SELECT * FROM orders, customers", Shape::Join),
            (
                "SELECT * FROM orders WHERE customer_id IN (SELECT id FROM customers)",
                Shape::Join,
            ),
            (
                "SELECT id, rank() OVER (ORDER BY amount) FROM orders",
                Shape::Window,
            ),
            (
                "WITH r AS (SELECT * FROM orders WHERE amount > 1) SELECT count(*) FROM r",
                Shape::Aggregate,
            ),
            (
                "SELECT relname FROM pg_catalog.pg_class WHERE relkind = 'r'",
                Shape::Metadata,
            ),
            ("SELECT * FROM lakegate.queries", Shape::Metadata),
            ("SELECT 1", Shape::Metadata),
            ("SET search_path = x", Shape::Utility),
            ("BEGIN", Shape::Utility),
        ];
        for (sql, want) in cases {
            assert_eq!(profile(sql).shape, want, "{sql}");
        }
    }

    #[test]
    fn columns_tables_and_limit() {
        let p = profile(
            "WITH recent AS (SELECT * FROM sales.orders WHERE ts > now()) \
             SELECT c.country, sum(r.amount) FROM recent r JOIN customers c \
             ON r.customer_id = c.\"Id\" WHERE c.active GROUP BY c.country LIMIT 5",
        );
        assert_eq!(p.shape, Shape::Join);
        assert_eq!(
            p.tables,
            vec![
                ("public".to_string(), "customers".to_string()),
                ("sales".to_string(), "orders".to_string())
            ]
        );
        assert_eq!(p.filter_columns, vec!["active", "ts"]);
        assert_eq!(p.join_columns, vec!["Id", "customer_id"]);
        assert_eq!(p.group_columns, vec!["country"]);
        assert_eq!(p.limit, Some(5));
    }
}
