//! PostgreSQL's window functions where DataFusion's differ.
//!
//! - `ntile(n)`: PostgreSQL fills the first `rows % n` buckets with one row more than the rest
//!   (10 rows in 4 buckets are 3, 3, 2, 2); DataFusion's `i * n / rows` spreads the larger
//!   buckets (3, 2, 3, 2). PostgreSQL's result is an `integer`, NULL for a NULL bucket count,
//!   and a count below one is error 22014.

use std::any::Any;
use std::sync::Arc;

use arrow::array::{ArrayRef, Int32Array};
use arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::{Result as DfResult, ScalarValue};
use datafusion::logical_expr::function::{PartitionEvaluatorArgs, WindowUDFFieldArgs};
use datafusion::logical_expr::{
    PartitionEvaluator, Signature, Volatility, WindowUDF, WindowUDFImpl,
};
use datafusion::physical_expr::expressions::Literal;

/// PostgreSQL's `ntile`, registered under DataFusion's name.
pub fn ntile() -> WindowUDF {
    WindowUDF::from(Ntile::default())
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct Ntile {
    signature: Signature,
}

impl Default for Ntile {
    fn default() -> Self {
        Self {
            signature: Signature::uniform(
                1,
                vec![
                    DataType::Int64,
                    DataType::Int32,
                    DataType::Int16,
                    DataType::Int8,
                ],
                Volatility::Immutable,
            ),
        }
    }
}

/// The error PostgreSQL raises for a bucket count below one (`22014`, as the engines'
/// messages are classified by their text).
fn invalid_buckets() -> datafusion::error::DataFusionError {
    crate::Error::Value {
        kind: crate::ErrorKind::DataException,
        message: "argument of ntile must be greater than zero".into(),
    }
    .into_datafusion()
}

impl WindowUDFImpl for Ntile {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn name(&self) -> &str {
        "ntile"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn partition_evaluator(
        &self,
        args: PartitionEvaluatorArgs,
    ) -> DfResult<Box<dyn PartitionEvaluator>> {
        let literal = args
            .input_exprs()
            .first()
            .and_then(|e| e.as_any().downcast_ref::<Literal>())
            .map(|l| l.value().clone());
        let buckets = match literal {
            None => {
                return Err(datafusion::error::DataFusionError::NotImplemented(
                    "ntile with a bucket count that is not a constant".into(),
                ));
            }
            Some(v) if v.is_null() => None,
            Some(v) => {
                let n = match v.cast_to(&DataType::Int64)? {
                    ScalarValue::Int64(Some(n)) => n,
                    _ => return Err(invalid_buckets()),
                };
                if n < 1 {
                    return Err(invalid_buckets());
                }
                Some(n as u64)
            }
        };
        Ok(Box::new(NtileEvaluator { buckets }))
    }

    fn field(&self, args: WindowUDFFieldArgs) -> DfResult<FieldRef> {
        Ok(Arc::new(Field::new(args.name(), DataType::Int32, true)))
    }
}

#[derive(Debug)]
struct NtileEvaluator {
    /// `None`: a NULL bucket count (every row's bucket is NULL).
    buckets: Option<u64>,
}

/// The bucket (from 1) of each of `rows` rows split into `buckets`, as PostgreSQL splits them.
fn buckets_of(rows: u64, buckets: u64) -> impl Iterator<Item = u64> {
    let per = rows / buckets;
    let larger = if per == 0 { 0 } else { rows % buckets };
    // The first `larger` buckets hold `per + 1` rows; with fewer rows than buckets each row
    // is its own bucket.
    (0..rows).map(move |i| {
        if per == 0 {
            i + 1
        } else if i < larger * (per + 1) {
            i / (per + 1) + 1
        } else {
            (i - larger * (per + 1)) / per + larger + 1
        }
    })
}

impl PartitionEvaluator for NtileEvaluator {
    fn evaluate_all(&mut self, _values: &[ArrayRef], num_rows: usize) -> DfResult<ArrayRef> {
        let Some(buckets) = self.buckets else {
            return Ok(Arc::new(Int32Array::new_null(num_rows)));
        };
        let values: Int32Array = buckets_of(num_rows as u64, buckets)
            .map(|b| Some(i32::try_from(b).unwrap_or(i32::MAX)))
            .collect();
        Ok(Arc::new(values))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(rows: u64, n: u64) -> Vec<u64> {
        buckets_of(rows, n).collect()
    }

    #[test]
    fn larger_buckets_come_first_as_in_postgresql() {
        assert_eq!(split(10, 4), vec![1, 1, 1, 2, 2, 2, 3, 3, 4, 4]);
        assert_eq!(split(7, 3), vec![1, 1, 1, 2, 2, 3, 3]);
        assert_eq!(split(8, 4), vec![1, 1, 2, 2, 3, 3, 4, 4]);
    }

    #[test]
    fn fewer_rows_than_buckets_gives_each_row_its_own() {
        assert_eq!(split(3, 5), vec![1, 2, 3]);
        assert_eq!(split(0, 5), Vec::<u64>::new());
        assert_eq!(split(5, 1), vec![1; 5]);
    }
}
