//! Startup: trust or SCRAM-SHA-256, connection limits and TLS requirement, then the session
//! made from the startup parameters (`options=-c k=v`, `application_name`, ...) and the
//! settings clients track reported as ParameterStatus.

use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use futures::{Sink, SinkExt};
use lakegate_engines::ErrorKind;
use pgwire::api::auth::noop::NoopStartupHandler;
use pgwire::api::auth::sasl::SASLAuthStartupHandler;
use pgwire::api::auth::sasl::scram::ScramAuth;
use pgwire::api::auth::{DefaultServerParameterProvider, StartupHandler};
use pgwire::api::{ClientInfo, ConnectionManager, PgWireConnectionState};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::PgWireBackendMessage;
use pgwire::messages::startup::ParameterStatus;
use tokio::sync::Mutex;

use super::cancel::{Cancels, QueryCancel};
use super::handler::SessionCell;
use super::idle::Activity;
use super::sqlstate::sqlstate;
use crate::service::Frontend;
use crate::session::{Session, reported_name};

/// One connection's startup: trust (the session opens at once) or SCRAM-SHA-256 against the
/// configured users (the session opens once the exchange succeeds); failures are counted.
pub struct ConnStartup {
    session: Arc<PgStartup>,
    auth: Arc<crate::security::auth::Auth>,
    limits: Arc<crate::security::limits::ConnectionLimits>,
    require_tls: bool,
    scram: Option<SASLAuthStartupHandler<DefaultServerParameterProvider>>,
    /// The connection's activity, watched for the idle-in-transaction timeout.
    activity: Arc<Activity>,
}

impl ConnStartup {
    pub(super) fn new(
        session: Arc<PgStartup>,
        auth: Arc<crate::security::auth::Auth>,
        limits: Arc<crate::security::limits::ConnectionLimits>,
        require_tls: bool,
        activity: Arc<Activity>,
    ) -> Self {
        let scram = auth.required().then(|| {
            let mut scram = ScramAuth::new(auth.clone());
            scram.set_iterations(crate::security::auth::ITERATIONS);
            SASLAuthStartupHandler::new(Arc::new(DefaultServerParameterProvider::default()))
                .with_scram(scram)
                .with_connection_manager(session.connections.clone())
        });
        Self {
            session,
            auth,
            limits,
            require_tls,
            scram,
            activity,
        }
    }
}

#[async_trait]
impl StartupHandler for ConnStartup {
    async fn on_startup<C>(
        &self,
        client: &mut C,
        message: pgwire::messages::PgWireFrontendMessage,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if let pgwire::messages::PgWireFrontendMessage::Startup(startup) = &message {
            if self.require_tls && !client.is_secure() {
                return Err(PgWireError::UserError(Box::new(ErrorInfo::new(
                    "FATAL".into(),
                    "28000".into(),
                    "this server requires TLS (tls.require): connect with sslmode=require or \
                     stronger"
                        .into(),
                ))));
            }
            // Held in the connection's extensions: released when the connection goes.
            let user = startup.parameters.get("user").cloned().unwrap_or_default();
            let slot = self.limits.acquire(&user).map_err(|why| {
                PgWireError::UserError(Box::new(ErrorInfo::new(
                    "FATAL".into(),
                    sqlstate(ErrorKind::TooManyQueries).into(),
                    why,
                )))
            })?;
            client.session_extensions().insert(slot);
            self.activity.set_tls(client.is_secure());
            client.session_extensions().insert(self.activity.clone());
        }
        let Some(scram) = &self.scram else {
            return self.session.on_startup(client, message).await;
        };
        match scram.on_startup(client, message).await {
            Ok(()) => {
                if matches!(client.state(), PgWireConnectionState::ReadyForQuery)
                    && client.session_extensions().get::<SessionCell>().is_none()
                {
                    self.session.open_session(client).await?;
                    client.flush().await?;
                }
                Ok(())
            }
            Err(PgWireError::InvalidPassword(_)) => {
                // PostgreSQL's wording, 28P01, with the user named as the client gave it:
                // the same answer for an unknown user and a wrong password.
                self.auth.failed();
                let user = client.metadata().get("user").cloned().unwrap_or_default();
                tracing::info!(%user, "login failed");
                Err(PgWireError::InvalidPassword(user))
            }
            Err(e) => Err(e),
        }
    }
}

/// Startup: creates the session from the startup parameters and reports settings.
pub struct PgStartup {
    pub(super) connections: Arc<ConnectionManager>,
    pub(super) cancels: Arc<Cancels>,
    pub(super) default_schema: String,
    /// `[limits] idle_in_transaction_timeout`: each session's starting value.
    pub(super) idle_in_transaction: std::time::Duration,
    /// `[limits] statement_timeout`: each session's starting value.
    pub(super) statement_timeout: std::time::Duration,
}

/// Startup parameters that are connection facts, not settings.
const NOT_SETTINGS: [&str; 4] = ["user", "database", "options", "replication"];

/// `-c name=value` / `--name=value` pairs from the `options` startup parameter.
pub(crate) fn parse_options(options: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut words = options.split_whitespace();
    while let Some(w) = words.next() {
        let pair = if w == "-c" {
            words.next()
        } else if let Some(rest) = w.strip_prefix("-c") {
            Some(rest)
        } else {
            w.strip_prefix("--")
        };
        if let Some((k, v)) = pair.and_then(|p| p.split_once('=')) {
            out.push((k.replace('-', "_"), v.to_string()));
        }
    }
    out
}

#[async_trait]
impl NoopStartupHandler for PgStartup {
    fn connection_manager(&self) -> Option<Arc<ConnectionManager>> {
        Some(self.connections.clone())
    }

    async fn post_startup<C>(
        &self,
        client: &mut C,
        _message: pgwire::messages::PgWireFrontendMessage,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        self.open_session(client).await
    }
}

impl PgStartup {
    /// Creates the session from the startup parameters (the user is the authenticated one)
    /// and reports the settings clients track.
    async fn open_session<C>(&self, client: &mut C) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let metadata = client.metadata().clone();
        let user = metadata
            .get("user")
            .cloned()
            .unwrap_or_else(|| "lakegate".into());
        // The server's default first: the client's own parameters override it.
        let mut startup: Vec<(String, String)> = vec![
            (
                "idle_in_transaction_session_timeout".into(),
                self.idle_in_transaction.as_millis().to_string(),
            ),
            (
                "statement_timeout".into(),
                self.statement_timeout.as_millis().to_string(),
            ),
        ];
        startup.extend(
            metadata
                .iter()
                .filter(|(k, _)| !NOT_SETTINGS.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone())),
        );
        if let Some(options) = metadata.get("options") {
            startup.extend(parse_options(options));
        }
        // As PostgreSQL: without a database name the user's name is the database's.
        let database = metadata
            .get("database")
            .cloned()
            .unwrap_or_else(|| user.clone());
        let mut session = Session::new(&user, &self.default_schema)
            .with_frontend(Frontend::Pg)
            .with_database(&database);
        session.apply_startup(&startup).map_err(|e| {
            PgWireError::UserError(Box::new(ErrorInfo::new(
                "FATAL".into(),
                sqlstate(e.kind()).into(),
                e.to_string(),
            )))
        })?;
        let mut report: Vec<(String, String)> = vec![
            (
                "server_version".into(),
                format!(
                    "{} (lakegate {})",
                    lakegate_engines::system_catalog::server_version(),
                    env!("CARGO_PKG_VERSION")
                ),
            ),
            ("is_superuser".into(), "off".into()),
        ];
        for (name, value) in session.values() {
            if let Some(reported) = reported_name(name) {
                report.push((reported.to_string(), value.clone()));
            }
        }
        for (name, value) in report {
            client
                .feed(PgWireBackendMessage::ParameterStatus(ParameterStatus::new(
                    name, value,
                )))
                .await?;
        }
        client
            .session_extensions()
            .insert::<SessionCell>(Mutex::new(session));
        let (pid, secret) = client.pid_and_secret_key();
        let cancel = self.cancels.register(pid, secret);
        client
            .session_extensions()
            .insert::<Arc<QueryCancel>>(cancel);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn startup_options_are_parsed_like_postgres() {
        let got =
            parse_options("-c lakegate.engine=duckdb -csearch_path=sales --statement-timeout=5s");
        assert_eq!(
            got,
            vec![
                ("lakegate.engine".to_string(), "duckdb".to_string()),
                ("search_path".to_string(), "sales".to_string()),
                ("statement_timeout".to_string(), "5s".to_string()),
            ]
        );
    }
}
