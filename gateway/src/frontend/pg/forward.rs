//! Catalog statements answered by the PostgreSQL catalog mirror: the client's parameter
//! bytes and formats go to it as they came, its RowDescription and DataRows come back
//! untouched (PostgreSQL's type OIDs, table OIDs, attribute numbers and typmods).

use std::sync::Arc;

use futures::stream;
use pgwire::api::Type;
use pgwire::api::portal::Format;
use pgwire::api::results::{FieldFormat, FieldInfo, QueryResponse, Response};
use pgwire::messages::data::DataRow;
use postgres_types::Kind;
use tokio_util::sync::CancellationToken;

use super::idle::{Activity, Busy};
use crate::error::Result;
use crate::mirror::wire::{Bound, Column, Description};
use crate::service::catalog::Forward;
use crate::session::Session;

/// A statement prepared by Parse that the mirror answers, with the mirror's description.
#[derive(Debug, Clone)]
pub(crate) struct Mirrored {
    /// Where it goes and the SQL sent.
    pub forward: Forward,
    /// What the mirror's Parse + Describe said.
    pub description: Description,
}

/// The wire format codes of `format` (PostgreSQL's rules: none = all text, one = for all).
pub(super) fn codes(format: &Format) -> Vec<i16> {
    match format {
        Format::UnifiedText => vec![],
        Format::UnifiedBinary => vec![1],
        Format::Individual(codes) => codes.clone(),
    }
}

fn code_for(codes: &[i16], i: usize) -> i16 {
    match codes {
        [] => 0,
        [one] => *one,
        many => many.get(i).copied().unwrap_or(0),
    }
}

/// A pgwire type for a PostgreSQL OID (pgwire only sends the OID).
pub(super) fn pg_type(oid: u32) -> Type {
    Type::from_oid(oid)
        .unwrap_or_else(|| Type::new(format!("oid{oid}"), oid, Kind::Simple, "pg_catalog".into()))
}

fn field(c: &Column, code: i16) -> FieldInfo {
    let format = if code == 1 {
        FieldFormat::Binary
    } else {
        FieldFormat::Text
    };
    FieldInfo::new(
        c.name.clone(),
        Some(c.table_oid as i32),
        Some(c.column_id),
        pg_type(c.type_oid),
        format,
    )
    .with_type_size(c.type_size)
    .with_type_modifier(c.type_modifier)
}

/// The client's field descriptions for the mirror's `columns`, in the formats `format`
/// asks for.
pub(super) fn fields(columns: &[Column], format: &Format) -> Vec<FieldInfo> {
    let codes = codes(format);
    columns
        .iter()
        .enumerate()
        .map(|(i, c)| field(c, code_for(&codes, i)))
        .collect()
}

/// The connection's activity marked busy (for the idle-in-transaction timeout).
pub(super) fn busy<C: pgwire::api::ClientInfo + ?Sized>(client: &C) -> Option<Busy> {
    client
        .session_extensions()
        .get::<Arc<Activity>>()
        .map(|a| a.begin())
}

/// Runs a forwarded statement and makes its pgwire response.
pub(super) async fn run(
    forward: &Forward,
    bound: &Bound<'_>,
    session: &Session,
    cancel: &CancellationToken,
    busy: Option<Busy>,
) -> Result<Response> {
    let answer = forward
        .db
        .execute(
            &forward.sql,
            bound,
            session,
            cancel,
            forward.max_bytes,
            forward.reads_catalog,
        )
        .await?;
    if answer.columns.is_empty() {
        return Ok(Response::Execution(pgwire::api::results::Tag::new(
            answer.tag.split(' ').next().unwrap_or("SELECT"),
        )));
    }
    let fields: Vec<FieldInfo> = answer.columns.iter().map(|c| field(c, c.format)).collect();
    // The session is busy (not idle in a transaction) until the last row is sent.
    let rows = answer.rows.into_iter().map(move |r| {
        let _held = &busy;
        Ok(DataRow::new(
            bytes::BytesMut::from(r.data.as_ref()),
            r.fields,
        ))
    });
    Ok(Response::Query(QueryResponse::new(
        Arc::new(fields),
        stream::iter(rows),
    )))
}
