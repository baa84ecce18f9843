//! `DECLARE … CURSOR FOR <query>`, `FETCH` and `CLOSE`: server-side cursors read forward.
//! The declared query is planned and run like any query (access, masks, limits); each `FETCH`
//! reads from its stream under its own cancel and deadline.

use arrow::array::RecordBatch;
use datafusion::common::ParamValues;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::sql::sqlparser::ast::{CloseCursor, FetchDirection, Statement, Value};
use futures::StreamExt;
use sync_wrapper::SyncWrapper;

use crate::error::{Error, Result};
use crate::service::query::{Reading, batches_stream};
use crate::service::{Command, GatewayService, QueryOutput, StatementContext};
use crate::session::{Cursor, Session};

impl GatewayService {
    /// Runs a `DECLARE`, `FETCH` or `CLOSE` on `session`'s cursors.
    ///
    /// # Errors
    /// Unknown or duplicate cursors, SCROLL cursors, the declared query's own errors.
    pub(crate) async fn cursor_statement(
        &self,
        statement: &Statement,
        params: Option<&ParamValues>,
        session: &mut Session,
        ctx: &StatementContext,
    ) -> Result<QueryOutput> {
        match statement {
            Statement::Declare { stmts } => {
                for d in stmts {
                    let Some(query) = &d.for_query else {
                        return Err(Error::Unsupported {
                            what: "DECLARE without FOR <query>".into(),
                        });
                    };
                    if d.scroll == Some(true) {
                        return Err(Error::Unsupported {
                            what: "SCROLL cursors are not supported (cursors read forward only)"
                                .into(),
                        });
                    }
                    let Some(name) = d.names.first() else {
                        return Err(Error::Syntax {
                            message: "DECLARE needs a cursor name".into(),
                        });
                    };
                    let query = Statement::Query(query.clone());
                    let stream = self
                        .query(&query, params, None, session, ctx, Reading::Cursor)
                        .await?
                        .stream;
                    let schema = stream.schema();
                    // Fused: a FETCH after the last row reads nothing, however the engine's
                    // stream behaves once it has ended.
                    let stream =
                        Box::pin(RecordBatchStreamAdapter::new(schema.clone(), stream.fuse()));
                    let cursor = Cursor {
                        schema,
                        stream: SyncWrapper::new(stream),
                        pending: None,
                        hold: d.hold == Some(true),
                    };
                    session.declare(&name.value, cursor)?;
                }
                Ok(QueryOutput::Command(Command::new("DECLARE CURSOR")))
            }
            Statement::Fetch {
                name, direction, ..
            } => {
                let count = fetch_count(direction)?;
                let cursor = session.cursor(&name.value)?;
                let batches = ctx.guard(take_rows(cursor, count)).await?;
                let schema = cursor.schema.clone();
                Ok(QueryOutput::Rows {
                    stream: batches_stream(schema, batches),
                    tag: "FETCH",
                    encodings: None,
                })
            }
            Statement::Close { cursor } => {
                match cursor {
                    CloseCursor::All => session.close(None)?,
                    CloseCursor::Specific { name } => session.close(Some(&name.value))?,
                }
                Ok(QueryOutput::Command(Command::new("CLOSE CURSOR")))
            }
            other => Err(super::unsupported(other)),
        }
    }
}

/// How many rows a FETCH asks for (`None`: all).
fn fetch_count(direction: &FetchDirection) -> Result<Option<usize>> {
    let number = |v: &Value| -> Result<usize> {
        match v {
            Value::Number(n, _) => n.parse().map_err(|_| Error::Syntax {
                message: format!("FETCH count `{n}` is not a row count"),
            }),
            other => Err(Error::Syntax {
                message: format!("FETCH count `{other}` is not a number"),
            }),
        }
    };
    match direction {
        FetchDirection::Next => Ok(Some(1)),
        FetchDirection::Count { limit } => number(limit).map(Some),
        FetchDirection::Forward { limit: Some(l) } => number(l).map(Some),
        FetchDirection::Forward { limit: None } => Ok(Some(1)),
        FetchDirection::All | FetchDirection::ForwardAll => Ok(None),
        other => Err(Error::Unsupported {
            what: format!("FETCH {other}: cursors read forward only"),
        }),
    }
}

/// Reads up to `count` rows (all when `None`) from a cursor.
async fn take_rows(cursor: &mut Cursor, count: Option<usize>) -> Result<Vec<RecordBatch>> {
    let mut out = Vec::new();
    let mut wanted = count.unwrap_or(usize::MAX);
    while wanted > 0 {
        let batch = match cursor.pending.take() {
            Some(b) => b,
            None => match cursor.stream.get_mut().next().await {
                Some(b) => b.map_err(lakegate_engines::Error::from)?,
                None => break,
            },
        };
        if batch.num_rows() <= wanted {
            wanted -= batch.num_rows();
            out.push(batch);
        } else {
            out.push(batch.slice(0, wanted));
            cursor.pending = Some(batch.slice(wanted, batch.num_rows() - wanted));
            wanted = 0;
        }
    }
    Ok(out)
}
