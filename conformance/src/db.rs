//! One PostgreSQL-protocol connection as a sqllogictest database: the statement is described
//! first (Parse/Describe: the column types a driver sees), then run with the simple protocol
//! (the text `psql` shows). PostgreSQL and lakegate are driven the same way.

use sqllogictest::{AsyncDB, ColumnType, DBOutput};
use tokio_postgres::types::Type;
use tokio_postgres::{Client, NoTls, SimpleQueryMessage};

/// A result column's type, by what a client can tell apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PgColumn {
    /// `I`: smallint, integer, bigint.
    Integer,
    /// `N`: numeric.
    Numeric,
    /// `F`: real, double precision.
    Float,
    /// `T`: text, varchar, char, name.
    Text,
    /// `B`: boolean.
    Boolean,
    /// `D`: date.
    Date,
    /// `S`: timestamp without time zone.
    Timestamp,
    /// `Z`: timestamp with time zone.
    TimestampTz,
    /// `M`: time.
    Time,
    /// `V`: interval.
    Interval,
    /// `?`: anything else (arrays, bytea, uuid, ...).
    Other,
}

impl PgColumn {
    fn of(t: &Type) -> Self {
        match *t {
            Type::INT2 | Type::INT4 | Type::INT8 | Type::OID => Self::Integer,
            Type::NUMERIC => Self::Numeric,
            Type::FLOAT4 | Type::FLOAT8 => Self::Float,
            Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::CHAR => Self::Text,
            Type::BOOL => Self::Boolean,
            Type::DATE => Self::Date,
            Type::TIMESTAMP => Self::Timestamp,
            Type::TIMESTAMPTZ => Self::TimestampTz,
            Type::TIME => Self::Time,
            Type::INTERVAL => Self::Interval,
            _ => Self::Other,
        }
    }
}

impl ColumnType for PgColumn {
    fn from_char(value: char) -> Option<Self> {
        Some(match value {
            'I' => Self::Integer,
            'N' => Self::Numeric,
            'F' => Self::Float,
            'T' => Self::Text,
            'B' => Self::Boolean,
            'D' => Self::Date,
            'S' => Self::Timestamp,
            'Z' => Self::TimestampTz,
            'M' => Self::Time,
            'V' => Self::Interval,
            _ => Self::Other,
        })
    }

    fn to_char(&self) -> char {
        match self {
            Self::Integer => 'I',
            Self::Numeric => 'N',
            Self::Float => 'F',
            Self::Text => 'T',
            Self::Boolean => 'B',
            Self::Date => 'D',
            Self::Timestamp => 'S',
            Self::TimestampTz => 'Z',
            Self::Time => 'M',
            Self::Interval => 'V',
            Self::Other => '?',
        }
    }
}

/// A statement's error, with its SQLSTATE.
#[derive(Debug, thiserror::Error)]
#[error("{code}: {message}")]
pub(crate) struct DbError {
    code: String,
    message: String,
}

impl From<tokio_postgres::Error> for DbError {
    fn from(e: tokio_postgres::Error) -> Self {
        match e.as_db_error() {
            Some(db) => Self {
                code: db.code().code().to_string(),
                message: db.message().to_string(),
            },
            None => Self {
                code: "08006".into(),
                message: e.to_string(),
            },
        }
    }
}

/// A connection (to PostgreSQL, or to lakegate with an engine pinned).
pub(crate) struct PgDb {
    client: Client,
}

impl PgDb {
    /// Connects to `url`; `engine` pins lakegate's engine for the session (`auto`: routing).
    pub(crate) async fn connect(url: String, engine: Option<String>) -> Result<Self, DbError> {
        let mut config: tokio_postgres::Config = url.parse()?;
        if let Some(engine) = engine {
            config.options(format!("-c lakegate.engine={engine}"));
        }
        let (client, connection) = config.connect(NoTls).await?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                eprintln!("lakegate-slt: connection ended: {e}");
            }
        });
        Ok(Self { client })
    }
}

/// A value as sqllogictest writes it.
fn cell(v: Option<&str>) -> String {
    match v {
        None => "NULL".into(),
        Some("") => "(empty)".into(),
        Some(s) => s.to_string(),
    }
}

#[async_trait::async_trait]
impl AsyncDB for PgDb {
    type Error = DbError;
    type ColumnType = PgColumn;

    async fn run(&mut self, sql: &str) -> Result<DBOutput<PgColumn>, DbError> {
        // Described first, as drivers do; a statement that cannot be prepared (SET, ...)
        // still runs.
        let described = self.client.prepare(sql).await;
        let messages = self.client.simple_query(sql).await?;
        let types: Vec<PgColumn> = match &described {
            Ok(statement) => statement
                .columns()
                .iter()
                .map(|c| PgColumn::of(c.type_()))
                .collect(),
            Err(_) => Vec::new(),
        };
        let mut rows = Vec::new();
        let mut has_rows = !types.is_empty();
        let mut completed = 0;
        for m in messages {
            match m {
                SimpleQueryMessage::Row(row) => {
                    has_rows = true;
                    rows.push((0..row.len()).map(|i| cell(row.get(i))).collect());
                }
                SimpleQueryMessage::RowDescription(_) => has_rows = true,
                SimpleQueryMessage::CommandComplete(n) => completed = n,
                _ => {}
            }
        }
        if has_rows {
            let types = if types.is_empty() {
                vec![PgColumn::Other; rows.first().map_or(0, Vec::len)]
            } else {
                types
            };
            Ok(DBOutput::Rows { types, rows })
        } else {
            Ok(DBOutput::StatementComplete(completed))
        }
    }

    async fn shutdown(&mut self) {}

    fn engine_name(&self) -> &str {
        "postgres"
    }

    async fn sleep(dur: std::time::Duration) {
        tokio::time::sleep(dur).await;
    }

    fn error_sql_state(err: &DbError) -> Option<String> {
        Some(err.code.clone())
    }
}
