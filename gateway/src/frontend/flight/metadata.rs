//! What Flight SQL clients ask before they query: SqlInfo, XDBC type info, primary/foreign
//! keys (none: Iceberg tables have no keys lakegate can vouch for), and the shapes shared by
//! the commands (FlightInfo, IPC schemas, parameters bound by DoPut, `?` placeholders).

use std::pin::Pin;
use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::sql::metadata::{
    SqlInfoData, SqlInfoDataBuilder, XdbcTypeInfo, XdbcTypeInfoData, XdbcTypeInfoDataBuilder,
};
use arrow_flight::sql::{Nullable, ProstMessageExt, Searchable, SqlInfo, XdbcDataType};
use arrow_flight::{FlightDescriptor, FlightEndpoint, FlightInfo, IpcMessage, SchemaAsIpc, Ticket};
use datafusion::common::ParamValues;
use datafusion::scalar::ScalarValue;
use futures::{Stream, TryStreamExt};
use lakegate_engines::engine::Described;
use prost::Message;
use tonic::{Response, Status};

use crate::error::{Error, Result};

/// What DoGet streams.
pub type DoGetStream = Pin<Box<dyn Stream<Item = Result<arrow_flight::FlightData, Status>> + Send>>;

/// The server's SqlInfo and XDBC type tables (static).
pub fn static_tables() -> Result<(SqlInfoData, XdbcTypeInfoData)> {
    let mut info = SqlInfoDataBuilder::new();
    info.append(SqlInfo::FlightSqlServerName, "lakegate");
    info.append(SqlInfo::FlightSqlServerVersion, env!("CARGO_PKG_VERSION"));
    info.append(SqlInfo::FlightSqlServerArrowVersion, "58");
    info.append(SqlInfo::FlightSqlServerReadOnly, true);
    info.append(SqlInfo::FlightSqlServerSql, true);
    info.append(SqlInfo::FlightSqlServerSubstrait, false);
    info.append(SqlInfo::FlightSqlServerTransaction, 0i32);
    info.append(SqlInfo::FlightSqlServerCancel, false);
    info.append(SqlInfo::SqlDdlCatalog, false);
    info.append(SqlInfo::SqlDdlSchema, false);
    info.append(SqlInfo::SqlDdlTable, false);
    info.append(SqlInfo::SqlIdentifierQuoteChar, "\"");
    info.append(SqlInfo::SqlIdentifierCase, 1i32); // case-insensitive, as PostgreSQL folds
    info.append(SqlInfo::SqlQuotedIdentifierCase, 3i32); // case-sensitive
    info.append(SqlInfo::SqlSchemaTerm, "schema");
    info.append(SqlInfo::SqlCatalogTerm, "database");
    info.append(SqlInfo::SqlSupportsColumnAliasing, true);
    let sql_info = info.build().map_err(|e| Error::Unsupported {
        what: e.to_string(),
    })?;
    let mut xdbc = XdbcTypeInfoDataBuilder::new();
    for (name, t) in [
        ("boolean", XdbcDataType::XdbcBit),
        ("smallint", XdbcDataType::XdbcSmallint),
        ("integer", XdbcDataType::XdbcInteger),
        ("bigint", XdbcDataType::XdbcBigint),
        ("real", XdbcDataType::XdbcFloat),
        ("double precision", XdbcDataType::XdbcDouble),
        ("numeric", XdbcDataType::XdbcDecimal),
        ("text", XdbcDataType::XdbcVarchar),
        ("bytea", XdbcDataType::XdbcBinary),
        ("date", XdbcDataType::XdbcDate),
        ("time", XdbcDataType::XdbcTime),
        ("timestamp", XdbcDataType::XdbcTimestamp),
    ] {
        xdbc.append(XdbcTypeInfo {
            type_name: name.into(),
            data_type: t,
            nullable: Nullable::NullabilityNullable,
            case_sensitive: t == XdbcDataType::XdbcVarchar,
            searchable: Searchable::Full,
            local_type_name: Some(name.into()),
            sql_data_type: t,
            ..Default::default()
        });
    }
    let xdbc = xdbc.build().map_err(|e| Error::Unsupported {
        what: e.to_string(),
    })?;
    Ok((sql_info, xdbc))
}

/// An internal error as a status.
pub fn internal(e: impl std::fmt::Display) -> Status {
    Status::internal(e.to_string())
}

/// Batches in memory as a DoGet response.
pub fn batches_response(schema: SchemaRef, batches: Vec<RecordBatch>) -> Response<DoGetStream> {
    let stream = futures::stream::iter(batches.into_iter().map(Ok));
    let encoded = FlightDataEncoderBuilder::new()
        .with_schema(schema)
        .build(stream)
        .map_err(|e| Status::internal(e.to_string()));
    Response::new(Box::pin(encoded))
}

/// A FlightInfo with `schema` and one endpoint serving `ticket`.
pub fn flight_info(
    schema: &Schema,
    ticket: Vec<u8>,
    descriptor: FlightDescriptor,
) -> Result<Response<FlightInfo>, Status> {
    let info = FlightInfo::new()
        .try_with_schema(schema)
        .map_err(internal)?
        .with_endpoint(FlightEndpoint::new().with_ticket(Ticket::new(ticket)))
        .with_descriptor(descriptor);
    Ok(Response::new(info))
}

/// The FlightInfo of a metadata command: its schema, and a ticket that is the command itself.
pub fn command_info<M: ProstMessageExt>(
    schema: &Schema,
    command: &M,
    request: tonic::Request<FlightDescriptor>,
) -> Result<Response<FlightInfo>, Status> {
    flight_info(
        schema,
        command.as_any().encode_to_vec(),
        request.into_inner(),
    )
}

/// `schema` as an IPC message (prepared statements' dataset and parameter schemas).
pub fn ipc_schema(schema: &Schema) -> Result<bytes::Bytes, Status> {
    let options = arrow::ipc::writer::IpcWriteOptions::default();
    let IpcMessage(bytes) = SchemaAsIpc::new(schema, &options)
        .try_into()
        .map_err(internal)?;
    Ok(bytes)
}

/// The parameters' schema: `$1`, `$2`, … typed as described (null where unknown).
pub fn parameter_schema(described: Option<&Described>) -> Schema {
    let fields: Vec<Field> = described
        .map(|d| {
            d.param_types
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    Field::new(
                        format!("${}", i + 1),
                        t.clone().unwrap_or(DataType::Null),
                        true,
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    Schema::new(fields)
}

/// Flight SQL clients (ADBC, JDBC) write parameters as `?`; the PostgreSQL dialect numbers
/// them. Rewrites each `?` outside quotes and comments to `$1`, `$2`, ...
pub(crate) fn numbered_placeholders(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 8);
    let mut chars = sql.chars().peekable();
    let mut n = 0;
    while let Some(c) = chars.next() {
        match c {
            '\'' | '"' => {
                out.push(c);
                // copy up to the closing quote; a doubled quote is an escaped one
                while let Some(d) = chars.next() {
                    out.push(d);
                    if d == c {
                        if chars.peek() == Some(&c) {
                            out.push(c);
                            chars.next();
                        } else {
                            break;
                        }
                    }
                }
            }
            '-' if chars.peek() == Some(&'-') => {
                out.push(c);
                for d in chars.by_ref() {
                    out.push(d);
                    if d == '\n' {
                        break;
                    }
                }
            }
            '/' if chars.peek() == Some(&'*') => {
                out.push(c);
                let mut prev = ' ';
                for d in chars.by_ref() {
                    out.push(d);
                    if prev == '*' && d == '/' {
                        break;
                    }
                    prev = d;
                }
            }
            '?' => {
                n += 1;
                out.push_str(&format!("${n}"));
            }
            _ => out.push(c),
        }
    }
    out
}

/// The columns of GetPrimaryKeys (`false`) and GetImported/ExportedKeys (`true`).
pub fn keys_schema(imported_or_exported: bool) -> SchemaRef {
    let text = |n: &str, nullable| Field::new(n, DataType::Utf8, nullable);
    Arc::new(Schema::new(if imported_or_exported {
        vec![
            text("pk_catalog_name", true),
            text("pk_db_schema_name", true),
            text("pk_table_name", false),
            text("pk_column_name", false),
            text("fk_catalog_name", true),
            text("fk_db_schema_name", true),
            text("fk_table_name", false),
            text("fk_column_name", false),
            Field::new("key_sequence", DataType::Int32, false),
            text("fk_key_name", true),
            text("pk_key_name", true),
            Field::new("update_rule", DataType::UInt8, false),
            Field::new("delete_rule", DataType::UInt8, false),
        ]
    } else {
        vec![
            text("catalog_name", true),
            text("db_schema_name", true),
            text("table_name", false),
            text("column_name", false),
            Field::new("key_sequence", DataType::Int32, false),
            text("key_name", true),
        ]
    }))
}

/// Parameters bound by DoPut: the first row of the batch, cast to the planned types.
pub fn params_from_batch(
    batch: &RecordBatch,
    described: Option<&Described>,
) -> Result<ParamValues, Status> {
    if batch.num_rows() == 0 {
        return Ok(ParamValues::List(vec![]));
    }
    let mut values = Vec::with_capacity(batch.num_columns());
    for (i, column) in batch.columns().iter().enumerate() {
        let mut value = ScalarValue::try_from_array(column as &ArrayRef, 0).map_err(internal)?;
        if let Some(Some(t)) = described.and_then(|d| d.param_types.get(i))
            && value.data_type() != *t
        {
            value = value
                .cast_to(t)
                .map_err(|e| Status::invalid_argument(format!("parameter ${}: {e}", i + 1)))?;
        }
        values.push(value.into());
    }
    Ok(ParamValues::List(values))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn question_marks_become_numbered_placeholders_outside_quotes() {
        assert_eq!(
            numbered_placeholders(
                "SELECT '?', \"a?\" FROM t WHERE x = ? AND y = ? -- ?\n AND z = ?"
            ),
            "SELECT '?', \"a?\" FROM t WHERE x = $1 AND y = $2 -- ?\n AND z = $3"
        );
        assert_eq!(
            numbered_placeholders("SELECT 'it''s ?' , ?"),
            "SELECT 'it''s ?' , $1"
        );
    }
}
