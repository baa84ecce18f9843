//! What no engine answers as PostgreSQL does yet, refused when the statement is planned
//! (0A000, with what to write instead) rather than answered differently:
//!
//! - `sqrt`, `exp`, `ln`, `log`, `log10`, `power` and two-argument `trunc` of a `numeric`:
//!   PostgreSQL computes them in `numeric`, to a scale of its own; the engines compute in
//!   floating point (another type, other digits).
//! - A set-returning function in a select list over a table (`SELECT id, generate_series(1,
//!   2) FROM t`): PostgreSQL returns a row per value, DataFusion an array.

use arrow::datatypes::DataType;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::{Expr, ExprSchemable, LogicalPlan};

use crate::error::{Error, Result};

/// Refuses `plan` (as planned, before analysis) if it relies on what the module docs list.
///
/// # Errors
/// [`Error::Unsupported`] naming the construct and the way around it.
pub fn check(plan: &LogicalPlan) -> Result<()> {
    let mut refused: Option<String> = None;
    let _ = plan.apply_with_subqueries(|node| {
        let schema = crate::semantics::input_schema(node);
        let projection = matches!(node, LogicalPlan::Projection(_));
        let _ = node.apply_expressions(|expr| {
            use datafusion::common::tree_node::TreeNode;
            expr.apply(|e| {
                if let Expr::ScalarFunction(ScalarFunction { func, args }) = e {
                    let name = func.name();
                    let numeric = args.iter().any(|a| {
                        matches!(
                            a.get_type(&schema),
                            Ok(DataType::Decimal128(..) | DataType::Decimal256(..))
                        )
                    });
                    let in_numeric = matches!(
                        name,
                        "sqrt" | "exp" | "ln" | "log" | "log10" | "power" | "pow"
                    ) || (name == "trunc" && args.len() == 2);
                    if in_numeric && numeric {
                        refused = Some(format!(
                            "{name} of a numeric (PostgreSQL computes it in numeric; cast the \
                             argument to double precision to compute it in floating point)"
                        ));
                        return Ok(TreeNodeRecursion::Stop);
                    }
                    if projection && matches!(name, "generate_series" | "range") {
                        refused = Some(format!(
                            "{name} in a select list over a table (call it in FROM: CROSS JOIN \
                             {name}(...) AS g)"
                        ));
                        return Ok(TreeNodeRecursion::Stop);
                    }
                }
                Ok(TreeNodeRecursion::Continue)
            })
        });
        Ok(if refused.is_some() {
            TreeNodeRecursion::Stop
        } else {
            TreeNodeRecursion::Continue
        })
    });
    match refused {
        Some(what) => Err(Error::Unsupported { what }),
        None => Ok(()),
    }
}
