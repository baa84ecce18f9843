//! What a statement is made of, by name: its functions, aggregates, window functions, casts,
//! operators and clauses ([`constructs`]). An engine other than the planner answers only
//! statements made of constructs the differential suite has verified on it against PostgreSQL
//! (its [`crate::Engine::verified`] list); anything else is refused there, so a function or
//! clause nobody compared (`lpad` on Spark, `x IN (1, NULL)` on Trino) is answered by an engine
//! that gives PostgreSQL's answer, never differently.
//!
//! Names are stable text: a function by DataFusion's name for it (`substr`, `date_trunc`), an
//! aggregate as `agg:name`, a window function as `window:name`, a cast as
//! `cast:from>to` by type class, an operator as `op:symbol` (with `:float` when it compares
//! floats, whose NaN engines order differently), and clauses by their SQL name. A call whose
//! argument has a shape engines disagree on is named for that shape (`substr:start<1`).

use std::collections::BTreeSet;

use arrow::datatypes::DataType;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{DFSchema, ScalarValue};
use datafusion::logical_expr::expr::{
    AggregateFunction, Cast, InList, Like, ScalarFunction, TryCast, WindowFunction,
};
use datafusion::logical_expr::{
    BinaryExpr, Distinct, Expr, ExprSchemable, GroupingSet, LogicalPlan, Operator,
    WindowFrameBound, WindowFrameUnits,
};

use crate::pg_float_keys::is_float;

/// The constructs of a statement, sorted.
pub type Constructs = BTreeSet<String>;

/// The constructs of `plan` (as planned from the statement, before analysis: what the user
/// wrote, not the embedded engine's own rewrites), subqueries included.
pub fn constructs(plan: &LogicalPlan) -> Constructs {
    let mut found = Constructs::new();
    let _ = plan.apply_with_subqueries(|node| {
        clause(node, &mut found);
        let schema = crate::semantics::input_schema(node);
        let truth = truth_positions(node);
        let _ = node.apply_expressions(|expr| {
            expr.apply(|e| {
                expression(e, &schema, &truth, &mut found);
                Ok(TreeNodeRecursion::Continue)
            })
        });
        Ok(TreeNodeRecursion::Continue)
    });
    found
}

/// Whether `e` is the float NaN written as a literal (`'NaN'::float8`).
fn is_nan(e: &Expr) -> bool {
    match e {
        Expr::Cast(Cast { expr, .. }) | Expr::TryCast(TryCast { expr, .. }) => is_nan(expr),
        Expr::Literal(v, _) => match v {
            ScalarValue::Float64(Some(f)) => f.is_nan(),
            ScalarValue::Float32(Some(f)) => f.is_nan(),
            v => v
                .try_as_str()
                .flatten()
                .is_some_and(|t| t.trim().eq_ignore_ascii_case("nan")),
        },
        _ => false,
    }
}

/// The keys a node sorts, groups, joins or makes distinct by, when they are floats.
fn float_keys(node: &LogicalPlan, found: &mut Constructs) {
    let schema = crate::semantics::input_schema(node);
    let float = |e: &Expr| is_float(e, &schema);
    let name = match node {
        LogicalPlan::Sort(s) if s.expr.iter().any(|k| float(&k.expr)) => "order_by:float",
        LogicalPlan::Aggregate(a) if a.group_expr.iter().any(float) => "group_by:float",
        LogicalPlan::Join(j) if j.on.iter().any(|(l, r)| float(l) || float(r)) => "join_on:float",
        LogicalPlan::Distinct(_)
            if node
                .schema()
                .fields()
                .iter()
                .any(|f| f.data_type().is_floating()) =>
        {
            "distinct:float"
        }
        LogicalPlan::Window(w)
            if w.window_expr.iter().any(|e| {
                let mut e = e;
                while let Expr::Alias(a) = e {
                    e = &a.expr;
                }
                matches!(e, Expr::WindowFunction(f)
                    if f.params.order_by.iter().any(|k| float(&k.expr))
                        || f.params.partition_by.iter().any(float))
            }) =>
        {
            "window_by:float"
        }
        _ => return,
    };
    found.insert(name.into());
}

fn clause(node: &LogicalPlan, found: &mut Constructs) {
    float_keys(node, found);
    let name = match node {
        LogicalPlan::Aggregate(a) => {
            if a.group_expr
                .iter()
                .any(|g| matches!(g, Expr::GroupingSet(GroupingSet::Rollup(_))))
            {
                found.insert("rollup".into());
            }
            if a.group_expr
                .iter()
                .any(|g| matches!(g, Expr::GroupingSet(GroupingSet::Cube(_))))
            {
                found.insert("cube".into());
            }
            if a.group_expr
                .iter()
                .any(|g| matches!(g, Expr::GroupingSet(GroupingSet::GroupingSets(_))))
            {
                found.insert("grouping_sets".into());
            }
            return;
        }
        LogicalPlan::Join(j) => match j.join_type {
            datafusion::common::JoinType::Full => "full_join",
            datafusion::common::JoinType::Left | datafusion::common::JoinType::Right => {
                "outer_join"
            }
            _ => return,
        },
        LogicalPlan::Distinct(Distinct::On(_)) => "distinct_on",
        LogicalPlan::Distinct(Distinct::All(_)) => "distinct",
        LogicalPlan::Union(_) => "union",
        LogicalPlan::RecursiveQuery(_) => "recursive",
        LogicalPlan::Unnest(_) => "unnest",
        LogicalPlan::Values(_) => "values",
        LogicalPlan::Window(w) => {
            for e in &w.window_expr {
                window_frame(e, found);
            }
            return;
        }
        _ => return,
    };
    found.insert(name.into());
}

fn window_frame(e: &Expr, found: &mut Constructs) {
    let mut e = e;
    while let Expr::Alias(a) = e {
        e = &a.expr;
    }
    let Expr::WindowFunction(w) = e else {
        return;
    };
    let frame = &w.params.window_frame;
    let offset = |b: &WindowFrameBound| match b {
        WindowFrameBound::Preceding(v) | WindowFrameBound::Following(v) => !v.is_null(),
        WindowFrameBound::CurrentRow => false,
    };
    let bounded = offset(&frame.start_bound) || offset(&frame.end_bound);
    let name = match (frame.units, bounded) {
        (WindowFrameUnits::Rows, true) => "window_rows_offset",
        (WindowFrameUnits::Range, true) => "window_range_offset",
        (WindowFrameUnits::Groups, _) => "window_groups",
        _ => return,
    };
    found.insert(name.into());
}

/// The class of a type, as casts are named.
fn class(t: &DataType) -> &'static str {
    match t {
        DataType::Null => "null",
        DataType::Boolean => "bool",
        t if t.is_integer() => "int",
        DataType::Decimal32(..)
        | DataType::Decimal64(..)
        | DataType::Decimal128(..)
        | DataType::Decimal256(..) => "numeric",
        t if t.is_floating() => "float",
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => "text",
        DataType::Date32 | DataType::Date64 => "date",
        DataType::Timestamp(_, None) => "timestamp",
        DataType::Timestamp(_, Some(_)) => "timestamptz",
        DataType::Time32(_) | DataType::Time64(_) => "time",
        DataType::Interval(_) | DataType::Duration(_) => "interval",
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => "bytea",
        DataType::List(_) | DataType::LargeList(_) | DataType::FixedSizeList(..) => "array",
        _ => "other",
    }
}

fn literal_i64(e: &Expr) -> Option<i64> {
    let mut e = e;
    loop {
        match e {
            Expr::Cast(Cast { expr, .. }) | Expr::TryCast(TryCast { expr, .. }) => e = expr,
            Expr::Literal(v, _) => {
                return match v.cast_to(&DataType::Int64).ok()? {
                    ScalarValue::Int64(Some(n)) => Some(n),
                    _ => None,
                };
            }
            Expr::Negative(inner) => return literal_i64(inner).map(|n| -n),
            _ => return None,
        }
    }
}

/// A scalar function's name with its arguments' type classes (`lpad(text,int,text)`), the
/// unit or field of a date function (`date_trunc:quarter(timestamp)`), and the shape of an
/// argument engines disagree on (`substr:start<1(text,int,int)`).
fn function(f: &ScalarFunction, schema: &DFSchema) -> String {
    let name = f.name();
    let nth = |i: usize| f.args.get(i).and_then(literal_i64);
    let text = |i: usize| match f.args.get(i) {
        Some(Expr::Literal(v, _)) => v.try_as_str().flatten().map(str::to_ascii_lowercase),
        _ => None,
    };
    let shape: Option<String> = match name {
        // SQL's substring from position 0 or below counts the characters before the string.
        "substr" if nth(1).is_none_or(|s| s < 1) => Some("start<1".into()),
        "substr" if f.args.len() > 2 && nth(2).is_none_or(|n| n < 0) => Some("length<0".into()),
        // PostgreSQL's negative counts drop characters from the other end.
        "left" | "right" if nth(1).is_none_or(|n| n < 0) => Some("count<0".into()),
        "lpad" | "rpad" | "repeat" if nth(1).is_none_or(|n| n < 0) => Some("count<0".into()),
        "split_part" if nth(2).is_none_or(|n| n < 1) => Some("field<1".into()),
        "date_trunc"
        | "date_part"
        | "date_bin"
        | crate::pg_extract::EXTRACT
        | crate::pg_extract::DATE_PART => Some(text(0).unwrap_or_else(|| "?".into())),
        // Regular expression dialects agree on plain patterns, not on classes and flags.
        "regexp_replace" | "regexp_like" | "regexp_match" | "regexp_count" | "regexp_instr"
            if text(1).is_none_or(|p| regex_classes(&p)) =>
        {
            Some("classes".into())
        }
        _ => None,
    };
    let classes = f
        .args
        .iter()
        .map(|a| a.get_type(schema).ok().as_ref().map_or("?", class))
        .collect::<Vec<_>>()
        .join(",");
    match shape {
        Some(s) => format!("{name}:{s}({classes})"),
        None => format!("{name}({classes})"),
    }
}

/// Whether a regular expression uses what dialects read differently: character classes
/// (`\w` is ASCII in RE2, Unicode in PostgreSQL), bracket classes, back references, word
/// boundaries.
fn regex_classes(pattern: &str) -> bool {
    pattern.contains("[[:")
        || pattern
            .split('\\')
            .skip(1)
            .any(|rest| rest.starts_with(|c: char| c.is_ascii_alphanumeric()))
}

/// The expressions of a filter or join predicate whose value only counts as true or not
/// true: the predicate and what AND/OR combine under it. Elsewhere (under NOT, in a select
/// list) a NULL differs from false.
fn truth_positions(node: &LogicalPlan) -> Vec<*const Expr> {
    fn walk(e: &Expr, out: &mut Vec<*const Expr>) {
        out.push(e as *const Expr);
        if let Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::And | Operator::Or,
            right,
        }) = e
        {
            walk(left, out);
            walk(right, out);
        }
    }
    let mut out = Vec::new();
    match node {
        LogicalPlan::Filter(f) => walk(&f.predicate, &mut out),
        LogicalPlan::Join(j) => {
            if let Some(f) = &j.filter {
                walk(f, &mut out);
            }
        }
        _ => {}
    }
    out
}

fn expression(e: &Expr, schema: &DFSchema, truth: &[*const Expr], found: &mut Constructs) {
    let type_of = |x: &Expr| x.get_type(schema).ok();
    if crate::pg_unknown_literals::reads_text_as_number(e, schema) {
        found.insert("text_literal_as_number".into());
    }
    // Where only truth counts, a NULL and false filter alike.
    let value = if truth.contains(&(e as *const Expr)) {
        ""
    } else {
        ":value"
    };
    let name: String = match e {
        Expr::ScalarFunction(f) => function(f, schema),
        Expr::AggregateFunction(AggregateFunction { func, params }) => {
            if params.distinct {
                found.insert("agg_distinct".into());
            }
            if params.filter.is_some() {
                found.insert("agg_filter".into());
            }
            if !params.order_by.is_empty() {
                found.insert("agg_order_by".into());
            }
            let arg = params.args.first().and_then(type_of);
            match arg {
                Some(t) => format!("agg:{}({})", func.name(), class(&t)),
                None => format!("agg:{}", func.name()),
            }
        }
        Expr::WindowFunction(w) => {
            let WindowFunction { fun, params } = w.as_ref();
            if params.distinct {
                found.insert("agg_distinct".into());
            }
            match params.args.first().and_then(type_of) {
                Some(t) => format!("window:{}({})", fun.name(), class(&t)),
                None => format!("window:{}", fun.name()),
            }
        }
        // A bound parameter arrives as a typed value, and a NULL is NULL in any type.
        Expr::Cast(Cast { expr, .. }) | Expr::TryCast(TryCast { expr, .. })
            if matches!(expr.as_ref(), Expr::Placeholder(_))
                || matches!(expr.as_ref(), Expr::Literal(v, _) if v.is_null()) =>
        {
            return;
        }
        Expr::Cast(Cast { expr, data_type }) | Expr::TryCast(TryCast { expr, data_type }) => {
            match type_of(expr) {
                Some(from) if &from == data_type => return,
                // One string type for another (`Utf8View` to `Utf8`): the same text.
                Some(from) if class(&from) == "text" && class(data_type) == "text" => return,
                Some(from) => format!("cast:{}>{}", class(&from), class(data_type)),
                None => format!("cast:?>{}", class(data_type)),
            }
        }
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
            let float = |x: &Expr| type_of(x).is_some_and(|t| t.is_floating());
            let comparison = crate::pg_float_keys::compares(*op);
            if comparison && (float(left) || float(right)) {
                // NaN as a literal: some engines prune files by bounds that leave NaN out.
                if is_nan(left) || is_nan(right) {
                    format!("op:{op}:float:nan")
                } else {
                    format!("op:{op}:float")
                }
            } else if comparison || matches!(op, Operator::And | Operator::Or) {
                return;
            } else {
                let classes = [type_of(left), type_of(right)]
                    .iter()
                    .map(|t| t.as_ref().map_or("?", class))
                    .collect::<Vec<_>>()
                    .join(",");
                format!("op:{op}({classes})")
            }
        }
        Expr::InList(InList { list, negated, .. }) => {
            let null = list
                .iter()
                .any(|x| matches!(x, Expr::Literal(v, _) if v.is_null()));
            let name = match (null, negated) {
                (true, true) => "not_in_list_with_null",
                (true, false) => "in_list_with_null",
                (false, true) => "not_in_list",
                (false, false) => "in_list",
            };
            format!("{name}{value}")
        }
        Expr::InSubquery(s) if s.negated => format!("not_in_subquery{value}"),
        Expr::InSubquery(_) => format!("in_subquery{value}"),
        Expr::Exists(_) => "exists".into(),
        Expr::ScalarSubquery(_) => "scalar_subquery".into(),
        Expr::SimilarTo(_) => "similar_to".into(),
        Expr::Like(Like {
            case_insensitive,
            escape_char,
            ..
        }) => match (case_insensitive, escape_char) {
            (_, Some(_)) => "like_escape".into(),
            (true, None) => "ilike".into(),
            (false, None) => "like".into(),
        },
        Expr::Between(b) if b.negated => "not_between".into(),
        Expr::Between(_) => "between".into(),
        Expr::Case(_) => "case".into(),
        Expr::Negative(_) => "negative".into(),
        Expr::Unnest(_) => "unnest".into(),
        Expr::IsTrue(_)
        | Expr::IsFalse(_)
        | Expr::IsUnknown(_)
        | Expr::IsNotTrue(_)
        | Expr::IsNotFalse(_)
        | Expr::IsNotUnknown(_) => "is_boolean".into(),
        _ => return,
    };
    found.insert(name);
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::prelude::SessionContext;

    async fn of(sql: &str) -> Constructs {
        let ctx = SessionContext::new();
        ctx.sql("CREATE TABLE t (a INT, s VARCHAR, f DOUBLE, d DECIMAL(10,2))")
            .await
            .expect("table");
        let plan = ctx.state().create_logical_plan(sql).await.expect("planned");
        constructs(&plan)
    }

    #[tokio::test]
    async fn functions_aggregates_casts_and_clauses_are_named() {
        let c = of("SELECT upper(s), sum(d), count(DISTINCT a), CAST(a AS VARCHAR), \
                    row_number() OVER (ORDER BY a) FROM t WHERE a IN (1, 2) GROUP BY upper(s), a, s")
            .await;
        for name in [
            "upper(text)",
            "agg:sum(numeric)",
            "agg:count(int)",
            "agg_distinct",
            "cast:int>text",
            "window:row_number",
            "in_list",
        ] {
            assert!(c.contains(name), "{name} in {c:?}");
        }
    }

    #[tokio::test]
    async fn shapes_engines_disagree_on_are_named_apart() {
        let c = of(
            "SELECT substr(s, 2, 3), substr(s, 0, 3), left(s, -1), f > 1.5, \
                    date_trunc('month', now()), regexp_replace(s, '\\w+', 'x') FROM t",
        )
        .await;
        for name in [
            "substr(text,int,int)",
            "substr:start<1(text,int,int)",
            "left:count<0(text,int)",
            "op:>:float",
            "date_trunc:month(text,timestamp)",
            "regexp_replace:classes(text,text,text)",
        ] {
            assert!(c.contains(name), "{name} in {c:?}");
        }
    }

    #[tokio::test]
    async fn a_quoted_literal_compared_with_a_number_is_named() {
        for sql in [
            "SELECT count(*) FROM t WHERE a BETWEEN '0' AND 4",
            "SELECT count(*) FROM t WHERE '5' < d",
            "SELECT count(*) FROM t WHERE f IN (1.5, '2')",
        ] {
            let c = of(sql).await;
            assert!(c.contains("text_literal_as_number"), "{sql}: {c:?}");
        }
        for sql in [
            "SELECT count(*) FROM t WHERE a BETWEEN 0 AND 4",
            "SELECT count(*) FROM t WHERE s = '5'",
            "SELECT count(*) FROM t WHERE CAST(a AS VARCHAR) IN ('1', '2')",
        ] {
            let c = of(sql).await;
            assert!(!c.contains("text_literal_as_number"), "{sql}: {c:?}");
        }
    }

    #[tokio::test]
    async fn an_in_list_with_null_is_told_apart_where_its_null_counts() {
        let c = of("SELECT count(*) FROM t WHERE a IN (1, NULL) OR a NOT IN (3)").await;
        assert!(
            c.contains("in_list_with_null") && c.contains("not_in_list"),
            "{c:?}"
        );
        let c = of("SELECT a IN (1, NULL) FROM t WHERE NOT (a IN (2, NULL))").await;
        assert!(c.contains("in_list_with_null:value"), "{c:?}");
        assert!(!c.contains("in_list_with_null"), "{c:?}");
    }
}
