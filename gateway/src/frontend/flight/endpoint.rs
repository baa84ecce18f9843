//! The gRPC Flight service lakegate serves: arrow-flight's Flight SQL dispatch for every call,
//! plus `GetSchema` of a statement or prepared statement (which arrow-flight leaves
//! unimplemented) — described through the same plan as `GetFlightInfo`, so a statement on a
//! table the caller may not read is refused (PERMISSION_DENIED) with nothing of the table.

use std::sync::Arc;

use arrow::datatypes::Schema;
use arrow_flight::flight_service_server::FlightService;
use arrow_flight::sql::{Any, Command};
use arrow_flight::{
    Action, Criteria, Empty, FlightData, FlightDescriptor, FlightInfo, HandshakeRequest, PollInfo,
    SchemaAsIpc, SchemaResult, Ticket,
};
use prost::Message;
use tonic::{Request, Response, Status, Streaming};

use super::frontend::FlightSqlFrontend;

/// The Flight service: [`FlightSqlFrontend`] behind Flight SQL's dispatch, with GetSchema.
pub struct Endpoint {
    sql: Arc<FlightSqlFrontend>,
}

impl Endpoint {
    /// The service over `sql`.
    pub fn new(sql: FlightSqlFrontend) -> Self {
        Self { sql: Arc::new(sql) }
    }

    async fn schema(&self, request: Request<FlightDescriptor>) -> Result<Schema, Status> {
        let any = Any::decode(&*request.get_ref().cmd)
            .map_err(|e| Status::invalid_argument(format!("not a Flight SQL command: {e}")))?;
        let command =
            Command::try_from(any).map_err(|e| Status::invalid_argument(e.to_string()))?;
        let described = match command {
            Command::CommandStatementQuery(q) => {
                let statement = self.sql.parse_one(&q.query)?;
                self.sql.describe(&statement, request.metadata()).await?
            }
            Command::CommandPreparedStatementQuery(p) => {
                let statement = {
                    let prepared = self.sql.prepared.lock().unwrap_or_else(|p| p.into_inner());
                    prepared
                        .get(p.prepared_statement_handle.as_ref())
                        .map(|entry| entry.statement.clone())
                        .ok_or_else(|| Status::not_found("unknown prepared statement"))?
                };
                // Described again for this caller: a handle is no way around the plan.
                self.sql.describe(&statement, request.metadata()).await?
            }
            other => {
                return Err(Status::unimplemented(format!(
                    "GetSchema of {}: ask GetFlightInfo",
                    other.type_url()
                )));
            }
        };
        Ok(described
            .map(|d| d.schema.as_ref().clone())
            .unwrap_or_else(Schema::empty))
    }
}

#[tonic::async_trait]
impl FlightService for Endpoint {
    type HandshakeStream = <FlightSqlFrontend as FlightService>::HandshakeStream;
    type ListFlightsStream = <FlightSqlFrontend as FlightService>::ListFlightsStream;
    type DoGetStream = <FlightSqlFrontend as FlightService>::DoGetStream;
    type DoPutStream = <FlightSqlFrontend as FlightService>::DoPutStream;
    type DoActionStream = <FlightSqlFrontend as FlightService>::DoActionStream;
    type ListActionsStream = <FlightSqlFrontend as FlightService>::ListActionsStream;
    type DoExchangeStream = <FlightSqlFrontend as FlightService>::DoExchangeStream;

    async fn handshake(
        &self,
        request: Request<Streaming<HandshakeRequest>>,
    ) -> Result<Response<Self::HandshakeStream>, Status> {
        FlightService::handshake(self.sql.as_ref(), request).await
    }

    async fn list_flights(
        &self,
        request: Request<Criteria>,
    ) -> Result<Response<Self::ListFlightsStream>, Status> {
        FlightService::list_flights(self.sql.as_ref(), request).await
    }

    async fn get_flight_info(
        &self,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        FlightService::get_flight_info(self.sql.as_ref(), request).await
    }

    async fn poll_flight_info(
        &self,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<PollInfo>, Status> {
        FlightService::poll_flight_info(self.sql.as_ref(), request).await
    }

    async fn get_schema(
        &self,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<SchemaResult>, Status> {
        let schema = self.schema(request).await?;
        let options = arrow::ipc::writer::IpcWriteOptions::default();
        let result: SchemaResult = SchemaAsIpc::new(&schema, &options)
            .try_into()
            .map_err(|e: arrow::error::ArrowError| Status::internal(e.to_string()))?;
        Ok(Response::new(result))
    }

    async fn do_get(
        &self,
        request: Request<Ticket>,
    ) -> Result<Response<Self::DoGetStream>, Status> {
        FlightService::do_get(self.sql.as_ref(), request).await
    }

    async fn do_put(
        &self,
        request: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoPutStream>, Status> {
        FlightService::do_put(self.sql.as_ref(), request).await
    }

    async fn do_action(
        &self,
        request: Request<Action>,
    ) -> Result<Response<Self::DoActionStream>, Status> {
        FlightService::do_action(self.sql.as_ref(), request).await
    }

    async fn list_actions(
        &self,
        request: Request<Empty>,
    ) -> Result<Response<Self::ListActionsStream>, Status> {
        FlightService::list_actions(self.sql.as_ref(), request).await
    }

    async fn do_exchange(
        &self,
        request: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoExchangeStream>, Status> {
        FlightService::do_exchange(self.sql.as_ref(), request).await
    }
}
