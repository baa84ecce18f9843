//! TLS for the Postgres endpoint (SSLRequest and PostgreSQL 17's direct SSL, ALPN
//! `postgresql`) and the Flight SQL endpoint (gRPC over TLS, ALPN `h2`): rustls acceptors whose
//! certificate and key are re-read from their files when they change, so a renewed
//! certificate is served without a restart.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use serde::Deserialize;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::crypto::ring::sign::any_supported_type;
use tokio_rustls::rustls::server::{ClientHello, ResolvesServerCert};
use tokio_rustls::rustls::sign::CertifiedKey;
use tokio_rustls::rustls::{self, ServerConfig};

use crate::error::{Error, Result};

/// `[tls]`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct TlsConfig {
    /// PEM certificate chain (empty: no TLS).
    pub cert: String,
    /// PEM private key.
    pub key: String,
    /// Refuse pgwire clients that do not use TLS.
    pub require: bool,
    /// Serve Flight SQL over TLS too (`grpc+tls://`), the only way it is then served
    /// (default true when a certificate is configured).
    pub flight: bool,
}

impl Default for TlsConfig {
    fn default() -> Self {
        Self {
            cert: String::new(),
            key: String::new(),
            require: false,
            flight: true,
        }
    }
}

/// The application protocol an acceptor negotiates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alpn {
    /// PostgreSQL 17 direct SSL asks for `postgresql`.
    Postgres,
    /// gRPC runs on HTTP/2: `h2`.
    Http2,
}

/// How often the files' modification times are checked.
const CHECK_EVERY: Duration = Duration::from_secs(1);

fn load(cert: &Path, key: &Path) -> Result<Arc<CertifiedKey>> {
    let bad = |setting: &str, reason: String| Error::Config {
        setting: setting.into(),
        reason,
    };
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| bad("tls.cert", format!("{}: {e}", cert.display())))?
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| bad("tls.cert", format!("{}: {e}", cert.display())))?;
    if chain.is_empty() {
        return Err(bad(
            "tls.cert",
            format!("{}: no certificate", cert.display()),
        ));
    }
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| bad("tls.key", format!("{}: {e}", key.display())))?;
    let signer = any_supported_type(&key).map_err(|e| bad("tls.key", e.to_string()))?;
    Ok(Arc::new(CertifiedKey::new(chain, signer)))
}

fn modified(p: &Path) -> Option<SystemTime> {
    std::fs::metadata(p).and_then(|m| m.modified()).ok()
}

/// The certificate served, the files' modification times it was read at, and the last check.
#[derive(Debug)]
struct Loaded {
    key: Arc<CertifiedKey>,
    cert_mtime: Option<SystemTime>,
    key_mtime: Option<SystemTime>,
    checked: Instant,
}

/// The current certificate, reloaded when its files change (a bad new pair keeps the old one).
#[derive(Debug)]
struct Reloading {
    cert: PathBuf,
    key: PathBuf,
    state: Mutex<Loaded>,
}

impl ResolvesServerCert for Reloading {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if state.checked.elapsed() >= CHECK_EVERY {
            state.checked = Instant::now();
            let (c, k) = (modified(&self.cert), modified(&self.key));
            if (c, k) != (state.cert_mtime, state.key_mtime) {
                match load(&self.cert, &self.key) {
                    Ok(fresh) => {
                        tracing::info!(cert = %self.cert.display(), "TLS certificate reloaded");
                        *state = Loaded {
                            key: fresh,
                            cert_mtime: c,
                            key_mtime: k,
                            checked: Instant::now(),
                        };
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "TLS certificate not reloaded; keeping the old one")
                    }
                }
            }
        }
        Some(state.key.clone())
    }
}

/// The acceptor for `config` speaking `alpn`, or `None` when no certificate is configured
/// (or, for Flight SQL, when `tls.flight` is off).
///
/// # Errors
/// Unreadable or invalid certificate or key files; `require` without a certificate.
pub fn acceptor(config: &TlsConfig, alpn: Alpn) -> Result<Option<TlsAcceptor>> {
    if alpn == Alpn::Http2 && !config.flight {
        return Ok(None);
    }
    if config.cert.is_empty() {
        if config.require {
            return Err(Error::Config {
                setting: "tls.require".into(),
                reason: "requires tls.cert and tls.key".into(),
            });
        }
        return Ok(None);
    }
    let (cert, key) = (PathBuf::from(&config.cert), PathBuf::from(&config.key));
    let first = load(&cert, &key)?;
    let resolver = Reloading {
        state: Mutex::new(Loaded {
            key: first,
            cert_mtime: modified(&cert),
            key_mtime: modified(&key),
            checked: Instant::now(),
        }),
        cert,
        key,
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut server = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Config {
            setting: "tls".into(),
            reason: e.to_string(),
        })?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(resolver));
    server.alpn_protocols = vec![match alpn {
        Alpn::Postgres => b"postgresql".to_vec(),
        Alpn::Http2 => b"h2".to_vec(),
    }];
    Ok(Some(TlsAcceptor::from(Arc::new(server))))
}
