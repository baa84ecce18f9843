//! The demo estate: a local SQLite catalog and warehouse shaped like a real-time lakehouse,
//! written with iceberg-rust, so a newcomer sees lakegate work on a fresh machine.
//!
//! - `public.orders`: partitioned by day of `order_ts`, appended in many small commits (as a
//!   streaming writer would);
//! - `public.customers`: a dimension table;
//! - `public.events`: an append-only event log.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::record_batch::RecordBatch;
use datafusion::prelude::SessionContext;
use iceberg::arrow::schema_to_arrow_schema;
use iceberg::spec::{DataFileFormat, Literal, PartitionKey, Struct};
use iceberg::spec::{NestedField, PrimitiveType, Schema, Transform, Type, UnboundPartitionSpec};
use iceberg::table::Table;
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use iceberg::writer::base_writer::data_file_writer::DataFileWriterBuilder;
use iceberg::writer::file_writer::ParquetWriterBuilder;
use iceberg::writer::file_writer::location_generator::{
    DefaultFileNameGenerator, DefaultLocationGenerator,
};
use iceberg::writer::file_writer::rolling_writer::RollingFileWriterBuilder;
use iceberg::writer::{IcebergWriter, IcebergWriterBuilder};
use iceberg::{Catalog, NamespaceIdent, TableCreation};
use iceberg_datafusion::IcebergCatalogProvider;
use lakegate_engines::{Lake, LakeConfig};
use parquet::file::properties::WriterProperties;
use tracing::info;

use crate::error::{Error, Result};

/// Days since 1970-01-01 of the first demo order day (2026-11-15).
const DEMO_FIRST_DAY: i64 = 20_772;

/// Appends `batches` (all rows within day `day`) to the day-partitioned `table` as one commit.
async fn append_partition(
    catalog: &Arc<dyn Catalog>,
    table: Table,
    batches: Vec<RecordBatch>,
    day: i32,
) -> Result<Table> {
    let ice = |e: iceberg::Error| Error::Engine(e.into());
    let metadata = table.metadata();
    let schema = metadata.current_schema().clone();
    let arrow_schema = Arc::new(schema_to_arrow_schema(&schema).map_err(ice)?);
    let location = DefaultLocationGenerator::new(metadata).map_err(ice)?;
    let names = DefaultFileNameGenerator::new(
        format!("demo-{}", uuid::Uuid::new_v4()),
        None,
        DataFileFormat::Parquet,
    );
    let parquet = ParquetWriterBuilder::new(WriterProperties::default(), schema.clone());
    let rolling = RollingFileWriterBuilder::new_with_default_file_size(
        parquet,
        table.file_io().clone(),
        location,
        names,
    );
    let key = PartitionKey::new(
        metadata.default_partition_spec().as_ref().clone(),
        schema,
        Struct::from_iter([Some(Literal::date(day))]),
    );
    let mut writer = DataFileWriterBuilder::new(rolling)
        .build(Some(key))
        .await
        .map_err(ice)?;
    for batch in batches {
        let columns = batch
            .columns()
            .iter()
            .zip(arrow_schema.fields())
            .map(|(c, f)| arrow::compute::cast(c, f.data_type()))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| Error::Engine(datafusion::error::DataFusionError::from(e).into()))?;
        let batch = RecordBatch::try_new(arrow_schema.clone(), columns)
            .map_err(|e| Error::Engine(datafusion::error::DataFusionError::from(e).into()))?;
        writer.write(batch).await.map_err(ice)?;
    }
    let files = writer.close().await.map_err(ice)?;
    let tx = Transaction::new(&table);
    let tx = tx
        .fast_append()
        .add_data_files(files)
        .apply(tx)
        .map_err(ice)?;
    tx.commit(catalog.as_ref()).await.map_err(ice)
}

/// Where the demo lives and how big it is.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// Directory holding `catalog.db` and `warehouse/`.
    pub dir: PathBuf,
    /// Number of small commits to `orders`.
    pub order_commits: usize,
    /// Rows per `orders` commit.
    pub rows_per_commit: usize,
    /// Where the tables' files go instead of `dir/warehouse` (`s3://bucket/demo`: the storage
    /// settings come from the AWS environment variables).
    pub warehouse: Option<String>,
}

/// The catalog settings of a demo directory (its files under `warehouse` when given).
pub fn lake_config(dir: &Path, warehouse: Option<&str>) -> LakeConfig {
    LakeConfig {
        uri: format!("sqlite://{}?mode=rwc", dir.join("catalog.db").display()),
        name: "lake".into(),
        warehouse: warehouse.map_or_else(
            || format!("file://{}", dir.join("warehouse").display()),
            str::to_string,
        ),
        props: Default::default(),
        storage: Default::default(),
    }
}

fn field(id: i32, name: &str, t: PrimitiveType, required: bool) -> Arc<NestedField> {
    Arc::new(if required {
        NestedField::required(id, name, Type::Primitive(t))
    } else {
        NestedField::optional(id, name, Type::Primitive(t))
    })
}

/// Creates the demo estate in `options.dir` unless it already exists; returns its settings.
///
/// # Errors
/// File system, catalog or write failures.
pub async fn create(options: &DemoOptions) -> Result<LakeConfig> {
    let dir = std::path::absolute(&options.dir).map_err(|e| Error::Config {
        setting: "demo --dir".into(),
        reason: e.to_string(),
    })?;
    let local = options.warehouse.is_none();
    std::fs::create_dir_all(if local {
        dir.join("warehouse")
    } else {
        dir.clone()
    })
    .map_err(|e| Error::Config {
        setting: "demo --dir".into(),
        reason: format!("cannot create {}: {e}", dir.display()),
    })?;
    let config = lake_config(&dir, options.warehouse.as_deref());
    let lake = Lake::connect(config.clone()).await?;
    let catalog = lake.catalog().clone();
    let ns = NamespaceIdent::new("public".into());
    if catalog
        .namespace_exists(&ns)
        .await
        .map_err(lakegate_engines::Error::from)?
    {
        info!(dir = %dir.display(), "demo estate already exists");
        return Ok(config);
    }
    catalog
        .create_namespace(&ns, HashMap::new())
        .await
        .map_err(lakegate_engines::Error::from)?;

    let orders = Schema::builder()
        .with_fields(vec![
            field(1, "order_id", PrimitiveType::Long, true),
            field(2, "customer_id", PrimitiveType::Long, true),
            field(3, "order_ts", PrimitiveType::Timestamptz, true),
            field(
                4,
                "amount",
                PrimitiveType::Decimal {
                    precision: 12,
                    scale: 2,
                },
                false,
            ),
            field(5, "status", PrimitiveType::String, false),
            field(6, "region", PrimitiveType::String, false),
        ])
        .build()
        .map_err(lakegate_engines::Error::from)?;
    let by_day = UnboundPartitionSpec::builder()
        .add_partition_field(3, "order_day", Transform::Day)
        .map_err(lakegate_engines::Error::from)?
        .build();
    let customers = Schema::builder()
        .with_fields(vec![
            field(1, "customer_id", PrimitiveType::Long, true),
            field(2, "name", PrimitiveType::String, false),
            field(3, "segment", PrimitiveType::String, false),
            field(4, "country", PrimitiveType::String, false),
            field(5, "signup_date", PrimitiveType::Date, false),
        ])
        .build()
        .map_err(lakegate_engines::Error::from)?;
    let events = Schema::builder()
        .with_fields(vec![
            field(1, "event_id", PrimitiveType::Long, true),
            field(2, "event_ts", PrimitiveType::Timestamp, false),
            field(3, "customer_id", PrimitiveType::Long, false),
            field(4, "kind", PrimitiveType::String, false),
            field(5, "duration_ms", PrimitiveType::Int, false),
        ])
        .build()
        .map_err(lakegate_engines::Error::from)?;
    for (name, schema, spec) in [
        ("orders", orders, Some(by_day)),
        ("customers", customers, None),
        ("events", events, None),
    ] {
        let creation = TableCreation::builder()
            .name(name.to_string())
            .schema(schema);
        let creation = match spec {
            Some(spec) => creation.partition_spec(spec).build(),
            None => creation.build(),
        };
        catalog
            .create_table(&ns, creation)
            .await
            .map_err(lakegate_engines::Error::from)?;
    }

    let ctx = SessionContext::new();
    let provider = IcebergCatalogProvider::try_new(catalog.clone())
        .await
        .map_err(lakegate_engines::Error::from)?;
    ctx.register_catalog("lake", Arc::new(provider));
    let run = |sql: String| {
        let ctx = ctx.clone();
        async move {
            ctx.sql(&sql)
                .await
                .map_err(lakegate_engines::Error::from)?
                .collect()
                .await
                .map_err(lakegate_engines::Error::from)?;
            Ok::<(), Error>(())
        }
    };
    run("INSERT INTO lake.public.customers SELECT value AS customer_id, \
         nullif(concat('customer ', CAST(value AS VARCHAR)), NULL) AS name, \
         nullif(CASE value % 3 WHEN 0 THEN 'enterprise' WHEN 1 THEN 'smb' ELSE 'consumer' END, NULL) AS segment, \
         nullif(CASE value % 4 WHEN 0 THEN 'FR' WHEN 1 THEN 'US' WHEN 2 THEN 'DE' ELSE 'JP' END, NULL) AS country, \
         CAST(to_timestamp(1704067200 + value * 86400) AS DATE) AS signup_date \
         FROM generate_series(1, 500)"
        .into())
    .await?;
    // Orders arrive over 14 days in many small commits (as a streaming writer leaves them):
    // each commit lands in the day it was written, the newest days the busiest.
    let orders_table = catalog
        .load_table(&iceberg::TableIdent::new(ns.clone(), "orders".into()))
        .await
        .map_err(lakegate_engines::Error::from)?;
    let per = options.rows_per_commit.max(1) as i64;
    let commits = options.order_commits.max(1) as i64;
    let mut table = orders_table;
    for commit in 0..commits {
        let day = DEMO_FIRST_DAY + (commit * 14) / commits;
        let first = commit * per + 1;
        let last = first + per - 1;
        let batches = ctx
            .sql(&format!(
                "SELECT value AS order_id, (value * 7919) % 500 + 1 AS customer_id, \
                 to_timestamp({} + (value * 613) % 86400) AS order_ts, \
                 CAST(((value * 37) % 100000) / 100.0 AS DECIMAL(12,2)) AS amount, \
                 CASE value % 10 WHEN 0 THEN 'cancelled' WHEN 1 THEN 'pending' ELSE 'shipped' END AS status, \
                 CASE value % 3 WHEN 0 THEN 'emea' WHEN 1 THEN 'amer' ELSE 'apac' END AS region \
                 FROM generate_series({first}, {last})",
                day * 86400
            ))
            .await
            .map_err(lakegate_engines::Error::from)?
            .collect()
            .await
            .map_err(lakegate_engines::Error::from)?;
        table = append_partition(&catalog, table, batches, day as i32).await?;
    }
    for commit in 0..5i64 {
        let first = commit * 1000 + 1;
        let last = first + 999;
        run(format!(
            "INSERT INTO lake.public.events SELECT value AS event_id, \
             to_timestamp(1795132800 + value * 60) AS event_ts, \
             nullif(value % 500 + 1, NULL) AS customer_id, \
             nullif(CASE value % 4 WHEN 0 THEN 'login' WHEN 1 THEN 'view' WHEN 2 THEN 'search' ELSE 'checkout' END, NULL) AS kind, \
             nullif(CAST((value * 13) % 2000 AS INT), NULL) AS duration_ms \
             FROM generate_series({first}, {last})"
        ))
        .await?;
    }
    info!(dir = %dir.display(), commits = options.order_commits, "demo estate created");
    Ok(config)
}
