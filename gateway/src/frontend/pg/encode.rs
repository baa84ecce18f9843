//! Arrow → Postgres wire: result descriptions and data rows (text or binary per column), via
//! `arrow-pg`, batch by batch so results stream.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{ArrayRef, FixedSizeBinaryArray, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::error::ArrowError;
use arrow_pg::datatypes::{arrow_schema_to_pg_fields, encode_recordbatch};
use datafusion::error::DataFusionError;
use datafusion::execution::SendableRecordBatchStream;
use futures::{StreamExt, stream};
use lakegate_engines::pg_text;
use pgwire::api::portal::Format;
use pgwire::api::results::{FieldFormat, FieldInfo, QueryResponse};
use pgwire::error::PgWireResult;
use pgwire::types::format::FormatOptions;

use super::encoded::{Memo, Rows};
use super::handler::to_pg_error;
use crate::error::Error;
use crate::service::encodings::Encodings;
use crate::service::{numeric, origins};
use crate::session::Session;

/// Text formatting options (DateStyle, TimeZone, extra_float_digits, ...) from the session.
/// Made once per version of the session's settings.
pub(crate) fn format_options(session: &Session) -> Arc<FormatOptions> {
    session.formatting(|settings| {
        let values: HashMap<String, String> = settings
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let mut options = FormatOptions::from_client_metadata(&values);
        options.time_zone = session.time_zone();
        options
    })
}

/// The text-format columns whose values PostgreSQL prints otherwise than arrow-pg would
/// (timestamps, dates, times, intervals, floats), printed by [`lakegate_engines::pg_text`];
/// their RowDescription types stay what they are.
///
/// `last` is the schema the previous batch of the stream was given: taken again when its types
/// are this batch's.
fn pg_text_columns(
    batch: RecordBatch,
    fields: &[FieldInfo],
    time_zone: &str,
    last: &mut Option<SchemaRef>,
) -> Result<RecordBatch, ArrowError> {
    let text = |i: usize, t: &DataType| {
        fields
            .get(i)
            .is_some_and(|f| f.format() == FieldFormat::Text)
            && pg_text::formats(t)
            && *t != DataType::Boolean
    };
    let binary_numeric = |i: usize, f: &Field| {
        numeric::is_pg_numeric(f)
            && fields
                .get(i)
                .is_some_and(|f| f.format() != FieldFormat::Text)
    };
    if !batch
        .schema()
        .fields()
        .iter()
        .enumerate()
        .any(|(i, f)| text(i, f.data_type()) || binary_numeric(i, f))
    {
        return Ok(batch);
    }
    let schema = batch.schema();
    let mut columns = Vec::with_capacity(batch.num_columns());
    for (i, (column, field)) in batch.columns().iter().zip(schema.fields()).enumerate() {
        if binary_numeric(i, field) {
            columns.push(numeric_text_as_decimal(column.as_ref())?);
            continue;
        }
        columns.push(
            text(i, column.data_type())
                .then(|| pg_text::to_text(column.as_ref(), time_zone, pg_text::Booleans::Wire))
                .flatten()
                .unwrap_or_else(|| column.clone()),
        );
    }
    let same = |s: &Schema| {
        s.fields().len() == columns.len()
            && s.fields()
                .iter()
                .zip(&columns)
                .all(|(f, c)| f.data_type() == c.data_type())
    };
    let out = match last.as_ref().filter(|s| same(s)) {
        Some(s) => s.clone(),
        None => {
            // Only the rows are encoded from here (by the FieldInfos): a printed column's
            // field needs no metadata.
            let out_fields: Vec<arrow::datatypes::FieldRef> = schema
                .fields()
                .iter()
                .zip(&columns)
                .map(|(f, c)| {
                    if f.data_type() == c.data_type() {
                        f.clone()
                    } else {
                        Arc::new(Field::new(f.name(), c.data_type().clone(), f.is_nullable()))
                    }
                })
                .collect();
            let out = Arc::new(Schema::new(out_fields));
            *last = Some(out.clone());
            out
        }
    };
    RecordBatch::try_new(out, columns)
}

/// PostgreSQL numeric text as a decimal column for the binary format: the largest scale of
/// the batch's values (a value keeps its digits; the binary numeric's display scale is the
/// column's).
fn numeric_text_as_decimal(column: &dyn arrow::array::Array) -> Result<ArrayRef, ArrowError> {
    use arrow::array::{AsArray, Decimal128Array};
    let text = column.as_string::<i32>();
    let scale = text
        .iter()
        .flatten()
        .map(|v| v.split_once('.').map_or(0, |(_, f)| f.len()))
        .max()
        .unwrap_or(0);
    if scale > 38 {
        return Err(ArrowError::CastError(format!(
            "a numeric with {scale} decimals does not fit the binary format here: ask for text"
        )));
    }
    let values = text
        .iter()
        .map(|v| {
            v.map(|v| {
                let (int, frac) = v.split_once('.').unwrap_or((v, ""));
                format!("{int}{frac}{}", "0".repeat(scale - frac.len()))
                    .parse::<i128>()
                    .map_err(|e| ArrowError::CastError(format!("numeric {v}: {e}")))
            })
            .transpose()
        })
        .collect::<Result<Vec<Option<i128>>, ArrowError>>()?;
    Ok(Arc::new(
        Decimal128Array::from(values).with_precision_and_scale(38, scale as i8)?,
    ))
}

/// Arrow types PostgreSQL has no (or another) type for, mapped to what PostgreSQL would send:
/// Iceberg `uuid` (fixed 16 bytes) becomes its canonical text form, other fixed-size binaries
/// `bytea`; UInt64 (`rank()`, `row_number()` in DataFusion; bigint in PostgreSQL, numeric in
/// arrow-pg's mapping) becomes bigint (a value beyond bigint is an error, not a wrap).
fn wire_type(data_type: &DataType) -> Option<DataType> {
    match data_type {
        DataType::FixedSizeBinary(16) => Some(DataType::Utf8),
        DataType::FixedSizeBinary(_) => Some(DataType::Binary),
        DataType::UInt64 => Some(DataType::Int64),
        _ => None,
    }
}

/// The schema as sent on the wire (`None`: unchanged).
fn wire_schema(schema: &Schema) -> Option<SchemaRef> {
    if !schema
        .fields()
        .iter()
        .any(|f| wire_type(f.data_type()).is_some())
    {
        return None;
    }
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| match wire_type(f.data_type()) {
            Some(t) => f.as_ref().clone().with_data_type(t),
            None => f.as_ref().clone(),
        })
        .collect();
    Some(Arc::new(Schema::new_with_metadata(
        fields,
        schema.metadata().clone(),
    )))
}

/// Converts the columns [`wire_type`] maps.
fn to_wire(batch: RecordBatch, schema: &SchemaRef) -> Result<RecordBatch, ArrowError> {
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(batch.num_columns());
    for column in batch.columns() {
        columns.push(match column.data_type() {
            DataType::FixedSizeBinary(16) => {
                let bytes = column
                    .as_any()
                    .downcast_ref::<FixedSizeBinaryArray>()
                    .ok_or_else(|| ArrowError::CastError("uuid column".into()))?;
                let text: StringArray = bytes
                    .iter()
                    .map(|v| {
                        v.and_then(|b| uuid::Uuid::from_slice(b).ok())
                            .map(|u| u.hyphenated().to_string())
                    })
                    .collect();
                Arc::new(text)
            }
            other => match wire_type(other) {
                Some(t) => arrow::compute::cast_with_options(
                    column,
                    &t,
                    &arrow::compute::CastOptions {
                        safe: false,
                        ..Default::default()
                    },
                )?,
                None => column.clone(),
            },
        });
    }
    RecordBatch::try_new(schema.clone(), columns)
}

/// Column descriptions for a result schema.
pub(crate) fn fields(
    schema: &Schema,
    format: &Format,
    options: Arc<FormatOptions>,
) -> PgWireResult<Vec<FieldInfo>> {
    let wire = wire_schema(schema);
    let schema = wire.as_deref().unwrap_or(schema);
    // A bare NULL column has no type; PostgreSQL calls it text, and drivers (asyncpg) refuse
    // the `unknown` type in results.
    let fields = arrow_schema_to_pg_fields(schema, format, Some(options.clone()))?;
    Ok(fields
        .into_iter()
        .zip(schema.fields())
        .map(|(f, arrow_field)| {
            if numeric::is_pg_numeric(arrow_field) {
                // PostgreSQL numeric text (a division's value-dependent scale).
                FieldInfo::new(
                    f.name().to_string(),
                    None,
                    None,
                    pgwire::api::Type::NUMERIC,
                    f.format(),
                )
                .with_format_options(options.clone())
            } else if *f.datatype() == pgwire::api::Type::UNKNOWN {
                FieldInfo::new(
                    f.name().to_string(),
                    None,
                    None,
                    pgwire::api::Type::TEXT,
                    f.format(),
                )
                .with_format_options(options.clone())
            } else if let Some((oid, attnum, typmod)) = origins::attribute(arrow_field) {
                // A table's column: where PostgreSQL says it comes from, and its typmod.
                FieldInfo::new(
                    f.name().to_string(),
                    i32::try_from(oid).ok(),
                    Some(attnum),
                    f.datatype().clone(),
                    f.format(),
                )
                .with_format_options(options.clone())
                .with_type_modifier(typmod)
            } else {
                f
            }
        })
        .collect())
}

/// The column descriptions a connection's last result was sent with: the next result with
/// the same schema, formats and session formatting (a statement executed again: every cached
/// answer) takes them as they are.
#[derive(Debug, Default)]
pub(crate) struct LastFields(std::sync::Mutex<Option<Described>>);

#[derive(Debug)]
struct Described {
    schema: SchemaRef,
    format: Format,
    options: Arc<FormatOptions>,
    fields: Arc<Vec<FieldInfo>>,
}

impl LastFields {
    /// [`fields`] of `schema`, from the last result's when they are the same.
    fn fields(
        &self,
        schema: &SchemaRef,
        format: &Format,
        options: Arc<FormatOptions>,
    ) -> PgWireResult<Arc<Vec<FieldInfo>>> {
        let mut last = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(d) = last.as_ref()
            && Arc::ptr_eq(&d.options, &options)
            && same_format(&d.format, format)
            && (Arc::ptr_eq(&d.schema, schema) || d.schema == *schema)
        {
            return Ok(d.fields.clone());
        }
        let made = Arc::new(fields(schema, format, options.clone())?);
        *last = Some(Described {
            schema: schema.clone(),
            format: format.clone(),
            options,
            fields: made.clone(),
        });
        Ok(made)
    }
}

/// The column descriptions a connection last answered a portal's Describe with: a repeated
/// Parse of a kept plan describes the very same schema.
#[derive(Debug, Default)]
pub(crate) struct DescribedFields(LastFields);

impl DescribedFields {
    /// [`fields`] of a described statement's `schema` in `format` (a description's fields
    /// carry no session formatting: only names, types and formats are sent).
    pub(crate) fn fields(
        &self,
        schema: &SchemaRef,
        format: &Format,
    ) -> PgWireResult<Arc<Vec<FieldInfo>>> {
        self.0.fields(schema, format, described_options())
    }
}

/// The formatting a statement's description is made with.
pub(crate) fn described_options() -> Arc<FormatOptions> {
    static OPTIONS: std::sync::LazyLock<Arc<FormatOptions>> =
        std::sync::LazyLock::new(|| Arc::new(FormatOptions::default()));
    OPTIONS.clone()
}

fn same_format(a: &Format, b: &Format) -> bool {
    match (a, b) {
        (Format::UnifiedText, Format::UnifiedText)
        | (Format::UnifiedBinary, Format::UnifiedBinary) => true,
        (Format::Individual(a), Format::Individual(b)) => a == b,
        _ => false,
    }
}

/// A streaming query response: each Arrow batch becomes data rows as it arrives (the service
/// already ends the stream with 57014 on a cancel or `statement_timeout`). A cached result's
/// rows (`encodings`) are sent as a response encoded them before, when it encoded them the
/// same way ([`super::encoded`]).
pub(crate) fn query_response(
    stream: SendableRecordBatchStream,
    tag: &str,
    format: &Format,
    options: Arc<FormatOptions>,
    last: &LastFields,
    encodings: Option<Arc<Encodings>>,
) -> PgWireResult<QueryResponse> {
    let schema = stream.schema();
    let fields = last.fields(&schema, format, options.clone())?;
    let memo = Memo::of(encodings, &schema, &fields, &options);
    let wire = wire_schema(&schema);
    let row_fields = fields.clone();
    let time_zone = options.time_zone.clone();
    let mut last = None;
    let encode = move |batch: datafusion::error::Result<RecordBatch>| -> Rows {
        let batch = match (&wire, batch) {
            (Some(schema), Ok(b)) => to_wire(b, schema).map_err(DataFusionError::from),
            (_, other) => other,
        }
        .and_then(|b| {
            pg_text_columns(b, &row_fields, &time_zone, &mut last).map_err(DataFusionError::from)
        });
        match batch {
            Ok(batch) => encode_recordbatch(row_fields.clone(), batch),
            Err(e) => Box::new(std::iter::once(Err(to_pg_error(&Error::Engine(e.into()))))),
        }
    };
    let rows = stream::unfold(
        (stream, encode, memo),
        |(mut stream, mut encode, mut memo)| async move {
            match stream.next().await {
                Some(batch) => {
                    let rows = memo.rows(batch, &mut encode);
                    Some((stream::iter(rows), (stream, encode, memo)))
                }
                None => {
                    memo.finish();
                    None
                }
            }
        },
    )
    .flatten();
    let mut response = QueryResponse::new(fields, rows);
    response.set_command_tag(tag);
    Ok(response)
}

#[cfg(test)]
mod tests {
    use arrow::array::{Int64Array, TimestampMicrosecondArray};
    use arrow::datatypes::TimeUnit;

    use super::*;

    fn orders() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("order_id", DataType::Int64, false),
            Field::new(
                "event_ts",
                DataType::Timestamp(TimeUnit::Microsecond, None),
                true,
            ),
        ]))
    }

    fn batch(schema: &SchemaRef, id: i64) -> RecordBatch {
        RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from(vec![id])),
                // 2024-01-02 03:04:05.5
                Arc::new(TimestampMicrosecondArray::from(vec![Some(
                    1_704_164_645_500_000,
                )])),
            ],
        )
        .expect("batch")
    }

    #[test]
    fn printed_columns_keep_their_names_and_later_batches_take_the_first_schema() {
        let schema = orders();
        let options = Arc::new(FormatOptions::default());
        let fields = fields(&schema, &Format::UnifiedText, options).expect("fields");
        let mut last = None;
        let first = pg_text_columns(batch(&schema, 1), &fields, "UTC", &mut last).expect("printed");
        let second =
            pg_text_columns(batch(&schema, 2), &fields, "UTC", &mut last).expect("printed");
        assert_eq!(first.schema().field(0).name(), "order_id");
        assert_eq!(first.schema().field(1).name(), "event_ts");
        assert_eq!(*first.schema().field(1).data_type(), DataType::Utf8);
        let printed = second
            .column(1)
            .as_any()
            .downcast_ref::<StringArray>()
            .expect("text");
        assert_eq!(printed.value(0), "2024-01-02 03:04:05.5");
        assert!(Arc::ptr_eq(&first.schema(), &second.schema()));
        // A binary timestamp is not printed.
        let binary =
            arrow_pg::datatypes::arrow_schema_to_pg_fields(&schema, &Format::UnifiedBinary, None)
                .expect("binary fields");
        let mut last = None;
        let kept = pg_text_columns(batch(&schema, 3), &binary, "UTC", &mut last).expect("printed");
        assert_eq!(kept.schema(), schema);
    }

    #[test]
    fn a_connection_reuses_its_last_fields_only_for_the_same_schema_and_formats() {
        let last = LastFields::default();
        let schema = orders();
        let options = Arc::new(FormatOptions::default());
        let text = last
            .fields(&schema, &Format::UnifiedText, options.clone())
            .expect("fields");
        // The same columns again (another Arc, equal): the same descriptions.
        let again = last
            .fields(&orders(), &Format::UnifiedText, options.clone())
            .expect("fields");
        assert!(Arc::ptr_eq(&text, &again));
        let binary = last
            .fields(&schema, &Format::UnifiedBinary, options.clone())
            .expect("fields");
        assert!(binary.iter().all(|f| f.format() == FieldFormat::Binary));
        let mixed = last
            .fields(&schema, &Format::Individual(vec![0, 1]), options.clone())
            .expect("fields");
        assert_eq!(mixed[0].format(), FieldFormat::Text);
        assert_eq!(mixed[1].format(), FieldFormat::Binary);
        let renamed = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new(
                "event_ts",
                DataType::Timestamp(TimeUnit::Microsecond, None),
                true,
            ),
        ]));
        let other = last
            .fields(&renamed, &Format::Individual(vec![0, 1]), options.clone())
            .expect("fields");
        assert_eq!(other[0].name(), "id");
        // Other session formatting (a SET of DateStyle or TimeZone makes new options).
        let set = last
            .fields(
                &renamed,
                &Format::Individual(vec![0, 1]),
                Arc::new(FormatOptions::default()),
            )
            .expect("fields");
        assert!(!Arc::ptr_eq(&other, &set));
    }
}
