//! One accelerated table: its rows at one snapshot as Arrow, file by file, with hash indexes.
//!
//! A copy is built from the snapshot's data files with the same Parquet reader a file scan
//! uses, so it holds exactly the snapshot's rows. The next snapshot's copy reuses the batches
//! of every file both snapshots share and reads only the files the commit added (an append
//! reads its new files; a compaction reads its rewritten ones); a snapshot with delete files
//! (or one the file index does not take) is read whole through iceberg-datafusion's scan,
//! which applies the deletes. The indexes are rebuilt for every copy.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::{DataType, SchemaRef};
use datafusion::prelude::SessionContext;
use futures::{StreamExt, TryStreamExt};
use iceberg::table::Table;

use crate::error::{Error, Result};
use crate::lake::Lake;
use crate::lake::files::task;

/// Files read at once while a copy is built.
const READ_CONCURRENCY: usize = 8;

/// A value an index is keyed by. Integers of every width share one kind (equality of integers
/// does not depend on their width); text is compared byte for byte, as DataFusion compares it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Key {
    /// Any integer column (and `date`, as days).
    Int(i64),
    /// Any text column.
    Text(Box<str>),
}

/// Which kind of [`Key`] a column's values make, if any.
pub(crate) fn key_kind(t: &DataType) -> Option<KeyKind> {
    match t {
        DataType::Int8
        | DataType::Int16
        | DataType::Int32
        | DataType::Int64
        | DataType::UInt8
        | DataType::UInt16
        | DataType::UInt32 => Some(KeyKind::Int),
        DataType::Date32 => Some(KeyKind::Date),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => Some(KeyKind::Text),
        _ => None,
    }
}

/// The kinds of indexable columns: a literal is looked up only in a column of its own kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyKind {
    /// Integers.
    Int,
    /// Dates (days since the epoch).
    Date,
    /// Text.
    Text,
}

/// Row positions by key: `(batch << 32) | row`.
type Positions = HashMap<Key, Vec<u64>>;

/// The rows of one table at one snapshot.
#[derive(Debug)]
pub(crate) struct TableCopy {
    /// The snapshot the rows are of.
    pub snapshot_id: i64,
    /// The Iceberg schema the rows were read with.
    pub schema_id: i32,
    /// The rows' Arrow schema (UTC, as stored).
    pub schema: SchemaRef,
    /// The batches of each data file by path (one entry `""` when read whole).
    pub files: BTreeMap<Arc<str>, Arc<[RecordBatch]>>,
    /// Every batch, in one list the indexes point into.
    pub batches: Vec<RecordBatch>,
    /// Hash indexes by column position.
    pub indexes: HashMap<usize, Positions>,
    /// Rows held.
    pub rows: u64,
    /// Memory held: the batches' buffers and the indexes' estimated heap.
    pub bytes: u64,
}

/// How a copy was built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Built {
    /// Every file read (first copy, new schema, delete files).
    Full,
    /// Only the files the commit added were read.
    Incremental {
        /// Files read.
        read: usize,
        /// Files kept from the previous copy.
        kept: usize,
    },
}

impl TableCopy {
    /// The copy of `table` at its snapshot `snapshot_id`, reusing `previous`'s files, with
    /// indexes on the columns named `indexed` (those that exist and can be keyed).
    ///
    /// # Errors
    /// Reading metadata or data files.
    pub(crate) async fn build(
        lake: &Arc<Lake>,
        table: &Table,
        snapshot_id: i64,
        previous: Option<&TableCopy>,
        indexed: &[String],
    ) -> Result<(Self, Built)> {
        let metadata = table.metadata();
        let snapshot = metadata
            .snapshot_by_id(snapshot_id)
            .cloned()
            .ok_or_else(|| {
                Error::Internal(format!("snapshot {snapshot_id} is not in the table"))
            })?;
        let schema = snapshot.schema(metadata)?;
        let provider = crate::lake_scan::LakeTable::try_new(
            lake.clone(),
            table.clone(),
            Some(snapshot_id),
            None,
        )
        .await?;
        let arrow = provider.stored_schema();
        let previous = previous.filter(|p| p.schema_id == schema.schema_id() && p.schema == arrow);
        let (files, built) = match lake.files().snapshot(table, &snapshot).await? {
            Some(snapshot_files) => {
                let field_ids: Vec<i32> = arrow
                    .fields()
                    .iter()
                    .map(|f| {
                        schema.field_id_by_name(f.name()).ok_or_else(|| {
                            Error::Internal(format!("column {} has no field id", f.name()))
                        })
                    })
                    .collect::<Result<_>>()?;
                let mut files = BTreeMap::new();
                let mut wanted = Vec::new();
                for file in snapshot_files.data_files() {
                    let path = file.file_path();
                    match previous.and_then(|p| p.files.get(path)) {
                        Some(kept) => {
                            files.insert(Arc::<str>::from(path), kept.clone());
                        }
                        None => wanted.push(task(file, &schema, &field_ids, None)),
                    }
                }
                let kept = files.len();
                let read = wanted.len();
                let reader = lake.files().reader(table);
                let loaded: Vec<(Arc<str>, Arc<[RecordBatch]>)> = futures::stream::iter(wanted)
                    .map(|t| {
                        let reader = reader.clone();
                        let arrow = arrow.clone();
                        async move {
                            let path: Arc<str> = Arc::from(t.data_file_path.as_str());
                            let batches = crate::lake::files::read_file(&reader, t).await?;
                            let batches = conform(batches, &arrow)?;
                            Ok::<_, Error>((path, batches.into()))
                        }
                    })
                    .buffer_unordered(READ_CONCURRENCY)
                    .try_collect()
                    .await?;
                files.extend(loaded);
                let built = match previous {
                    Some(_) => Built::Incremental { read, kept },
                    None => Built::Full,
                };
                (files, built)
            }
            None => {
                use datafusion::datasource::TableProvider;
                let ctx = SessionContext::new();
                let state = ctx.state();
                let plan = provider.scan(&state, None, &[], None).await?;
                let batches = datafusion::physical_plan::collect(plan, ctx.task_ctx()).await?;
                let batches = conform(batches, &arrow)?;
                let mut files = BTreeMap::new();
                files.insert(Arc::<str>::from(""), batches.into());
                (files, Built::Full)
            }
        };
        let batches: Vec<RecordBatch> = files.values().flat_map(|b| b.iter().cloned()).collect();
        let rows = batches.iter().map(|b| b.num_rows() as u64).sum();
        let mut bytes: u64 = batches
            .iter()
            .map(|b| b.get_array_memory_size() as u64)
            .sum();
        let mut indexes = HashMap::new();
        for name in indexed {
            let Some(column) = arrow
                .fields()
                .iter()
                .position(|f| f.name().eq_ignore_ascii_case(name))
            else {
                continue;
            };
            if key_kind(arrow.field(column).data_type()).is_none() || indexes.contains_key(&column)
            {
                continue;
            }
            let (index, heap) = build_index(&batches, column);
            bytes += heap;
            indexes.insert(column, index);
        }
        Ok((
            Self {
                snapshot_id,
                schema_id: schema.schema_id(),
                schema: arrow,
                files,
                batches,
                indexes,
                rows,
                bytes,
            },
            built,
        ))
    }

    /// The names of the indexed columns.
    pub(crate) fn indexed_columns(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .indexes
            .keys()
            .map(|i| self.schema.field(*i).name().clone())
            .collect();
        names.sort();
        names
    }

    /// The rows whose `column` holds one of `keys`, as one batch in the copy's order (`None`:
    /// no index on it). A customer's orders are spread over as many files as they have
    /// orders; gathered into one batch, the statement's filter and sort see one batch, not one
    /// per file.
    pub(crate) fn lookup(&self, column: usize, keys: &[Key]) -> Result<Option<Vec<RecordBatch>>> {
        let Some(index) = self.indexes.get(&column) else {
            return Ok(None);
        };
        let mut positions: Vec<u64> = keys
            .iter()
            .flat_map(|key| index.get(key).into_iter().flatten().copied())
            .collect();
        positions.sort_unstable();
        positions.dedup();
        if positions.is_empty() {
            return Ok(Some(Vec::new()));
        }
        let mut sources: Vec<&RecordBatch> = Vec::new();
        let mut at: Vec<(usize, usize)> = Vec::with_capacity(positions.len());
        for position in positions {
            let (batch, row) = ((position >> 32) as usize, position as u32 as usize);
            let Some(source) = self.batches.get(batch) else {
                return Err(Error::Internal(
                    "accelerated index points past its rows".into(),
                ));
            };
            // Positions are sorted, so one batch's rows are consecutive.
            if sources
                .last()
                .is_none_or(|last| !std::ptr::eq(*last, source))
            {
                sources.push(source);
            }
            at.push((sources.len() - 1, row));
        }
        // Consecutive rows of one batch (a point lookup's row): a slice of it, not a copy.
        if let ([source], Some(&(_, first)), Some(&(_, last))) =
            (&sources[..], at.first(), at.last())
            && last - first + 1 == at.len()
        {
            return Ok(Some(vec![source.slice(first, at.len())]));
        }
        let gathered = arrow::compute::interleave_record_batch(&sources, &at)
            .map_err(|e| Error::Internal(e.to_string()))?;
        Ok(Some(vec![gathered]))
    }
}

/// `batches` under `schema` (the reader's batches carry the same columns; their metadata may
/// differ).
fn conform(batches: Vec<RecordBatch>, schema: &SchemaRef) -> Result<Vec<RecordBatch>> {
    batches
        .into_iter()
        .map(|b| {
            RecordBatch::try_new(schema.clone(), b.columns().to_vec()).map_err(|e| {
                Error::Internal(format!("an accelerated file does not match the table: {e}"))
            })
        })
        .collect()
}

/// The index of `column` over `batches`, and its estimated heap.
fn build_index(batches: &[RecordBatch], column: usize) -> (Positions, u64) {
    let mut index: Positions = HashMap::new();
    let mut text_bytes = 0u64;
    for (b, batch) in batches.iter().enumerate() {
        let array = batch.column(column);
        for row in 0..array.len() {
            if array.is_null(row) {
                continue;
            }
            let Some(key) = key_at(array.as_ref(), row) else {
                continue;
            };
            if let Key::Text(t) = &key {
                text_bytes += t.len() as u64;
            }
            index
                .entry(key)
                .or_default()
                .push(((b as u64) << 32) | row as u64);
        }
    }
    // A hashbrown slot (key 24 B + Vec 24 B + control byte), each Vec's buffer (8 B a row,
    // at least 4 slots), and the text keys' own bytes.
    let entries = index.len() as u64;
    let positions: u64 = index.values().map(|v| v.capacity().max(4) as u64 * 8).sum();
    let heap = entries * 49 * 8 / 7 + positions + text_bytes;
    (index, heap)
}

/// The key of `array[row]` (not null).
fn key_at(array: &dyn Array, row: usize) -> Option<Key> {
    use arrow::datatypes as t;
    Some(match array.data_type() {
        DataType::Int8 => Key::Int(i64::from(array.as_primitive::<t::Int8Type>().value(row))),
        DataType::Int16 => Key::Int(i64::from(array.as_primitive::<t::Int16Type>().value(row))),
        DataType::Int32 => Key::Int(i64::from(array.as_primitive::<t::Int32Type>().value(row))),
        DataType::Int64 => Key::Int(array.as_primitive::<t::Int64Type>().value(row)),
        DataType::UInt8 => Key::Int(i64::from(array.as_primitive::<t::UInt8Type>().value(row))),
        DataType::UInt16 => Key::Int(i64::from(array.as_primitive::<t::UInt16Type>().value(row))),
        DataType::UInt32 => Key::Int(i64::from(array.as_primitive::<t::UInt32Type>().value(row))),
        DataType::Date32 => Key::Int(i64::from(array.as_primitive::<t::Date32Type>().value(row))),
        DataType::Utf8 => Key::Text(array.as_string::<i32>().value(row).into()),
        DataType::LargeUtf8 => Key::Text(array.as_string::<i64>().value(row).into()),
        DataType::Utf8View => Key::Text(array.as_string_view().value(row).into()),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{Field, Schema};

    fn batch(ids: &[i64], names: &[Option<&str>]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(ids.to_vec())),
                Arc::new(StringArray::from(names.to_vec())),
            ],
        )
        .expect("batch")
    }

    #[test]
    fn an_index_finds_every_row_of_a_key_across_batches_and_skips_nulls() {
        let batches = vec![
            batch(&[1, 2, 3], &[Some("a"), None, Some("b")]),
            batch(&[3, 4], &[Some("a"), Some("")]),
        ];
        let (ids, _) = build_index(&batches, 0);
        assert_eq!(ids[&Key::Int(3)], vec![2, (1 << 32)]);
        assert!(!ids.contains_key(&Key::Int(5)));
        let (names, heap) = build_index(&batches, 1);
        assert_eq!(names.len(), 3, "null is not a key: {names:?}");
        assert_eq!(names[&Key::Text("a".into())], vec![0, (1 << 32)]);
        assert!(heap > 0);
    }

    #[test]
    fn a_lookup_gives_exactly_the_rows_of_its_keys() {
        let batches = vec![
            batch(&[1, 2, 3, 4], &[Some("a"), Some("b"), Some("b"), Some("c")]),
            batch(&[5, 1], &[Some("b"), Some("d")]),
        ];
        let schema = batches[0].schema();
        let (by_id, _) = build_index(&batches, 0);
        let (by_name, _) = build_index(&batches, 1);
        let copy = TableCopy {
            snapshot_id: 1,
            schema_id: 0,
            schema,
            files: BTreeMap::new(),
            batches,
            indexes: HashMap::from([(0, by_id), (1, by_name)]),
            rows: 6,
            bytes: 0,
        };
        let rows = |column: usize, keys: &[Key]| -> Vec<(i64, String)> {
            let found = copy.lookup(column, keys).expect("lookup").expect("indexed");
            found
                .iter()
                .flat_map(|b| {
                    let ids = b.column(0).as_primitive::<arrow::datatypes::Int64Type>();
                    let names = b.column(1).as_string::<i32>();
                    (0..b.num_rows())
                        .map(|i| (ids.value(i), names.value(i).to_string()))
                        .collect::<Vec<_>>()
                })
                .collect()
        };
        // One row (a slice of its batch), consecutive rows of one batch, rows of two batches,
        // rows apart in one batch, a key twice, a key that is not there.
        assert_eq!(rows(0, &[Key::Int(3)]), [(3, "b".to_string())]);
        assert_eq!(
            rows(0, &[Key::Int(4), Key::Int(3)]),
            [(3, "b".into()), (4, "c".into())]
        );
        assert_eq!(rows(0, &[Key::Int(1)]), [(1, "a".into()), (1, "d".into())]);
        assert_eq!(
            rows(0, &[Key::Int(1), Key::Int(4)]),
            [(1, "a".into()), (4, "c".into()), (1, "d".into())]
        );
        assert_eq!(
            rows(1, &[Key::Text("b".into())]),
            [(2, "b".into()), (3, "b".into()), (5, "b".into())]
        );
        assert_eq!(rows(0, &[Key::Int(2), Key::Int(2)]), [(2, "b".to_string())]);
        assert!(rows(0, &[Key::Int(9)]).is_empty());
        assert!(
            copy.lookup(5, &[Key::Int(1)]).expect("lookup").is_none(),
            "no index"
        );
    }
}
