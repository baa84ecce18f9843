//! A cached result's data rows, kept with the result ([`crate::service::encodings`]) once a
//! response encoded them: the next hit encoded the same way sends those rows again instead of
//! converting, printing (timestamps in the session's zone, floats, ...) and encoding the same
//! batches anew — a fifth of a point lookup's CPU on a hit, measured by `perf`.
//!
//! "The same way" is everything a data row's bytes depend on besides the values: the session's
//! formatting options, and per column its Arrow type as streamed, its PostgreSQL type, type
//! modifier and format (text or binary). A cached result's values are fixed, and the rows a
//! statement streams from it pass batch for batch (a parameter's quotient, the group's
//! limits, a cancel), so batch `i` of a hit is sent as the kept rows of batch `i` — after the
//! stream gave it, so that an error the stream ends with (a limit, a cancel, a timeout) comes
//! where it would have.

use std::sync::Arc;

use arrow::datatypes::{DataType, Schema};
use arrow::record_batch::RecordBatch;
use pgwire::api::Type;
use pgwire::api::results::{FieldFormat, FieldInfo};
use pgwire::error::PgWireResult;
use pgwire::messages::data::DataRow;
use pgwire::types::format::FormatOptions;

use crate::service::encodings::Encodings;

/// A response's rows, as an iterator (what a batch becomes).
pub(super) type Rows = Box<dyn Iterator<Item = PgWireResult<DataRow>> + Send + Sync>;

/// What a column's bytes on the wire depend on besides its values.
#[derive(Debug)]
struct Column {
    arrow: DataType,
    pg: Type,
    modifier: i32,
    format: FieldFormat,
}

/// The rows of one cached result as encoded under `options` and `columns`, batch by batch.
#[derive(Debug)]
struct EncodedRows {
    options: FormatOptions,
    columns: Vec<Column>,
    batches: Vec<Vec<DataRow>>,
}

impl EncodedRows {
    /// Whether these rows were encoded as a response of `schema` sent with `fields` under
    /// `options` encodes (compared in place: a hit builds no key).
    fn made_as(&self, options: &FormatOptions, schema: &Schema, fields: &[FieldInfo]) -> bool {
        self.columns.len() == fields.len()
            && schema.fields().len() == fields.len()
            && self
                .columns
                .iter()
                .zip(schema.fields().iter().zip(fields))
                .all(|(c, (arrow, field))| {
                    c.arrow == *arrow.data_type()
                        && c.pg == *field.datatype()
                        && c.modifier == field.type_modifier()
                        && c.format == field.format()
                })
            && self.options == *options
    }
}

/// How a response uses its result's kept rows.
pub(super) struct Memo(State);

enum State {
    /// Not a cached result's (or not small enough to keep): every batch is encoded.
    None,
    /// The kept rows were encoded as this response encodes: batch `at` sends them.
    Send { kept: Arc<EncodedRows>, at: usize },
    /// Encoding, and keeping what it encodes once the stream ends well.
    Keep(Keeping),
}

struct Keeping {
    encodings: Arc<Encodings>,
    rows: EncodedRows,
    /// The heap `rows` holds (allocations rounded up to 16 bytes).
    bytes: u64,
}

impl Memo {
    /// The memo of a response of `schema` sent with `fields` under `options`, whose rows are
    /// a cached result's when `encodings` is given.
    pub(super) fn of(
        encodings: Option<Arc<Encodings>>,
        schema: &Schema,
        fields: &[FieldInfo],
        options: &FormatOptions,
    ) -> Self {
        let Some(encodings) = encodings.filter(|e| e.room() > 0) else {
            return Self(State::None);
        };
        let kept = encodings
            .get()
            .and_then(|k| k.downcast::<EncodedRows>().ok())
            .filter(|k| k.made_as(options, schema, fields));
        if let Some(kept) = kept {
            return Self(State::Send { kept, at: 0 });
        }
        let columns: Vec<Column> = schema
            .fields()
            .iter()
            .zip(fields)
            .map(|(arrow, field)| Column {
                arrow: arrow.data_type().clone(),
                pg: field.datatype().clone(),
                modifier: field.type_modifier(),
                format: field.format(),
            })
            .collect();
        if columns.len() != fields.len() || columns.len() != schema.fields().len() {
            return Self(State::None);
        }
        Self(State::Keep(Keeping {
            encodings,
            // The value behind the `Arc` (its counts too), the columns, the options.
            bytes: (16 + size_of::<EncodedRows>() + columns.len() * size_of::<Column>()) as u64
                + weight_of(options),
            rows: EncodedRows {
                options: options.clone(),
                columns,
                batches: Vec::new(),
            },
        }))
    }

    /// The data rows of the stream's next item: the kept ones, or `encode`'s (kept when
    /// keeping).
    pub(super) fn rows(
        &mut self,
        batch: datafusion::error::Result<RecordBatch>,
        encode: impl FnOnce(datafusion::error::Result<RecordBatch>) -> Rows,
    ) -> Rows {
        match &mut self.0 {
            State::None => encode(batch),
            State::Send { kept, at } => {
                let i = *at;
                *at += 1;
                match (&batch, kept.batches.get(i)) {
                    (Ok(b), Some(rows)) if rows.len() == b.num_rows() => {
                        let kept = kept.clone();
                        Box::new((0..rows.len()).filter_map(move |j| {
                            kept.batches.get(i).and_then(|r| r.get(j)).cloned().map(Ok)
                        }))
                    }
                    // Not the batches kept (cannot happen for one cached result): encoded.
                    _ => {
                        self.0 = State::None;
                        encode(batch)
                    }
                }
            }
            State::Keep(keeping) => {
                if batch.is_err() {
                    self.0 = State::None;
                    return encode(batch);
                }
                let rows: Vec<PgWireResult<DataRow>> = encode(batch).collect();
                let mut kept = Vec::with_capacity(rows.len());
                for row in &rows {
                    let Ok(row) = row else { break };
                    // A copy of its own: the encoder's rows share one growing buffer.
                    let row = row.clone();
                    keeping.bytes +=
                        (size_of::<DataRow>() + row.data.capacity().next_multiple_of(16)) as u64;
                    kept.push(row);
                }
                keeping.bytes += size_of::<Vec<DataRow>>() as u64;
                if kept.len() < rows.len() || keeping.bytes > keeping.encodings.room() {
                    self.0 = State::None;
                } else {
                    keeping.rows.batches.push(kept);
                }
                Box::new(rows.into_iter())
            }
        }
    }

    /// The stream ended: what was encoded is kept with the result.
    pub(super) fn finish(self) {
        if let State::Keep(keeping) = self.0 {
            keeping
                .encodings
                .keep(Arc::new(keeping.rows), keeping.bytes);
        }
    }
}

/// The heap `options` holds.
fn weight_of(options: &FormatOptions) -> u64 {
    (options.date_style.capacity()
        + options.interval_style.capacity()
        + options.bytea_output.capacity()
        + options.time_zone.capacity()) as u64
}

#[cfg(test)]
mod tests {
    use arrow::array::{Float64Array, Int64Array, TimestampMicrosecondArray};
    use arrow::datatypes::{Field, SchemaRef, TimeUnit};
    use datafusion::error::DataFusionError;
    use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
    use futures::StreamExt;
    use pgwire::api::portal::Format;

    use super::super::encode::{LastFields, query_response};
    use super::*;

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("order_id", DataType::Int64, false),
            Field::new(
                "event_ts",
                DataType::Timestamp(TimeUnit::Microsecond, None),
                true,
            ),
            Field::new("price", DataType::Float64, true),
        ]))
    }

    /// Two rows from `id` on.
    fn batch(id: i64) -> RecordBatch {
        RecordBatch::try_new(
            schema(),
            vec![
                Arc::new(Int64Array::from(vec![id, id + 1])),
                Arc::new(TimestampMicrosecondArray::from(vec![
                    Some(1_704_164_645_500_000 + id),
                    None,
                ])),
                Arc::new(Float64Array::from(vec![Some(0.1 * id as f64), Some(2.5)])),
            ],
        )
        .expect("batch")
    }

    fn failure() -> DataFusionError {
        DataFusionError::Execution("the result passed max_rows".into())
    }

    /// What a response over `items` sends: each row, or the error's message.
    async fn answer(
        items: Vec<datafusion::error::Result<RecordBatch>>,
        encodings: &Arc<Encodings>,
        format: &Format,
        options: &FormatOptions,
    ) -> Vec<Result<DataRow, String>> {
        let stream = Box::pin(RecordBatchStreamAdapter::new(
            schema(),
            futures::stream::iter(items),
        ));
        let last = LastFields::default();
        let mut response = query_response(
            stream,
            "SELECT",
            format,
            Arc::new(options.clone()),
            &last,
            Some(encodings.clone()),
        )
        .expect("response");
        let mut rows = Vec::new();
        while let Some(row) = response.data_rows().next().await {
            rows.push(row.map_err(|e| e.to_string()));
        }
        rows
    }

    /// Batches of two rows from `ids` on.
    fn batches(ids: &[i64]) -> Vec<datafusion::error::Result<RecordBatch>> {
        ids.iter().map(|&id| Ok(batch(id))).collect()
    }

    fn room() -> Arc<Encodings> {
        Arc::new(Encodings::for_result(10_000))
    }

    #[tokio::test]
    async fn a_hit_encoded_the_same_way_sends_the_rows_the_first_answer_kept() {
        let encodings = room();
        let (text, binary) = (Format::UnifiedText, Format::UnifiedBinary);
        let options = FormatOptions::default();
        let first = answer(batches(&[1, 3]), &encodings, &text, &options).await;
        assert_eq!(first.len(), 4);
        assert!(encodings.get().is_some(), "kept once the stream ended well");
        // Other values, the same row counts: a hit never has them, so sending the first
        // answer's rows shows they were not encoded again.
        let hit = answer(batches(&[7, 9]), &encodings, &text, &options).await;
        assert_eq!(hit, first);
        let fresh = answer(batches(&[7, 9]), &room(), &text, &options).await;
        assert_ne!(fresh, first, "the batches' own rows differ");

        // Binary columns, or other session formatting: encoded (and kept) anew.
        let sent = answer(batches(&[7, 9]), &encodings, &binary, &options).await;
        assert_ne!(sent, first);
        let again = answer(batches(&[11, 13]), &encodings, &binary, &options).await;
        assert_eq!(again, sent, "the binary rows were kept in their turn");
        let mut other = options;
        other.extra_float_digits = 0;
        let text_again = answer(batches(&[7, 9]), &encodings, &text, &other).await;
        let fresh_other = answer(batches(&[7, 9]), &room(), &text, &other).await;
        assert_eq!(text_again, fresh_other, "its own batches, encoded");
    }

    #[tokio::test]
    async fn an_error_comes_where_the_stream_gives_it_and_a_failed_answer_keeps_nothing() {
        let encodings = room();
        let (text, options) = (Format::UnifiedText, FormatOptions::default());
        let failing = |id| vec![Ok(batch(id)), Err(failure())];
        let failed = answer(failing(1), &encodings, &text, &options).await;
        assert_eq!(failed.len(), 3);
        assert!(failed[2].as_ref().is_err_and(|e| e.contains("max_rows")));
        assert!(
            encodings.get().is_none(),
            "nothing kept from a failed answer"
        );

        let first = answer(batches(&[1, 3]), &encodings, &text, &options).await;
        // A hit whose stream fails at its second batch (a limit, a cancel): the first batch's
        // kept rows, then the error.
        let hit = answer(failing(5), &encodings, &text, &options).await;
        assert_eq!(hit.len(), 3);
        assert_eq!(hit[..2], first[..2]);
        assert!(hit[2].as_ref().is_err_and(|e| e.contains("max_rows")));
        // Batches that are not the kept ones (another row count) are encoded.
        let one_row = batch(21).slice(0, 1);
        let other = answer(vec![Ok(one_row)], &encodings, &text, &options).await;
        assert_eq!(other.len(), 1);
        assert_ne!(other[0], first[0]);
    }

    #[tokio::test]
    async fn rows_larger_than_the_room_charged_for_them_are_not_kept() {
        let (text, options) = (Format::UnifiedText, FormatOptions::default());
        // 40 rows of about 40 bytes each (and their headers) against 1 KiB and 100 bytes.
        let ids: Vec<i64> = (0..20).map(|i| i * 2).collect();
        let encodings = Arc::new(Encodings::for_result(100));
        let rows = answer(batches(&ids), &encodings, &text, &options).await;
        assert_eq!(rows.len(), 40);
        assert!(encodings.get().is_none());
        // The same rows fit the room of a result of their Arrow size.
        let arrow: usize = ids
            .iter()
            .map(|&id| batch(id).get_array_memory_size())
            .sum();
        let encodings = Arc::new(Encodings::for_result(arrow as u64));
        answer(batches(&ids), &encodings, &text, &options).await;
        assert!(encodings.get().is_some());
    }
}
