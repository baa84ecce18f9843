//! Who may connect. Users are listed in the config with a hashed secret (never the password:
//! `lakegate hash-password` makes one); pgwire verifies them with SCRAM-SHA-256, Flight SQL with
//! a basic-auth handshake that returns an expiring bearer token. Without users the gateway
//! trusts every client, but only on loopback addresses unless trust is explicitly allowed.
//! Failed logins are counted and answered the same way whether the user exists or not.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use pgwire::api::auth::sasl::scram::gen_salted_password;
use pgwire::api::auth::{AuthSource, LoginInfo, Password};
use pgwire::error::PgWireResult;
use serde::Deserialize;

use crate::error::{Error, Result};

/// PBKDF2 iterations of every verifier (pgwire's SCRAM uses one count for all users).
pub const ITERATIONS: usize = 4096;
const PREFIX: &str = "lakegate-scram-sha-256";

/// `[auth]`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// `auto` (SCRAM when users are configured, else trust on loopback), `scram` or `trust`.
    pub mode: AuthMode,
    /// Let `trust` (or `auto` without users) serve non-loopback addresses.
    pub allow_remote_trust: bool,
    /// Lifetime of Flight SQL bearer tokens.
    #[serde(with = "humantime_serde")]
    pub token_ttl: Duration,
    /// The users.
    pub users: Vec<UserConfig>,
    /// Prefixed to every value before a `[[mask]]` hashes it (so a hash cannot be looked up
    /// in a table of common values' hashes).
    pub mask_salt: String,
}

impl Default for AuthConfig {
    fn default() -> Self {
        Self {
            mode: AuthMode::Auto,
            allow_remote_trust: false,
            token_ttl: Duration::from_secs(3600),
            users: vec![],
            mask_salt: String::new(),
        }
    }
}

/// How clients are authenticated.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum AuthMode {
    /// SCRAM when users are configured, else trust (loopback only).
    #[default]
    Auto,
    /// Every client must prove a configured user's password.
    Scram,
    /// Any client, any user name.
    Trust,
}

/// `[[auth.users]]`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct UserConfig {
    /// The user name clients log in with.
    pub name: String,
    /// `lakegate-scram-sha-256$4096$<salt>$<salted password>` from `lakegate hash-password`.
    pub password: String,
    /// Roles (for access rules).
    #[serde(default)]
    pub roles: Vec<String>,
}

struct User {
    salt: Vec<u8>,
    salted: Vec<u8>,
    roles: Vec<String>,
}

/// The gateway's authenticator.
pub struct Auth {
    scram: bool,
    users: HashMap<String, User>,
    /// Per-process secret for unknown users' fake salts (so a probe cannot tell).
    secret: [u8; 32],
    token_ttl: Duration,
    tokens: Mutex<HashMap<String, (String, Instant)>>,
    /// Recently verified basic credentials (keyed by a keyed hash, never the password), so
    /// a console refreshing every 2 s does not pay the 4096-round derivation each request.
    verified: Mutex<HashMap<Vec<u8>, Instant>>,
    failures: AtomicU64,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auth")
            .field("scram", &self.scram)
            .field("users", &self.users.len())
            .finish_non_exhaustive()
    }
}

fn random_bytes<const N: usize>() -> [u8; N] {
    let mut out = [0u8; N];
    for chunk in out.chunks_mut(16) {
        let r = uuid::Uuid::new_v4().into_bytes();
        chunk.copy_from_slice(&r[..chunk.len()]);
    }
    out
}

/// The user and password of an `Authorization: Basic …` value, padded (RFC 7617) or not
/// (grpc-go's ADBC driver sends it unpadded).
pub fn basic_credentials(authorization: &str) -> Option<(String, String)> {
    let (scheme, value) = authorization.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD_NO_PAD
        .decode(value.trim().trim_end_matches('='))
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (user, password) = text.split_once(':')?;
    Some((user.to_string(), password.to_string()))
}

/// A verifier for `password` with a fresh salt.
pub fn hash_password(password: &str) -> String {
    let salt = random_bytes::<16>();
    let salted = gen_salted_password(password, &salt, ITERATIONS);
    format!(
        "{PREFIX}${ITERATIONS}${}${}",
        B64.encode(salt),
        B64.encode(salted)
    )
}

fn parse_verifier(user: &str, v: &str) -> Result<User> {
    let bad = |why: &str| Error::Config {
        setting: format!("auth.users[{user}].password"),
        reason: format!("{why}; make one with `lakegate hash-password`"),
    };
    let parts: Vec<&str> = v.split('$').collect();
    let [prefix, iterations, salt, salted] = parts.as_slice() else {
        return Err(bad(
            "not a lakegate verifier (plain-text passwords are refused)",
        ));
    };
    if *prefix != PREFIX {
        return Err(bad(
            "not a lakegate verifier (plain-text passwords are refused)",
        ));
    }
    if iterations.parse::<usize>().ok() != Some(ITERATIONS) {
        return Err(bad(&format!("iterations must be {ITERATIONS}")));
    }
    let salt = B64.decode(salt).map_err(|_| bad("salt is not base64"))?;
    let salted = B64.decode(salted).map_err(|_| bad("hash is not base64"))?;
    if salt.len() < 8 || salted.len() != 32 {
        return Err(bad("wrong salt or hash length"));
    }
    Ok(User {
        salt,
        salted,
        roles: vec![],
    })
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl Auth {
    /// The authenticator for `config`, refusing trust on non-loopback `listen` addresses unless
    /// allowed.
    ///
    /// # Errors
    /// [`Error::Config`] for bad verifiers, duplicate users, SCRAM without users, or trust
    /// exposed beyond loopback.
    pub fn from_config(config: &AuthConfig, listen: &[(&str, SocketAddr)]) -> Result<Self> {
        let mut users = HashMap::new();
        for u in &config.users {
            let mut user = parse_verifier(&u.name, &u.password)?;
            user.roles = u.roles.clone();
            if users.insert(u.name.clone(), user).is_some() {
                return Err(Error::Config {
                    setting: "auth.users".into(),
                    reason: format!("user `{}` is listed twice", u.name),
                });
            }
        }
        let scram = match config.mode {
            AuthMode::Scram if users.is_empty() => {
                return Err(Error::Config {
                    setting: "auth.mode".into(),
                    reason: "scram needs at least one [[auth.users]] entry".into(),
                });
            }
            AuthMode::Scram => true,
            AuthMode::Trust => false,
            AuthMode::Auto => !users.is_empty(),
        };
        if !scram
            && !config.allow_remote_trust
            && let Some((setting, addr)) = listen.iter().find(|(_, a)| !a.ip().is_loopback())
        {
            return Err(Error::Config {
                setting: (*setting).into(),
                reason: format!(
                    "{addr} is not a loopback address and no users are configured: add \
                     [[auth.users]] (lakegate hash-password) or set auth.allow_remote_trust"
                ),
            });
        }
        Ok(Self {
            scram,
            users,
            secret: random_bytes::<32>(),
            token_ttl: config.token_ttl,
            tokens: Mutex::new(HashMap::new()),
            verified: Mutex::new(HashMap::new()),
            failures: AtomicU64::new(0),
        })
    }

    /// Trust on loopback, no users: the default for a local gateway.
    pub fn trust() -> Self {
        Self {
            scram: false,
            users: HashMap::new(),
            secret: random_bytes::<32>(),
            token_ttl: Duration::from_secs(3600),
            tokens: Mutex::new(HashMap::new()),
            verified: Mutex::new(HashMap::new()),
            failures: AtomicU64::new(0),
        }
    }

    /// `user`'s roles (none for users not in the config).
    pub fn roles(&self, user: &str) -> Vec<String> {
        self.users
            .get(user)
            .map(|u| u.roles.clone())
            .unwrap_or_default()
    }

    /// Whether `user` is configured.
    pub fn knows(&self, user: &str) -> bool {
        self.users.contains_key(user)
    }

    /// Whether clients must prove a password.
    pub fn required(&self) -> bool {
        self.scram
    }

    /// Counts a failed login.
    pub fn failed(&self) {
        self.failures.fetch_add(1, Ordering::Relaxed);
    }

    /// Failed logins so far.
    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }

    /// Whether `password` is `user`'s (constant time; unknown users cost the same).
    pub fn verify(&self, user: &str, password: &str) -> bool {
        let (salt, expected, known) = match self.users.get(user) {
            Some(u) => (u.salt.clone(), u.salted.clone(), true),
            None => (self.fake_salt(user), vec![0u8; 32], false),
        };
        let got = gen_salted_password(password, &salt, ITERATIONS);
        let ok = constant_time_eq(&got, &expected) && known;
        if !ok {
            self.failed();
        }
        ok
    }

    /// [`Auth::verify`], remembering a success for a minute (HTTP basic auth sends the
    /// password with every request).
    pub fn verify_cached(&self, user: &str, password: &str) -> bool {
        let key = gen_salted_password(&format!("{user}\u{0}{password}"), &self.secret, 1);
        let now = Instant::now();
        {
            let verified = self.verified.lock().unwrap_or_else(|p| p.into_inner());
            if verified.get(&key).is_some_and(|until| *until > now) {
                return true;
            }
        }
        if !self.verify(user, password) {
            return false;
        }
        let mut verified = self.verified.lock().unwrap_or_else(|p| p.into_inner());
        verified.retain(|_, until| *until > now);
        verified.insert(key, now + Duration::from_secs(60));
        true
    }

    /// The user an HTTP `Authorization` header (Basic, or a Flight SQL Bearer token) proves.
    pub fn http_user(&self, authorization: &str) -> Option<String> {
        if let Some((scheme, token)) = authorization.trim().split_once(' ')
            && scheme.eq_ignore_ascii_case("bearer")
        {
            return self.check_token(token.trim());
        }
        let (user, password) = basic_credentials(authorization)?;
        self.verify_cached(&user, &password).then_some(user)
    }

    /// A bearer token for `user`, valid for the configured lifetime.
    pub fn issue_token(&self, user: &str) -> String {
        let token = B64.encode(random_bytes::<32>());
        let mut tokens = self.tokens.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        tokens.retain(|_, (_, expires)| *expires > now);
        tokens.insert(token.clone(), (user.to_string(), now + self.token_ttl));
        token
    }

    /// The user a live bearer token belongs to.
    pub fn check_token(&self, token: &str) -> Option<String> {
        let tokens = self.tokens.lock().unwrap_or_else(|p| p.into_inner());
        match tokens.get(token) {
            Some((user, expires)) if *expires > Instant::now() => Some(user.clone()),
            _ => None,
        }
    }

    fn fake_salt(&self, user: &str) -> Vec<u8> {
        // Stable per user name for this process, unrelated to any real salt.
        gen_salted_password(user, &self.secret, 1)[..16].to_vec()
    }
}

#[async_trait]
impl AuthSource for Auth {
    async fn get_password(&self, login: &LoginInfo) -> PgWireResult<Password> {
        let user = login.user().unwrap_or_default();
        Ok(match self.users.get(user) {
            Some(u) => Password::new(Some(u.salt.clone()), u.salted.clone()),
            // An unknown user gets a salt and a hash nobody can match: the exchange fails at
            // the same step, with the same message, as a wrong password.
            None => Password::new(Some(self.fake_salt(user)), random_bytes::<32>().to_vec()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_credentials_padded_or_not() {
        let padded = format!("Basic {}", B64.encode("al:pw")); // "YWw6cHc=" has padding
        assert!(padded.ends_with('='));
        let unpadded = padded.trim_end_matches('=').to_string();
        let want = Some(("al".to_string(), "pw".to_string()));
        assert_eq!(basic_credentials(&padded), want);
        assert_eq!(basic_credentials(&unpadded), want);
        assert_eq!(basic_credentials(&padded.replace("Basic", "basic")), want);
        assert_eq!(basic_credentials("Bearer abc"), None);
        assert_eq!(basic_credentials("Basic !!!"), None);
    }

    fn config(users: Vec<(&str, &str)>) -> AuthConfig {
        AuthConfig {
            users: users
                .into_iter()
                .map(|(n, p)| UserConfig {
                    name: n.into(),
                    password: hash_password(p),
                    roles: vec![],
                })
                .collect(),
            ..Default::default()
        }
    }

    fn lo() -> SocketAddr {
        "127.0.0.1:5433".parse().expect("addr")
    }

    #[test]
    fn verifiers_check_passwords_and_plain_text_is_refused() {
        let auth = Auth::from_config(&config(vec![("alice", "s3cret")]), &[("pg.listen", lo())])
            .expect("auth");
        assert!(auth.required());
        assert!(auth.verify("alice", "s3cret"));
        assert!(!auth.verify("alice", "wrong"));
        assert!(!auth.verify("mallory", "s3cret"));
        assert_eq!(auth.failures(), 2);
        let plain = AuthConfig {
            users: vec![UserConfig {
                name: "bob".into(),
                password: "hunter2".into(),
                roles: vec![],
            }],
            ..Default::default()
        };
        let err = Auth::from_config(&plain, &[]).expect_err("plain text");
        assert!(err.to_string().contains("hash-password"), "{err}");
    }

    #[test]
    fn trust_stays_on_loopback_unless_allowed() {
        let remote: SocketAddr = "0.0.0.0:5433".parse().expect("addr");
        let err = Auth::from_config(&AuthConfig::default(), &[("pg.listen", remote)])
            .expect_err("remote trust");
        assert!(err.to_string().contains("pg.listen"), "{err}");
        let allowed = AuthConfig {
            allow_remote_trust: true,
            ..Default::default()
        };
        assert!(
            !Auth::from_config(&allowed, &[("pg.listen", remote)])
                .expect("ok")
                .required()
        );
        assert!(Auth::from_config(&config(vec![("a", "b")]), &[("pg.listen", remote)]).is_ok());
    }

    #[test]
    fn tokens_expire() {
        let cfg = AuthConfig {
            token_ttl: Duration::from_millis(30),
            ..config(vec![("alice", "x")])
        };
        let auth = Auth::from_config(&cfg, &[]).expect("auth");
        let t = auth.issue_token("alice");
        assert_eq!(auth.check_token(&t).as_deref(), Some("alice"));
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(auth.check_token(&t), None);
        assert_eq!(auth.check_token("forged"), None);
    }
}
