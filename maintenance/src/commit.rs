//! Committing a new table version to the catalog, the way every Iceberg writer does: apply
//! updates to the current metadata only if its requirements still hold (the `main` branch is
//! where the change was computed), write the new metadata file, and swap the table's pointer
//! atomically — a compare-and-set on `iceberg_tables.metadata_location` for a SQL catalog, a
//! commit with requirements for a REST catalog. iceberg-rust 0.10 has no rewrite action and its
//! `TableCommit` cannot be built outside the crate, so this module uses its public metadata
//! builder, requirement checks and writers, and performs the swap itself.

use std::str::FromStr;
use std::sync::Arc;

use iceberg::spec::TableMetadata;
use iceberg::table::Table;
use iceberg::{MetadataLocation, TableIdent, TableRequirement, TableUpdate};
use lakegate_engines::lake::{CatalogKind, Lake};
use sqlx::any::AnyPoolOptions;

use crate::error::{Error, Result};

/// How commits reach the catalog.
enum Swap {
    /// The Iceberg SQL catalog's table (`?` or `$n` placeholders).
    Sql { pool: sqlx::AnyPool, dollar: bool },
    /// A REST catalog's table endpoint prefix (`…/v1/{prefix}`).
    Rest {
        http: reqwest::Client,
        base: String,
        token: Option<String>,
    },
}

/// Commits table changes to the lake's catalog.
pub struct Committer {
    lake: Arc<Lake>,
    swap: Swap,
}

impl Committer {
    /// A committer for `lake`'s catalog.
    ///
    /// # Errors
    /// The catalog's database or REST configuration cannot be reached.
    pub async fn connect(lake: Arc<Lake>) -> Result<Self> {
        let config = lake.config().clone();
        let swap = match config.kind()? {
            CatalogKind::Sqlite | CatalogKind::Postgres => {
                sqlx::any::install_default_drivers();
                // Lazy: a gateway with maintenance off never opens a connection for it.
                let pool = AnyPoolOptions::new()
                    .max_connections(2)
                    .connect_lazy(&config.uri)?;
                Swap::Sql {
                    pool,
                    dollar: config.kind()? == CatalogKind::Postgres,
                }
            }
            CatalogKind::Rest => {
                let http = reqwest::Client::builder()
                    .timeout(std::time::Duration::from_secs(30))
                    .build()
                    .map_err(|e| Error::Rest(e.to_string()))?;
                let root = config.uri.trim_end_matches('/').to_string();
                let token = config.props.get("token").cloned();
                let mut req = http
                    .get(format!("{root}/v1/config"))
                    .query(&[("warehouse", config.warehouse.as_str())]);
                if let Some(t) = &token {
                    req = req.bearer_auth(t);
                }
                let conf: serde_json::Value = req
                    .send()
                    .await
                    .and_then(|r| r.error_for_status())
                    .map_err(|e| Error::Rest(e.to_string()))?
                    .json()
                    .await
                    .map_err(|e| Error::Rest(e.to_string()))?;
                let prefix = conf["overrides"]["prefix"]
                    .as_str()
                    .or(conf["defaults"]["prefix"].as_str())
                    .map(|p| format!("/{p}"))
                    .unwrap_or_default();
                Swap::Rest {
                    http,
                    base: format!("{root}/v1{prefix}"),
                    token,
                }
            }
        };
        Ok(Self { lake, swap })
    }

    /// The lake.
    pub fn lake(&self) -> &Arc<Lake> {
        &self.lake
    }

    /// The table as the catalog has it now (never a cached version).
    ///
    /// # Errors
    /// Catalog errors.
    pub async fn load(&self, ident: &TableIdent) -> Result<Table> {
        Ok(self.lake.catalog().load_table(ident).await?)
    }

    /// Applies `updates` to `base` (the table as the caller loaded it) if `requirements` hold
    /// and nobody committed since: the swap compares against `base`'s metadata location, so
    /// the window between reading and swapping is only this call.
    ///
    /// # Errors
    /// [`Error::Conflict`] when a requirement fails or another writer won the swap (nothing
    /// was changed); catalog and storage errors otherwise (the outcome of a REST commit that
    /// timed out is unknown).
    pub async fn commit(
        &self,
        base: &Table,
        updates: Vec<TableUpdate>,
        requirements: Vec<TableRequirement>,
    ) -> Result<Table> {
        let ident = base.identifier();
        match &self.swap {
            Swap::Sql { pool, dollar } => {
                for r in &requirements {
                    r.check(Some(base.metadata()))
                        .map_err(|e| Error::Conflict(e.message().to_string()))?;
                }
                let location = base
                    .metadata_location()
                    .ok_or_else(|| Error::Invariant("table has no metadata location".into()))?
                    .to_string();
                let mut builder = base.metadata().clone().into_builder(Some(location.clone()));
                for u in updates {
                    builder = u.apply(builder)?;
                }
                let metadata: TableMetadata = builder.build()?.metadata;
                let next = MetadataLocation::from_str(&location)?
                    .with_next_version()
                    .with_new_metadata(&metadata);
                metadata.write_to(base.file_io(), &next).await?;
                let next = next.to_string();
                // Built before the swap: once the swap succeeds nothing may fail, or a caller
                // would take a committed change for a failed one.
                let committed = Table::builder()
                    .identifier(ident.clone())
                    .file_io(base.file_io().clone())
                    .runtime(iceberg::Runtime::try_current()?)
                    .metadata(metadata)
                    .metadata_location(next.clone())
                    .build()?;
                let sql = "UPDATE iceberg_tables SET metadata_location = ?, \
                           previous_metadata_location = ? WHERE catalog_name = ? \
                           AND table_namespace = ? AND table_name = ? AND metadata_location = ?";
                let sql = if *dollar {
                    dollar_placeholders(sql)
                } else {
                    sql.to_string()
                };
                let done = sqlx::query(&sql)
                    .bind(&next)
                    .bind(&location)
                    .bind(&self.lake.config().name)
                    .bind(ident.namespace().join("."))
                    .bind(ident.name())
                    .bind(&location)
                    .execute(pool)
                    .await?;
                if done.rows_affected() == 0 {
                    let _ = base.file_io().delete(&next).await;
                    return Err(Error::Conflict(format!("{ident} changed while committing")));
                }
                Ok(committed)
            }
            Swap::Rest { http, base, token } => {
                let ns: Vec<String> = ident.namespace().iter().cloned().collect();
                let url = format!(
                    "{base}/namespaces/{}/tables/{}",
                    url::form_urlencoded::byte_serialize(ns.join("\u{1f}").as_bytes())
                        .collect::<String>(),
                    url::form_urlencoded::byte_serialize(ident.name().as_bytes())
                        .collect::<String>(),
                );
                let body = serde_json::json!({
                    "identifier": {"namespace": ns, "name": ident.name()},
                    "requirements": requirements,
                    "updates": updates,
                });
                let mut req = http.post(url).json(&body);
                if let Some(t) = token {
                    req = req.bearer_auth(t);
                }
                let resp = req.send().await.map_err(|e| Error::Rest(e.to_string()))?;
                let status = resp.status();
                if status == reqwest::StatusCode::CONFLICT {
                    return Err(Error::Conflict(format!("{ident} changed while committing")));
                }
                if !status.is_success() {
                    let text = resp.text().await.unwrap_or_default();
                    return Err(Error::Rest(format!("commit answered {status}: {text}")));
                }
                self.load(ident).await
            }
        }
    }
}

/// `?` placeholders as PostgreSQL's `$1, $2, …`.
fn dollar_placeholders(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 8);
    let mut n = 0;
    for c in sql.chars() {
        if c == '?' {
            n += 1;
            out.push_str(&format!("${n}"));
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn placeholders_are_numbered() {
        assert_eq!(
            super::dollar_placeholders("a = ? AND b = ?"),
            "a = $1 AND b = $2"
        );
    }
}
