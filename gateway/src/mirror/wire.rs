//! A minimal PostgreSQL frontend (the client side of the wire protocol) for the catalog
//! mirror: statements are forwarded with the client's own parameter bytes and result formats,
//! and the server's RowDescription and DataRow bytes come back untouched, so what the client
//! receives is PostgreSQL's answer byte for byte. tokio-postgres cannot do this: it always
//! asks for binary results and decodes them.

use bytes::{Bytes, BytesMut};
use fallible_iterator::FallibleIterator;
use postgres_protocol::IsNull;
use postgres_protocol::authentication::md5_hash;
use postgres_protocol::authentication::sasl::{ChannelBinding, SCRAM_SHA_256, ScramSha256};
use postgres_protocol::message::backend::{ErrorResponseBody, Message};
use postgres_protocol::message::frontend;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::error::{Error, PostgresError, Result};

/// Where a mirror server listens and who to log in as.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// A Unix socket directory (`/tmp/dir`) or a TCP host.
    pub host: Host,
    /// The port (also names the socket file).
    pub port: u16,
    /// The user.
    pub user: String,
    /// The password, if the server asks for one.
    pub password: Option<String>,
    /// The database holding the mirror.
    pub database: String,
}

/// How to reach the server.
#[derive(Debug, Clone)]
pub enum Host {
    /// A TCP host name or address.
    Tcp(String),
    /// A directory holding the server's Unix socket.
    Unix(std::path::PathBuf),
}

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// One column of a result as the server described it (RowDescription).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    /// The column's name.
    pub name: String,
    /// The OID of the table it comes from (0: none).
    pub table_oid: u32,
    /// Its attribute number in that table (0: none).
    pub column_id: i16,
    /// The type's OID.
    pub type_oid: u32,
    /// `pg_type.typlen`.
    pub type_size: i16,
    /// `pg_attribute.atttypmod`.
    pub type_modifier: i32,
    /// 0 text, 1 binary.
    pub format: i16,
}

/// What Describe of a statement returns.
#[derive(Debug, Clone, Default)]
pub struct Description {
    /// The parameters' type OIDs.
    pub params: Vec<u32>,
    /// The result columns (empty for a statement without rows).
    pub columns: Vec<Column>,
}

/// One data row: its field count and the fields as the server encoded them.
#[derive(Debug, Clone)]
pub struct RawRow {
    /// How many fields.
    pub fields: i16,
    /// The fields: each an i32 length (-1 for NULL) and that many bytes.
    pub data: Bytes,
}

impl RawRow {
    /// The fields as text (for rows asked for in text format).
    pub fn text_fields(&self) -> Vec<Option<String>> {
        let mut out = Vec::new();
        let mut rest: &[u8] = &self.data;
        for _ in 0..self.fields {
            let Some((len, tail)) = rest.split_first_chunk::<4>() else {
                break;
            };
            let len = i32::from_be_bytes(*len);
            if len < 0 {
                out.push(None);
                rest = tail;
                continue;
            }
            let n = usize::try_from(len).unwrap_or(usize::MAX).min(tail.len());
            out.push(Some(String::from_utf8_lossy(&tail[..n]).into_owned()));
            rest = &tail[n..];
        }
        out
    }
}

/// The answer to one forwarded statement.
#[derive(Debug, Clone, Default)]
pub struct Answer {
    /// The result's columns, with the formats the client asked for.
    pub columns: Vec<Column>,
    /// Its rows.
    pub rows: Vec<RawRow>,
    /// The command tag (`SELECT 3`).
    pub tag: String,
}

/// The parameters and formats a client bound (Bind), passed on as they are.
#[derive(Debug, Clone)]
pub struct Bound<'a> {
    /// The parameters' type OIDs as the client declared them (0: let the server infer).
    pub types: &'a [u32],
    /// The parameters' formats (PostgreSQL's rules: none, one for all, or one each).
    pub formats: &'a [i16],
    /// The values (`None`: NULL).
    pub values: &'a [Option<Bytes>],
    /// The result formats the client asked for (same rules).
    pub result_formats: &'a [i16],
}

/// The largest answer a forwarded statement may have before it is refused when
/// `[limits] max_result_bytes` sets none (answers are collected before they are sent).
pub const MAX_ANSWER_BYTES: u64 = 64 << 20;

/// One connection to the mirror server.
pub struct Connection {
    io: Box<dyn Io>,
    read: BytesMut,
    write: BytesMut,
    /// `server_version` as the server reported it at startup.
    pub server_version: String,
    /// The settings last applied on this connection (name, value).
    pub(super) applied: Vec<(String, String)>,
    /// The server process and its secret key (BackendKeyData), for cancel requests.
    key: Option<(i32, i32)>,
}

/// Asks the server to cancel what the connection with `key` runs (a CancelRequest on a
/// connection of its own, as every PostgreSQL client does it).
///
/// # Errors
/// [`Error::CatalogMirror`] when the server cannot be reached.
pub async fn cancel(endpoint: &Endpoint, key: (i32, i32)) -> Result<()> {
    let mut message = BytesMut::new();
    frontend::cancel_request(key.0, key.1, &mut message);
    let mut io = open(endpoint).await?;
    io.write_all(&message)
        .await
        .map_err(|e| io_error("cancel", e))?;
    let _ = io.shutdown().await;
    Ok(())
}

async fn open(endpoint: &Endpoint) -> Result<Box<dyn Io>> {
    Ok(match &endpoint.host {
        Host::Unix(dir) => {
            let path = dir.join(format!(".s.PGSQL.{}", endpoint.port));
            Box::new(
                tokio::net::UnixStream::connect(&path)
                    .await
                    .map_err(|e| io_error(&format!("connect {}", path.display()), e))?,
            )
        }
        Host::Tcp(host) => {
            let stream = tokio::net::TcpStream::connect((host.as_str(), endpoint.port))
                .await
                .map_err(|e| io_error(&format!("connect {host}:{}", endpoint.port), e))?;
            let _ = stream.set_nodelay(true);
            Box::new(stream)
        }
    })
}

fn io_error(what: &str, e: impl std::fmt::Display) -> Error {
    Error::CatalogMirror {
        reason: format!("{what}: {e}"),
    }
}

impl Connection {
    /// Connects and logs in (trust, password, MD5 or SCRAM-SHA-256).
    ///
    /// # Errors
    /// [`Error::CatalogMirror`] when the server cannot be reached or refuses the login.
    pub async fn connect(endpoint: &Endpoint) -> Result<Self> {
        let io = open(endpoint).await?;
        let mut conn = Self {
            io,
            read: BytesMut::with_capacity(8192),
            write: BytesMut::with_capacity(1024),
            server_version: String::new(),
            applied: Vec::new(),
            key: None,
        };
        conn.startup(endpoint).await?;
        Ok(conn)
    }

    async fn startup(&mut self, endpoint: &Endpoint) -> Result<()> {
        let params = [
            ("user", endpoint.user.as_str()),
            ("database", endpoint.database.as_str()),
            ("client_encoding", "UTF8"),
            ("application_name", "lakegate catalog mirror"),
        ];
        frontend::startup_message(params, &mut self.write).map_err(|e| io_error("startup", e))?;
        self.flush().await?;
        let password = || {
            endpoint
                .password
                .clone()
                .ok_or_else(|| Error::CatalogMirror {
                    reason: "the server asks for a password and the URI has none".into(),
                })
        };
        let mut scram: Option<ScramSha256> = None;
        loop {
            match self.next().await? {
                Message::AuthenticationOk | Message::NoticeResponse(_) => {}
                Message::BackendKeyData(body) => {
                    self.key = Some((body.process_id(), body.secret_key()));
                }
                Message::AuthenticationCleartextPassword => {
                    let pw = password()?;
                    frontend::password_message(pw.as_bytes(), &mut self.write)
                        .map_err(|e| io_error("password", e))?;
                    self.flush().await?;
                }
                Message::AuthenticationMd5Password(body) => {
                    let pw = password()?;
                    let hash = md5_hash(endpoint.user.as_bytes(), pw.as_bytes(), body.salt());
                    frontend::password_message(hash.as_bytes(), &mut self.write)
                        .map_err(|e| io_error("password", e))?;
                    self.flush().await?;
                }
                Message::AuthenticationSasl(body) => {
                    let mut mechanisms = body.mechanisms();
                    let mut offered = false;
                    while let Some(m) = mechanisms.next().map_err(|e| io_error("sasl", e))? {
                        offered |= m == SCRAM_SHA_256;
                    }
                    if !offered {
                        return Err(io_error("login", "no SASL mechanism lakegate supports"));
                    }
                    let pw = password()?;
                    let s = ScramSha256::new(pw.as_bytes(), ChannelBinding::unsupported());
                    frontend::sasl_initial_response(SCRAM_SHA_256, s.message(), &mut self.write)
                        .map_err(|e| io_error("sasl", e))?;
                    scram = Some(s);
                    self.flush().await?;
                }
                Message::AuthenticationSaslContinue(body) => {
                    let s = scram
                        .as_mut()
                        .ok_or_else(|| io_error("sasl", "continue before start"))?;
                    s.update(body.data()).map_err(|e| io_error("sasl", e))?;
                    frontend::sasl_response(s.message(), &mut self.write)
                        .map_err(|e| io_error("sasl", e))?;
                    self.flush().await?;
                }
                Message::AuthenticationSaslFinal(body) => {
                    let s = scram
                        .as_mut()
                        .ok_or_else(|| io_error("sasl", "final before start"))?;
                    s.finish(body.data()).map_err(|e| io_error("sasl", e))?;
                }
                Message::ParameterStatus(p) => {
                    if p.name().ok() == Some("server_version") {
                        self.server_version = p.value().unwrap_or_default().to_string();
                    }
                }
                Message::ReadyForQuery(_) => return Ok(()),
                Message::ErrorResponse(body) => {
                    let e = postgres_error(&body);
                    return Err(io_error("login", e.message));
                }
                _ => return Err(io_error("login", "unexpected message")),
            }
        }
    }

    /// The key a cancel request for this connection needs.
    pub fn cancel_key(&self) -> Option<(i32, i32)> {
        self.key
    }

    async fn flush(&mut self) -> Result<()> {
        let out = self.write.split();
        self.io
            .write_all(&out)
            .await
            .map_err(|e| io_error("write", e))?;
        self.io.flush().await.map_err(|e| io_error("write", e))
    }

    async fn next(&mut self) -> Result<Message> {
        loop {
            if let Some(m) = Message::parse(&mut self.read).map_err(|e| io_error("read", e))? {
                return Ok(m);
            }
            let n = self
                .io
                .read_buf(&mut self.read)
                .await
                .map_err(|e| io_error("read", e))?;
            if n == 0 {
                return Err(io_error("read", "the server closed the connection"));
            }
        }
    }

    /// Runs statements without parameters or results through the simple protocol (settings,
    /// DDL), failing with the server's error.
    ///
    /// # Errors
    /// [`Error::Postgres`] with the server's error, [`Error::CatalogMirror`] on I/O failure.
    pub async fn simple(&mut self, sql: &str) -> Result<()> {
        frontend::query(sql, &mut self.write).map_err(|e| io_error("query", e))?;
        self.flush().await?;
        let mut failed = None;
        loop {
            match self.next().await? {
                Message::ErrorResponse(body) => failed = Some(postgres_error(&body)),
                Message::ReadyForQuery(_) => break,
                _ => {}
            }
        }
        answered(failed, ())
    }

    /// Describes `sql` as Parse + Describe of the unnamed statement.
    ///
    /// # Errors
    /// As [`Self::simple`].
    pub async fn describe(&mut self, sql: &str, types: &[u32]) -> Result<Description> {
        frontend::parse("", sql, types.iter().copied(), &mut self.write)
            .map_err(|e| io_error("parse", e))?;
        frontend::describe(b'S', "", &mut self.write).map_err(|e| io_error("describe", e))?;
        frontend::sync(&mut self.write);
        self.flush().await?;
        let mut out = Description::default();
        let mut failed = None;
        loop {
            match self.next().await? {
                Message::ParameterDescription(body) => {
                    out.params = body
                        .parameters()
                        .collect()
                        .map_err(|e| io_error("describe", e))?;
                }
                Message::RowDescription(body) => out.columns = columns(body.fields())?,
                Message::ErrorResponse(body) => failed = Some(postgres_error(&body)),
                Message::ReadyForQuery(_) => break,
                _ => {}
            }
        }
        answered(failed, out)
    }

    /// Runs `sql` with the client's bound parameters and result formats (Parse, Bind,
    /// Describe portal, Execute, Sync) and collects the answer, of at most `max_bytes`.
    ///
    /// # Errors
    /// As [`Self::simple`]; 54000 when the answer passes `max_bytes`.
    pub async fn execute(
        &mut self,
        sql: &str,
        bound: &Bound<'_>,
        max_bytes: u64,
    ) -> Result<Answer> {
        frontend::parse("", sql, bound.types.iter().copied(), &mut self.write)
            .map_err(|e| io_error("parse", e))?;
        frontend::bind(
            "",
            "",
            bound.formats.iter().copied(),
            bound.values.iter(),
            |v, buf| match v {
                Some(bytes) => {
                    buf.extend_from_slice(bytes);
                    Ok(IsNull::No)
                }
                None => Ok(IsNull::Yes),
            },
            bound.result_formats.iter().copied(),
            &mut self.write,
        )
        .map_err(|e| match e {
            frontend::BindError::Conversion(e) => io_error("bind", e),
            frontend::BindError::Serialization(e) => io_error("bind", e),
        })?;
        frontend::describe(b'P', "", &mut self.write).map_err(|e| io_error("describe", e))?;
        frontend::execute("", 0, &mut self.write).map_err(|e| io_error("execute", e))?;
        frontend::sync(&mut self.write);
        self.flush().await?;
        let mut out = Answer::default();
        let mut failed = None;
        let mut bytes = 0u64;
        loop {
            match self.next().await? {
                Message::RowDescription(body) => out.columns = columns(body.fields())?,
                Message::DataRow(body) => {
                    bytes += body.buffer().len() as u64;
                    if bytes > max_bytes {
                        failed.get_or_insert(PostgresError::new(
                            "54000",
                            &format!(
                                "the result passed the max_result_bytes limit ({}): select \
                                 fewer columns or rows, or aggregate",
                                lakegate_engines::units::human_bytes(max_bytes)
                            ),
                        ));
                        continue;
                    }
                    let fields = i16::try_from(body.ranges().count().unwrap_or(0)).unwrap_or(0);
                    out.rows.push(RawRow {
                        fields,
                        data: body.buffer_bytes().clone(),
                    });
                }
                Message::CommandComplete(body) => {
                    out.tag = body.tag().unwrap_or_default().to_string();
                }
                Message::EmptyQueryResponse => out.tag.clear(),
                Message::ErrorResponse(body) => {
                    failed.get_or_insert(postgres_error(&body));
                }
                Message::ReadyForQuery(_) => break,
                _ => {}
            }
        }
        answered(failed, out)
    }
}

fn columns<'a>(
    mut fields: impl FallibleIterator<
        Item = postgres_protocol::message::backend::Field<'a>,
        Error = std::io::Error,
    >,
) -> Result<Vec<Column>> {
    let mut out = Vec::new();
    while let Some(f) = fields.next().map_err(|e| io_error("row description", e))? {
        out.push(Column {
            name: f.name().to_string(),
            table_oid: f.table_oid(),
            column_id: f.column_id(),
            type_oid: f.type_oid(),
            type_size: f.type_size(),
            type_modifier: f.type_modifier(),
            format: f.format(),
        });
    }
    Ok(out)
}

/// `out`, unless the server sent an ErrorResponse on the way.
fn answered<T>(failed: Option<PostgresError>, out: T) -> Result<T> {
    match failed {
        Some(e) => Err(Error::Postgres(Box::new(e))),
        None => Ok(out),
    }
}

/// The fields of a server's ErrorResponse a client sees.
fn postgres_error(body: &ErrorResponseBody) -> PostgresError {
    let mut e = PostgresError::new("XX000", "");
    let mut fields = body.fields();
    while let Ok(Some(f)) = fields.next() {
        let value = String::from_utf8_lossy(f.value_bytes()).into_owned();
        match f.type_() {
            b'S' => e.severity = value,
            b'C' => e.code = value,
            b'M' => e.message = value,
            b'D' => e.detail = Some(value),
            b'H' => e.hint = Some(value),
            b'P' => e.position = Some(value),
            _ => {}
        }
    }
    e
}
