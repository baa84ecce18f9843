//! Extended-protocol answers written to the socket at Sync or Flush, as PostgreSQL writes them.
//!
//! pgwire flushes after ParseComplete, BindComplete, ParameterDescription, RowDescription and
//! CommandComplete: five socket writes (and five wake-ups of the client) for one
//! Parse/Bind/Describe/Execute/Sync, where PostgreSQL makes one. The protocol lets the server
//! hold these until Sync or Flush ("a Flush must be sent after any extended-query command except
//! Sync, if the frontend wishes to examine the results of that command before issuing more
//! commands"), and every driver sends one of the two. Measured: the write syscalls were a fifth
//! of the gateway's CPU on cached point lookups (perf, release build).

use std::fmt::Debug;
use std::sync::Arc;

use futures::{Sink, SinkExt};
use pgwire::api::portal::Portal;
use pgwire::api::results::{DescribeResponse, FieldInfo};
use pgwire::api::store::PortalStore;
use pgwire::api::{ClientPortalStore, DEFAULT_NAME};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::PgWireBackendMessage;
use pgwire::messages::data::{NoData, ParameterDescription, RowDescription};
use pgwire::messages::extendedquery::{Bind, BindComplete};

/// A Describe's answer: ParameterDescription (of a statement), then RowDescription or NoData.
///
/// # Errors
/// The client's connection failed.
pub(super) async fn describe_response<C, D>(client: &mut C, response: &D) -> PgWireResult<()>
where
    C: Sink<PgWireBackendMessage> + Unpin,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    D: DescribeResponse,
{
    if let Some(types) = response.parameters() {
        let oids = types.iter().map(|t| t.oid()).collect();
        client
            .feed(PgWireBackendMessage::ParameterDescription(
                ParameterDescription::new(oids),
            ))
            .await?;
    }
    let message = if response.is_no_data() {
        PgWireBackendMessage::NoData(NoData::new())
    } else {
        row_description(response.fields())
    };
    client.feed(message).await?;
    Ok(())
}

/// A portal's Describe answered with `fields`: RowDescription, or NoData for none (as
/// pgwire's own portal description).
///
/// # Errors
/// The client's connection failed.
pub(super) async fn portal_described<C>(client: &mut C, fields: &[FieldInfo]) -> PgWireResult<()>
where
    C: Sink<PgWireBackendMessage> + Unpin,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    let message = if fields.is_empty() {
        PgWireBackendMessage::NoData(NoData::new())
    } else {
        row_description(fields)
    };
    client.feed(message).await?;
    Ok(())
}

fn row_description(fields: &[FieldInfo]) -> PgWireBackendMessage {
    let fields = fields.iter().map(Into::into).collect();
    PgWireBackendMessage::RowDescription(RowDescription::new(fields))
}

/// Bind as pgwire does it (the portal made from the named statement and stored), answered with
/// BindComplete left in the buffer.
///
/// # Errors
/// No such statement, parameters that do not fit it, or the client's connection failed.
pub(super) async fn bind<C, S>(client: &mut C, message: Bind) -> PgWireResult<()>
where
    C: ClientPortalStore + Sink<PgWireBackendMessage> + Unpin,
    C::PortalStore: PortalStore<Statement = S>,
    S: Clone,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    let name = message.statement_name.as_deref().unwrap_or(DEFAULT_NAME);
    let Some(statement) = client.portal_store().get_statement(name) else {
        return Err(PgWireError::StatementNotFound(name.to_owned()));
    };
    let portal = Portal::try_new(&message, statement)?;
    client.portal_store().put_portal(Arc::new(portal));
    client
        .feed(PgWireBackendMessage::BindComplete(BindComplete::new()))
        .await?;
    Ok(())
}
