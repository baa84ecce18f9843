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

use datafusion::prelude::SessionContext;
use iceberg::spec::{NestedField, PrimitiveType, Schema, Transform, Type, UnboundPartitionSpec};
use iceberg::{Catalog, NamespaceIdent, TableCreation};
use iceberg_datafusion::IcebergCatalogProvider;
use lakegate_engines::{Lake, LakeConfig};
use tracing::info;

use crate::error::{Error, Result};

/// Where the demo lives and how big it is.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// Directory holding `catalog.db` and `warehouse/`.
    pub dir: PathBuf,
    /// Number of small commits to `orders`.
    pub order_commits: usize,
    /// Rows per `orders` commit.
    pub rows_per_commit: usize,
}

/// The catalog settings of a demo directory.
pub fn lake_config(dir: &Path) -> LakeConfig {
    LakeConfig {
        uri: format!("sqlite://{}?mode=rwc", dir.join("catalog.db").display()),
        name: "lake".into(),
        warehouse: format!("file://{}", dir.join("warehouse").display()),
        props: Default::default(),
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
    std::fs::create_dir_all(dir.join("warehouse")).map_err(|e| Error::Config {
        setting: "demo --dir".into(),
        reason: format!("cannot create {}: {e}", dir.display()),
    })?;
    let config = lake_config(&dir);
    let lake = Lake::connect(config.clone()).await?;
    let catalog = lake.catalog().clone();
    let ns = NamespaceIdent::new("public".into());
    if catalog.namespace_exists(&ns).await.map_err(lakegate_engines::Error::from)? {
        info!(dir = %dir.display(), "demo estate already exists");
        return Ok(config);
    }
    catalog.create_namespace(&ns, HashMap::new()).await.map_err(lakegate_engines::Error::from)?;

    let orders = Schema::builder()
        .with_fields(vec![
            field(1, "order_id", PrimitiveType::Long, true),
            field(2, "customer_id", PrimitiveType::Long, true),
            field(3, "order_ts", PrimitiveType::Timestamptz, true),
            field(4, "amount", PrimitiveType::Decimal { precision: 12, scale: 2 }, false),
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
            field(2, "event_ts", PrimitiveType::Timestamp, true),
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
        let creation = TableCreation::builder().name(name.to_string()).schema(schema);
        let creation = match spec {
            Some(spec) => creation.partition_spec(spec).build(),
            None => creation.build(),
        };
        catalog.create_table(&ns, creation).await.map_err(lakegate_engines::Error::from)?;
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
         concat('customer ', CAST(value AS VARCHAR)) AS name, \
         CASE value % 3 WHEN 0 THEN 'enterprise' WHEN 1 THEN 'smb' ELSE 'consumer' END AS segment, \
         CASE value % 4 WHEN 0 THEN 'FR' WHEN 1 THEN 'US' WHEN 2 THEN 'DE' ELSE 'JP' END AS country, \
         CAST(CAST(DATE '2024-01-01' AS TIMESTAMP) + value * INTERVAL '1 day' AS DATE) AS signup_date \
         FROM generate_series(1, 500)"
        .into())
    .await?;
    // Orders arrive over 14 days, in many small commits, the newest day the busiest.
    let per = options.rows_per_commit.max(1) as i64;
    for commit in 0..options.order_commits as i64 {
        let first = commit * per + 1;
        let last = first + per - 1;
        run(format!(
            "INSERT INTO lake.public.orders SELECT value AS order_id, \
             (value * 7919) % 500 + 1 AS customer_id, \
             TIMESTAMP '2026-11-15 00:00:00+00:00' + (value * 100) * INTERVAL '1 second' AS order_ts, \
             CAST(((value * 37) % 100000) / 100.0 AS DECIMAL(12,2)) AS amount, \
             CASE value % 10 WHEN 0 THEN 'cancelled' WHEN 1 THEN 'pending' ELSE 'shipped' END AS status, \
             CASE value % 3 WHEN 0 THEN 'emea' WHEN 1 THEN 'amer' ELSE 'apac' END AS region \
             FROM generate_series({first}, {last})"
        ))
        .await?;
    }
    for commit in 0..5i64 {
        let first = commit * 1000 + 1;
        let last = first + 999;
        run(format!(
            "INSERT INTO lake.public.events SELECT value AS event_id, \
             TIMESTAMP '2026-11-20 00:00:00' + value * INTERVAL '1 minute' AS event_ts, \
             value % 500 + 1 AS customer_id, \
             CASE value % 4 WHEN 0 THEN 'login' WHEN 1 THEN 'view' WHEN 2 THEN 'search' ELSE 'checkout' END AS kind, \
             CAST((value * 13) % 2000 AS INT) AS duration_ms \
             FROM generate_series({first}, {last})"
        ))
        .await?;
    }
    info!(dir = %dir.display(), commits = options.order_commits, "demo estate created");
    Ok(config)
}
