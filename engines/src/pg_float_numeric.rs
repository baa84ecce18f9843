//! PostgreSQL's meeting of `double precision` and `numeric` on DataFusion (rewrites of analyzed
//! expressions, called by [`PgTextCasts`](crate::semantics::PgTextCasts)):
//!
//! - a comparison of a float with a numeric is a float comparison (PostgreSQL casts the numeric
//!   to `float8`; DataFusion casts the float to a decimal, which overflows for large floats);
//! - `float8::numeric(p, s)` keeps the float's 15 significant digits (`DBL_DIG`), then rounds
//!   half away from zero to `s` decimals; a value with more than `p - s` integer digits is
//!   error 22003. DataFusion scales the binary float, so `1e16::numeric(38,1)` gains a `.5`.

use std::any::Any;
use std::sync::Arc;

use arrow::array::{ArrayRef, AsArray, Decimal128Array};
use arrow::datatypes::{DataType, Float64Type};
use datafusion::common::{DFSchema, Result as DfResult};
use datafusion::logical_expr::{
    BinaryExpr, Cast, ColumnarValue, Expr, ExprSchemable, Operator, ScalarFunctionArgs, ScalarUDF,
    ScalarUDFImpl, Signature, Volatility,
};

/// The comparison `e` as PostgreSQL compares a float with a numeric, if it is one.
pub(crate) fn float_comparison(e: &Expr, schema: &DFSchema) -> Option<Expr> {
    let Expr::BinaryExpr(BinaryExpr { left, op, right }) = e else {
        return None;
    };
    // The ordering comparisons; IS [NOT] DISTINCT FROM are left as they are.
    if !crate::pg_float_keys::compares(*op)
        || matches!(op, Operator::IsDistinctFrom | Operator::IsNotDistinctFrom)
    {
        return None;
    }
    // The float under the decimal cast type coercion made (rewritten already, bottom-up, by
    // `float_to_numeric`).
    let float_under = |x: &Expr| match x {
        Expr::Cast(Cast { expr, data_type })
            if matches!(
                data_type,
                DataType::Decimal128(..) | DataType::Decimal256(..)
            ) && matches!(expr.get_type(schema), Ok(DataType::Float64)) =>
        {
            Some(expr.as_ref().clone())
        }
        Expr::ScalarFunction(f) if f.name() == NAME => f.args.first().cloned(),
        _ => None,
    };
    let as_float = |x: &Expr| Expr::Cast(Cast::new(Box::new(x.clone()), DataType::Float64));
    let (l, r) = match (float_under(left), float_under(right)) {
        (Some(f), None) => (f, as_float(right)),
        (None, Some(f)) => (as_float(left), f),
        _ => return None,
    };
    Some(Expr::BinaryExpr(BinaryExpr::new(
        Box::new(l),
        *op,
        Box::new(r),
    )))
}

/// `float8::numeric(p, s)` as PostgreSQL casts, if `e` is that cast.
pub(crate) fn float_to_numeric(e: &Expr, schema: &DFSchema) -> Option<Expr> {
    let Expr::Cast(Cast { expr, data_type }) = e else {
        return None;
    };
    let DataType::Decimal128(precision, scale) = data_type else {
        return None;
    };
    if *scale < 0 || !matches!(expr.get_type(schema), Ok(DataType::Float64)) {
        return None;
    }
    let udf = ScalarUDF::from(FloatNumeric {
        signature: Signature::exact(vec![DataType::Float64], Volatility::Immutable),
        precision: *precision,
        scale: *scale as u32,
    });
    Some(udf.call(vec![expr.as_ref().clone()]))
}

/// `v` as PostgreSQL's numeric of a float8 rounded to `scale` decimals: the unscaled value.
/// `None` when it has more than `precision - scale` integer digits (or is not finite).
pub(crate) fn numeric_of(v: f64, precision: u8, scale: u32) -> Option<i128> {
    if !v.is_finite() {
        return None;
    }
    // 15 significant digits, as PostgreSQL's float8_numeric prints them first.
    let printed = format!("{v:.14e}");
    let (mantissa, exponent) = printed.split_once('e')?;
    let exponent: i32 = exponent.parse().ok()?;
    let negative = mantissa.starts_with('-');
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let digits: i128 = digits.parse().ok()?;
    // value = digits × 10^(exponent - 14); wanted: round(value × 10^scale).
    let shift = exponent - 14 + scale as i32;
    let magnitude = if shift >= 0 {
        digits.checked_mul(10i128.checked_pow(shift as u32)?)?
    } else if shift < -38 {
        0
    } else {
        let unit = 10i128.pow((-shift) as u32);
        let (q, r) = (digits / unit, digits % unit);
        if r * 2 >= unit { q + 1 } else { q }
    };
    let limit = 10i128.checked_pow(u32::from(precision))?;
    if magnitude >= limit {
        return None;
    }
    Some(if negative { -magnitude } else { magnitude })
}

/// The function `float_to_numeric` calls.
pub const NAME: &str = "lakegate_float_numeric";

#[derive(Debug, PartialEq, Eq, Hash)]
struct FloatNumeric {
    signature: Signature,
    precision: u8,
    scale: u32,
}

impl ScalarUDFImpl for FloatNumeric {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn name(&self) -> &str {
        NAME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Decimal128(self.precision, self.scale as i8))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let (array, scalar) = crate::semantics::argument_array(&args, 0)?;
        let floats = array.as_primitive::<Float64Type>();
        let mut out = Vec::with_capacity(floats.len());
        for v in floats.iter() {
            out.push(match v {
                None => None,
                Some(v) => match numeric_of(v, self.precision, self.scale) {
                    Some(n) => Some(n),
                    None => {
                        return Err(crate::Error::Value {
                            kind: crate::ErrorKind::NumericOutOfRange,
                            message: "numeric field overflow".into(),
                        }
                        .into_datafusion());
                    }
                },
            });
        }
        let decimals = Decimal128Array::from(out)
            .with_precision_and_scale(self.precision, self.scale as i8)?;
        let out: ArrayRef = Arc::new(decimals);
        crate::semantics::columnar(out, scalar)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_float_becomes_its_fifteen_digits_then_the_scale() {
        assert_eq!(numeric_of(1e16, 38, 1), Some(100_000_000_000_000_000));
        assert_eq!(numeric_of(0.1, 12, 3), Some(100));
        assert_eq!(numeric_of(-1.45, 12, 1), Some(-15), "half away from zero");
        assert_eq!(numeric_of(123_456.75, 12, 1), Some(1_234_568));
        assert_eq!(numeric_of(1e16, 12, 3), None, "overflow is 22003");
        assert_eq!(numeric_of(f64::NAN, 12, 3), None);
    }
}
