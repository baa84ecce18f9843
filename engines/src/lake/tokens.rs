//! Version tokens: the current metadata location of a table, looked up as cheaply as the
//! catalog allows (one indexed row read in a SQL catalog).
//!
//! Every statement reads its tables' tokens, so a lookup is one round trip and nothing more:
//! the connections are kept here rather than in sqlx's pool, whose release pings each
//! connection (a second round trip per statement in sqlx 0.8).

use std::sync::Arc;

use iceberg::{Catalog, TableIdent};
use sqlx::{AnyConnection, Connection};
use tokio::sync::Semaphore;

use super::sqlite_tokens::SqliteTokens;
use super::{CatalogKind, LakeConfig};
use crate::error::{Error, Result};
use crate::idle::Idle;

/// At most this many lookups run at once (each on its own connection).
const CONNECTIONS: usize = 8;

/// The row a token lookup finds: the table's metadata location (NULL while it is being created).
type TokenRow = Option<(Option<String>,)>;

/// The catalog database's connections for token lookups: idle ones are reused, one that
/// failed is dropped, and a lookup that failed on a reused connection (the server closed an
/// idle one, or restarted) is tried once more on a new one.
pub(super) struct Connections {
    uri: String,
    idle: Idle<AnyConnection>,
    permits: Semaphore,
}

impl Connections {
    async fn connect(uri: &str) -> Result<Self> {
        let first = AnyConnection::connect(uri).await?;
        Ok(Self {
            uri: uri.to_string(),
            idle: Idle::with(vec![first], CONNECTIONS),
            permits: Semaphore::new(CONNECTIONS),
        })
    }

    /// The single-column row `query` finds for `(catalog, namespace, name)`.
    async fn fetch(
        &self,
        query: &str,
        binds: [&str; 3],
    ) -> std::result::Result<TokenRow, sqlx::Error> {
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| sqlx::Error::PoolClosed)?;
        let reused = self.idle.take();
        let was_reused = reused.is_some();
        let mut connection = match reused {
            Some(c) => c,
            None => AnyConnection::connect(&self.uri).await?,
        };
        match fetch_row(&mut connection, query, binds).await {
            Ok(row) => {
                self.idle.give_back(connection);
                Ok(row)
            }
            Err(e) if was_reused && !matches!(e, sqlx::Error::Database(_)) => {
                drop(connection);
                let mut fresh = AnyConnection::connect(&self.uri).await?;
                let row = fetch_row(&mut fresh, query, binds).await?;
                self.idle.give_back(fresh);
                Ok(row)
            }
            Err(e) => Err(e),
        }
    }
}

async fn fetch_row(
    connection: &mut AnyConnection,
    query: &str,
    [catalog, namespace, name]: [&str; 3],
) -> std::result::Result<TokenRow, sqlx::Error> {
    sqlx::query_as(query)
        .bind(catalog)
        .bind(namespace)
        .bind(name)
        .fetch_optional(connection)
        .await
}

/// Where version tokens come from.
pub(super) enum TokenSource {
    /// A direct query on the SQL catalog's `iceberg_tables`.
    Sql {
        connections: Connections,
        query: String,
        catalog_name: String,
        /// A SQLite catalog file, read on the caller's thread when it can be.
        in_place: Option<Box<SqliteTokens>>,
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
        let connections = Connections::connect(&config.uri).await?;
        let [a, b, c] = placeholders;
        let query = format!(
            "SELECT metadata_location FROM iceberg_tables \
             WHERE catalog_name = {a} AND table_namespace = {b} AND table_name = {c} \
             AND (iceberg_type = 'TABLE' OR iceberg_type IS NULL)"
        );
        let in_place = match kind {
            CatalogKind::Sqlite => SqliteTokens::new(&config.uri, &query).map(Box::new),
            _ => None,
        };
        Ok(Self::Sql {
            connections,
            query,
            catalog_name: config.name.clone(),
            in_place,
        })
    }

    /// The table's current metadata location read on this thread without waiting (a SQLite
    /// catalog's file): `Some(None)` when there is no such table, `None` when it could not be
    /// read so (then [`Self::lookup`]).
    pub(super) fn lookup_in_place(&self, schema: &str, table: &str) -> Option<Option<String>> {
        match self {
            Self::Sql {
                catalog_name,
                in_place: Some(tokens),
                ..
            } => tokens.lookup([catalog_name.as_str(), schema, table]),
            _ => None,
        }
    }

    /// The table's current metadata location, or `None` when it does not exist.
    pub(super) async fn lookup(
        &self,
        catalog: &Arc<dyn Catalog>,
        ident: &TableIdent,
    ) -> Result<Option<String>> {
        match self {
            Self::Sql {
                connections,
                query,
                catalog_name,
                in_place,
            } => {
                let namespace = ident.namespace().join(".");
                let binds = [catalog_name.as_str(), &namespace, ident.name()];
                if let Some(location) = in_place.as_ref().and_then(|t| t.lookup(binds)) {
                    return Ok(location);
                }
                let row = connections
                    .fetch(query, [catalog_name, &namespace, ident.name()])
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
