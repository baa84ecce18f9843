//! Version tokens: the current metadata location of a table, looked up as cheaply as the
//! catalog allows (one indexed row read in a SQL catalog).

use std::sync::Arc;
use std::time::Duration;

use iceberg::{Catalog, TableIdent};
use sqlx::AnyPool;
use sqlx::any::AnyPoolOptions;

use super::{CatalogKind, LakeConfig};
use crate::error::{Error, Result};

/// Where version tokens come from.
pub(super) enum TokenSource {
    /// A direct query on the SQL catalog's `iceberg_tables`.
    Sql {
        pool: AnyPool,
        query: String,
        catalog_name: String,
    },
    /// A REST catalog: the token is the metadata location of a table load.
    Rest,
}

impl TokenSource {
    pub(super) async fn connect(kind: CatalogKind, config: &LakeConfig) -> Result<Self> {
        let placeholders = match kind {
            CatalogKind::Postgres => ["$1", "$2", "$3"],
            CatalogKind::Sqlite => ["?", "?", "?"],
            CatalogKind::Rest => return Ok(Self::Rest),
        };
        sqlx::any::install_default_drivers();
        let pool = AnyPoolOptions::new()
            .max_connections(8)
            .min_connections(1)
            .idle_timeout(Duration::from_secs(300))
            .acquire_timeout(Duration::from_secs(10))
            .test_before_acquire(false)
            .connect(&config.uri)
            .await?;
        let [a, b, c] = placeholders;
        let query = format!(
            "SELECT metadata_location FROM iceberg_tables \
             WHERE catalog_name = {a} AND table_namespace = {b} AND table_name = {c} \
             AND (iceberg_type = 'TABLE' OR iceberg_type IS NULL)"
        );
        Ok(Self::Sql {
            pool,
            query,
            catalog_name: config.name.clone(),
        })
    }

    /// The table's current metadata location, or `None` when it does not exist.
    pub(super) async fn lookup(
        &self,
        catalog: &Arc<dyn Catalog>,
        ident: &TableIdent,
    ) -> Result<Option<String>> {
        match self {
            Self::Sql {
                pool,
                query,
                catalog_name,
            } => {
                let row: Option<(Option<String>,)> = sqlx::query_as(query)
                    .bind(catalog_name.as_str())
                    .bind(ident.namespace().join("."))
                    .bind(ident.name())
                    .fetch_optional(pool)
                    .await?;
                Ok(row.and_then(|(loc,)| loc))
            }
            Self::Rest => match catalog.load_table(ident).await {
                Ok(t) => Ok(t.metadata_location().map(str::to_string)),
                Err(e)
                    if matches!(
                        e.kind(),
                        iceberg::ErrorKind::TableNotFound | iceberg::ErrorKind::NamespaceNotFound
                    ) =>
                {
                    Ok(None)
                }
                Err(e) => Err(Error::from(e)),
            },
        }
    }
}
