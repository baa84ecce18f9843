//! The Flight SQL commands: statements and prepared statements (create, bind by DoPut,
//! execute, close), and the metadata commands clients call before querying (SqlInfo, catalogs,
//! schemas, tables with their Arrow schemas, table types, XDBC type info, keys). Errors are gRPC
//! statuses with the meaning of the pgwire SQLSTATEs.

use std::pin::Pin;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::Schema;
use arrow_flight::error::FlightError;
use arrow_flight::sql::server::{FlightSqlService, PeekableFlightDataStream};
use arrow_flight::sql::{
    ActionClosePreparedStatementRequest, ActionCreatePreparedStatementRequest,
    ActionCreatePreparedStatementResult, CommandGetCatalogs, CommandGetDbSchemas,
    CommandGetExportedKeys, CommandGetImportedKeys, CommandGetPrimaryKeys, CommandGetSqlInfo,
    CommandGetTableTypes, CommandGetTables, CommandGetXdbcTypeInfo, CommandPreparedStatementQuery,
    CommandStatementQuery, CommandStatementUpdate, DoPutPreparedStatementResult, SqlInfo,
    TicketStatementQuery,
};
use arrow_flight::{FlightDescriptor, FlightInfo, HandshakeRequest, HandshakeResponse, Ticket};
use futures::{Stream, TryStreamExt};
use tonic::{Request, Response, Status, Streaming};

use super::frontend::{FlightSqlFrontend, PreparedStatement, status};
use super::metadata::{
    DoGetStream, batches_response, command_info, internal, ipc_schema, keys_schema,
    parameter_schema, params_from_batch,
};

#[tonic::async_trait]
impl FlightSqlService for FlightSqlFrontend {
    type FlightService = FlightSqlFrontend;

    async fn do_handshake(
        &self,
        request: Request<Streaming<HandshakeRequest>>,
    ) -> Result<
        Response<Pin<Box<dyn Stream<Item = Result<HandshakeResponse, Status>> + Send>>>,
        Status,
    > {
        let auth = self.auth();
        let token = if auth.required() {
            // Basic auth in the handshake's headers; the same answer for an unknown user and
            // a wrong password.
            let denied = || Status::unauthenticated("invalid user name or password");
            let (user, password) = request
                .metadata()
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .and_then(crate::security::auth::basic_credentials)
                .ok_or_else(denied)?;
            if !auth.verify(&user, &password) {
                return Err(denied());
            }
            auth.issue_token(&user)
        } else {
            // Trust (loopback): any handshake is accepted and gets a session token.
            format!("lakegate-{}", uuid::Uuid::new_v4())
        };
        let response = HandshakeResponse {
            protocol_version: 0,
            payload: token.clone().into(),
        };
        let stream = futures::stream::iter(vec![Ok(response)]);
        let mut response: Response<
            Pin<Box<dyn Stream<Item = Result<HandshakeResponse, Status>> + Send>>,
        > = Response::new(Box::pin(stream));
        if let Ok(value) = format!("Bearer {token}").parse() {
            response.metadata_mut().insert("authorization", value);
        }
        Ok(response)
    }

    async fn get_flight_info_statement(
        &self,
        query: CommandStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let statement = self.parse_one(&query.query)?;
        let schema = match self.describe(&statement, request.metadata()).await? {
            Some(d) => d.schema,
            None => Arc::new(Schema::empty()),
        };
        let ticket = TicketStatementQuery {
            statement_handle: query.query.into_bytes().into(),
        };
        command_info(&schema, &ticket, request)
    }

    async fn do_get_statement(
        &self,
        ticket: TicketStatementQuery,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        let sql = String::from_utf8(ticket.statement_handle.to_vec())
            .map_err(|_| Status::invalid_argument("statement handle is not UTF-8 SQL"))?;
        let statement = self.parse_one(&sql)?;
        self.run(&statement, None, request.metadata()).await
    }

    async fn do_put_statement_update(
        &self,
        _ticket: CommandStatementUpdate,
        _request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        Err(Status::unimplemented(
            "lakegate is a read-only gateway: updates are not supported (write through your Iceberg writer)",
        ))
    }

    async fn do_action_create_prepared_statement(
        &self,
        query: ActionCreatePreparedStatementRequest,
        request: Request<arrow_flight::Action>,
    ) -> Result<ActionCreatePreparedStatementResult, Status> {
        let statement = self.parse_one(&query.query)?;
        let described = self.describe(&statement, request.metadata()).await?;
        let dataset = described
            .as_ref()
            .map(|d| d.schema.clone())
            .unwrap_or_else(|| Arc::new(Schema::empty()));
        let result = ActionCreatePreparedStatementResult {
            prepared_statement_handle: uuid::Uuid::new_v4().as_bytes().to_vec().into(),
            dataset_schema: ipc_schema(&dataset)?,
            parameter_schema: ipc_schema(&parameter_schema(described.as_ref()))?,
        };
        let mut prepared = self.prepared.lock().unwrap_or_else(|p| p.into_inner());
        prepared.insert(
            result.prepared_statement_handle.to_vec(),
            PreparedStatement {
                statement,
                described,
                params: None,
            },
        );
        Ok(result)
    }

    async fn do_put_prepared_statement_query(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<DoPutPreparedStatementResult, Status> {
        let handle = query.prepared_statement_handle.to_vec();
        let described = {
            let prepared = self.prepared.lock().unwrap_or_else(|p| p.into_inner());
            let entry = prepared
                .get(&handle)
                .ok_or_else(|| Status::not_found("unknown prepared statement"))?;
            entry.described.clone()
        };
        let stream = request.into_inner().map_err(FlightError::from);
        let batches: Vec<RecordBatch> =
            arrow_flight::decode::FlightRecordBatchStream::new_from_flight_data(stream)
                .try_collect()
                .await
                .map_err(|e| Status::invalid_argument(format!("cannot decode parameters: {e}")))?;
        let params = match batches.first() {
            Some(batch) => Some(params_from_batch(batch, described.as_ref())?),
            None => None,
        };
        let mut prepared = self.prepared.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(entry) = prepared.get_mut(&handle) {
            entry.params = params;
        }
        Ok(DoPutPreparedStatementResult {
            prepared_statement_handle: Some(handle.into()),
        })
    }

    async fn get_flight_info_prepared_statement(
        &self,
        cmd: CommandPreparedStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = {
            let prepared = self.prepared.lock().unwrap_or_else(|p| p.into_inner());
            let entry = prepared
                .get(cmd.prepared_statement_handle.as_ref())
                .ok_or_else(|| Status::not_found("unknown prepared statement"))?;
            entry
                .described
                .as_ref()
                .map(|d| d.schema.clone())
                .unwrap_or_else(|| Arc::new(Schema::empty()))
        };
        command_info(&schema, &cmd, request)
    }

    async fn do_get_prepared_statement(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        let (statement, params) = {
            let prepared = self.prepared.lock().unwrap_or_else(|p| p.into_inner());
            let entry = prepared
                .get(query.prepared_statement_handle.as_ref())
                .ok_or_else(|| Status::not_found("unknown prepared statement"))?;
            (entry.statement.clone(), entry.params.clone())
        };
        self.run(&statement, params.as_ref(), request.metadata())
            .await
    }

    async fn do_action_close_prepared_statement(
        &self,
        query: ActionClosePreparedStatementRequest,
        _request: Request<arrow_flight::Action>,
    ) -> Result<(), Status> {
        let mut prepared = self.prepared.lock().unwrap_or_else(|p| p.into_inner());
        prepared.remove(query.prepared_statement_handle.as_ref());
        Ok(())
    }

    async fn get_flight_info_catalogs(
        &self,
        query: CommandGetCatalogs,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        command_info(&query.into_builder().schema(), &query, request)
    }

    async fn do_get_catalogs(
        &self,
        query: CommandGetCatalogs,
        _request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        let mut builder = query.into_builder();
        builder.append(&self.database);
        let batch = builder.build().map_err(internal)?;
        Ok(batches_response(batch.schema(), vec![batch]))
    }

    async fn get_flight_info_schemas(
        &self,
        query: CommandGetDbSchemas,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        command_info(&query.clone().into_builder().schema(), &query, request)
    }

    async fn do_get_schemas(
        &self,
        query: CommandGetDbSchemas,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        let mut builder = query.into_builder();
        let user = self.session(request.metadata())?.user().to_string();
        let directory = self.service.directory_for(&user).await.map_err(status)?;
        for schema in directory.schemas.keys() {
            builder.append(&self.database, schema);
        }
        let batch = builder.build().map_err(internal)?;
        Ok(batches_response(batch.schema(), vec![batch]))
    }

    async fn get_flight_info_tables(
        &self,
        query: CommandGetTables,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        command_info(&query.clone().into_builder().schema(), &query, request)
    }

    async fn do_get_tables(
        &self,
        query: CommandGetTables,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        let batch = self.tables_batch(query, request.metadata()).await?;
        Ok(batches_response(batch.schema(), vec![batch]))
    }

    async fn get_flight_info_table_types(
        &self,
        query: CommandGetTableTypes,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        command_info(&query.into_builder().schema(), &query, request)
    }

    async fn do_get_table_types(
        &self,
        query: CommandGetTableTypes,
        _request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        let mut builder = query.into_builder();
        builder.append("TABLE");
        let batch = builder.build().map_err(internal)?;
        Ok(batches_response(batch.schema(), vec![batch]))
    }

    async fn get_flight_info_sql_info(
        &self,
        query: CommandGetSqlInfo,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        command_info(
            &query.clone().into_builder(&self.sql_info).schema(),
            &query,
            request,
        )
    }

    async fn do_get_sql_info(
        &self,
        query: CommandGetSqlInfo,
        _request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        let batch = query
            .into_builder(&self.sql_info)
            .build()
            .map_err(internal)?;
        Ok(batches_response(batch.schema(), vec![batch]))
    }

    async fn get_flight_info_xdbc_type_info(
        &self,
        query: CommandGetXdbcTypeInfo,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        command_info(&query.into_builder(&self.xdbc).schema(), &query, request)
    }

    async fn do_get_xdbc_type_info(
        &self,
        query: CommandGetXdbcTypeInfo,
        _request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        let batch = query.into_builder(&self.xdbc).build().map_err(internal)?;
        Ok(batches_response(batch.schema(), vec![batch]))
    }

    async fn get_flight_info_primary_keys(
        &self,
        query: CommandGetPrimaryKeys,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        command_info(&keys_schema(false), &query, request)
    }

    async fn do_get_primary_keys(
        &self,
        _query: CommandGetPrimaryKeys,
        _request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        // Iceberg tables have no primary keys lakegate can vouch for.
        Ok(batches_response(keys_schema(false), vec![]))
    }

    async fn get_flight_info_imported_keys(
        &self,
        query: CommandGetImportedKeys,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        command_info(&keys_schema(true), &query, request)
    }

    async fn do_get_imported_keys(
        &self,
        _query: CommandGetImportedKeys,
        _request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        Ok(batches_response(keys_schema(true), vec![]))
    }

    async fn get_flight_info_exported_keys(
        &self,
        query: CommandGetExportedKeys,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        command_info(&keys_schema(true), &query, request)
    }

    async fn do_get_exported_keys(
        &self,
        _query: CommandGetExportedKeys,
        _request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        Ok(batches_response(keys_schema(true), vec![]))
    }

    async fn register_sql_info(&self, _id: i32, _result: &SqlInfo) {}
}
