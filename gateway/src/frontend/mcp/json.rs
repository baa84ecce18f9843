//! Query answers as compact JSON for a model: the columns once (name and PostgreSQL-style type),
//! then each row as an array. Integers, floats and booleans are JSON values; everything else is
//! the text PostgreSQL would print (decimals exactly, timestamps in ISO form), so no value is
//! rounded on its way to the model. Rows stop at a row cap or a byte cap, and the answer says so.

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::{DataType, Field, Int8Type, Int16Type, Int32Type, Int64Type};
use arrow::datatypes::{UInt8Type, UInt16Type, UInt32Type, UInt64Type};
use arrow::util::display::{ArrayFormatter, FormatOptions};
use serde_json::{Value, json};

/// Rows gathered for a model, capped.
pub struct Rows {
    columns: Vec<Value>,
    rows: Vec<Value>,
    bytes: u64,
    max_rows: u64,
    max_bytes: u64,
    /// More rows (or bytes) were there than the caps let through.
    pub truncated: bool,
}

/// A column's type as a model reads it: PostgreSQL's names where they exist.
pub fn type_name(field: &Field) -> String {
    if field
        .metadata()
        .contains_key(crate::service::numeric::PG_NUMERIC)
    {
        return "numeric".into();
    }
    match field.data_type() {
        DataType::Boolean => "boolean".into(),
        DataType::Int8 | DataType::Int16 | DataType::UInt8 => "smallint".into(),
        DataType::Int32 | DataType::UInt16 => "integer".into(),
        DataType::Int64 | DataType::UInt32 | DataType::UInt64 => "bigint".into(),
        DataType::Float16 | DataType::Float32 => "real".into(),
        DataType::Float64 => "double precision".into(),
        DataType::Decimal128(p, s) | DataType::Decimal256(p, s) => format!("numeric({p},{s})"),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => "text".into(),
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => "bytea".into(),
        DataType::Date32 | DataType::Date64 => "date".into(),
        DataType::Time32(_) | DataType::Time64(_) => "time".into(),
        DataType::Timestamp(_, Some(_)) => "timestamp with time zone".into(),
        DataType::Timestamp(_, None) => "timestamp".into(),
        DataType::Interval(_) | DataType::Duration(_) => "interval".into(),
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
            format!("{}[]", type_name(f))
        }
        DataType::Struct(_) | DataType::Map(_, _) => "json".into(),
        other => other.to_string().to_lowercase(),
    }
}

impl Rows {
    /// Empty rows of `schema`'s columns, capped at `max_rows` rows and `max_bytes` of JSON
    /// values (0: no cap).
    pub fn new(schema: &arrow::datatypes::Schema, max_rows: u64, max_bytes: u64) -> Self {
        Self {
            columns: schema
                .fields()
                .iter()
                .map(|f| json!({"name": f.name(), "type": type_name(f)}))
                .collect(),
            rows: Vec::new(),
            bytes: 0,
            max_rows,
            max_bytes,
            truncated: false,
        }
    }

    /// Adds `batch`'s rows up to the caps; `false` once a cap is reached (stop reading).
    ///
    /// # Errors
    /// A value arrow cannot format.
    pub fn push(&mut self, batch: &RecordBatch) -> Result<bool, arrow::error::ArrowError> {
        let options = FormatOptions::default().with_null("");
        let formatters: Vec<ArrayFormatter<'_>> = batch
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &options))
            .collect::<Result<_, _>>()?;
        for row in 0..batch.num_rows() {
            if self.max_rows > 0 && self.rows.len() as u64 >= self.max_rows {
                self.truncated = true;
                return Ok(false);
            }
            let values: Vec<Value> = batch
                .columns()
                .iter()
                .zip(&formatters)
                .map(|(column, formatter)| value(column.as_ref(), formatter, row))
                .collect();
            let value = Value::Array(values);
            let size = value.to_string().len() as u64;
            if self.max_bytes > 0 && self.bytes + size > self.max_bytes {
                self.truncated = true;
                return Ok(false);
            }
            self.bytes += size;
            self.rows.push(value);
        }
        Ok(true)
    }

    /// Rows kept.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// No rows kept.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// `{"columns": [...], "rows": [[...], ...]}`.
    pub fn into_json(self) -> (Value, Value) {
        (Value::Array(self.columns), Value::Array(self.rows))
    }
}

/// One value: a JSON number or boolean when exact, else PostgreSQL-style text; SQL NULL is null.
fn value(column: &dyn Array, formatter: &ArrayFormatter<'_>, row: usize) -> Value {
    if column.is_null(row) {
        return Value::Null;
    }
    macro_rules! int {
        ($t:ty) => {
            json!(column.as_primitive::<$t>().value(row))
        };
    }
    match column.data_type() {
        DataType::Boolean => json!(column.as_boolean().value(row)),
        DataType::Int8 => int!(Int8Type),
        DataType::Int16 => int!(Int16Type),
        DataType::Int32 => int!(Int32Type),
        DataType::Int64 => int!(Int64Type),
        DataType::UInt8 => int!(UInt8Type),
        DataType::UInt16 => int!(UInt16Type),
        DataType::UInt32 => int!(UInt32Type),
        DataType::UInt64 => int!(UInt64Type),
        DataType::Float32 | DataType::Float64 => {
            let v = match column.data_type() {
                DataType::Float32 => f64::from(
                    column
                        .as_primitive::<arrow::datatypes::Float32Type>()
                        .value(row),
                ),
                _ => column
                    .as_primitive::<arrow::datatypes::Float64Type>()
                    .value(row),
            };
            // NaN and infinities are not JSON numbers: PostgreSQL's spelling as text.
            serde_json::Number::from_f64(v)
                .map_or_else(|| Value::String(float_text(v)), Value::Number)
        }
        _ => Value::String(formatter.value(row).to_string()),
    }
}

/// PostgreSQL's text for a float that JSON cannot carry.
fn float_text(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v > 0.0 {
        "Infinity".into()
    } else {
        "-Infinity".into()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Decimal128Array, Float64Array, Int64Array, StringArray};
    use arrow::datatypes::Schema;

    use super::*;

    fn batch() -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("price", DataType::Decimal128(10, 2), true),
            Field::new("ratio", DataType::Float64, true),
            Field::new("name", DataType::Utf8, true),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(vec![Some(1), Some(2), None])),
                Arc::new(
                    Decimal128Array::from(vec![Some(1230), None, Some(5)])
                        .with_precision_and_scale(10, 2)
                        .expect("decimal"),
                ),
                Arc::new(Float64Array::from(vec![0.5, f64::NAN, 1.0])),
                Arc::new(StringArray::from(vec![Some("a"), Some("b"), None])),
            ],
        )
        .expect("batch")
    }

    #[test]
    fn values_are_exact_and_nulls_are_null() {
        let b = batch();
        let mut rows = Rows::new(&b.schema(), 0, 0);
        assert!(rows.push(&b).expect("push"));
        let (columns, rows) = rows.into_json();
        assert_eq!(
            columns[1],
            json!({"name": "price", "type": "numeric(10,2)"})
        );
        assert_eq!(rows[0], json!([1, "12.30", 0.5, "a"]));
        assert_eq!(rows[1], json!([2, null, "NaN", "b"]));
        assert_eq!(rows[2], json!([null, "0.05", 1.0, null]));
    }

    #[test]
    fn caps_cut_rows_and_say_so() {
        let b = batch();
        let mut by_rows = Rows::new(&b.schema(), 2, 0);
        assert!(!by_rows.push(&b).expect("push"), "stop reading");
        assert!(by_rows.truncated);
        assert_eq!(by_rows.len(), 2);
        let mut by_bytes = Rows::new(&b.schema(), 0, 20);
        by_bytes.push(&b).expect("push");
        assert!(by_bytes.truncated);
        assert_eq!(by_bytes.len(), 1, "[1,\"12.30\",0.5,\"a\"] is 19 bytes");
        let mut exact = Rows::new(&b.schema(), 3, 0);
        assert!(exact.push(&b).expect("push"));
        assert!(!exact.truncated, "exactly the cap is not a cut");
    }
}
