//! Makes another engine's answer look exactly like the planner's: same column names, same Arrow
//! types, by position. DataFusion describes every statement (the schema clients are promised),
//! so an answer is the same whichever engine computed it: DuckDB's `HUGEINT` sums, Spark's
//! `double` divisions, Trino's `decimal(38, s)` averages are cast to the promised types.

use arrow::array::ArrayRef;
use arrow::compute::{CastOptions, cast_with_options};
use arrow::datatypes::SchemaRef;
use arrow::record_batch::{RecordBatch, RecordBatchOptions};

use crate::error::{Error, Result};

/// Casts `batch`'s columns, by position, to `schema` (names and nullability included: a null
/// where the planner proved none is an error, not a silent change of schema).
///
/// # Errors
/// A different column count, or a value that does not fit the promised type.
pub fn conform_batch(batch: &RecordBatch, schema: &SchemaRef) -> Result<RecordBatch> {
    if batch.num_columns() != schema.fields().len() {
        return Err(Error::Internal(format!(
            "engine returned {} columns, the plan promised {}",
            batch.num_columns(),
            schema.fields().len()
        )));
    }
    let options = CastOptions {
        safe: false,
        ..Default::default()
    };
    let columns = batch
        .columns()
        .iter()
        .zip(schema.fields())
        .map(|(column, field)| {
            if column.data_type() == field.data_type() {
                Ok(column.clone())
            } else {
                cast_with_options(column, field.data_type(), &options).map_err(|e| {
                    Error::Internal(format!(
                        "column {:?}: cannot convert {} to {}: {e}",
                        field.name(),
                        column.data_type(),
                        field.data_type()
                    ))
                })
            }
        })
        .collect::<Result<Vec<ArrayRef>>>()?;
    let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
    RecordBatch::try_new_with_options(schema.clone(), columns, &options)
        .map_err(|e| Error::Internal(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Decimal128Array, Float64Array, Int64Array};
    use arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;

    #[test]
    fn casts_by_position_and_renames() {
        let engine = RecordBatch::try_new(
            Arc::new(Schema::new(vec![
                Field::new("sum_x", DataType::Decimal128(38, 0), true),
                Field::new("_c1", DataType::Float64, true),
            ])),
            vec![
                Arc::new(
                    Decimal128Array::from(vec![Some(42)])
                        .with_precision_and_scale(38, 0)
                        .expect("valid"),
                ),
                Arc::new(Float64Array::from(vec![Some(3.0)])),
            ],
        )
        .expect("batch");
        let promised = Arc::new(Schema::new(vec![
            Field::new("sum", DataType::Int64, true),
            Field::new("ratio", DataType::Float64, true),
        ]));
        let out = conform_batch(&engine, &promised).expect("conforms");
        assert_eq!(out.schema().field(0).name(), "sum");
        let sums = out
            .column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .expect("int64");
        assert_eq!(sums.value(0), 42);
    }

    #[test]
    fn refuses_a_different_shape() {
        let engine = RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new("a", DataType::Int64, true)])),
            vec![Arc::new(Int64Array::from(vec![1]))],
        )
        .expect("batch");
        let promised = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int64, true),
            Field::new("b", DataType::Int64, true),
        ]));
        assert!(conform_batch(&engine, &promised).is_err());
    }
}
