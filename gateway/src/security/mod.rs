//! Who may connect and what they may see.
//!
//! - [`auth`] — users, SCRAM verifiers, Flight bearer tokens, HTTP basic auth.
//! - [`access`] — `[[access]]` rules — the tables and routing groups a user may use (42501).
//! - [`mask`] — `[[mask]]` rules — columns a user sees only hashed.
//! - [`limits`] — connection limits and the `[limits]` section.
//! - [`tls`] — TLS for pgwire and Flight SQL, with certificate reload.
//!
//! [`Security`] puts them together for the query path: the planner asks it once per statement.

pub mod access;
pub mod auth;
pub mod limits;
pub mod mask;
pub mod tls;

use std::sync::Arc;

use lakegate_engines::engine::Visibility;

use crate::error::Result;
use access::Access;
use auth::Auth;
use mask::{Masked, Masks};

/// The rules the query path applies to who asks.
pub struct Security {
    /// Authentication (and each user's roles).
    pub auth: Arc<Auth>,
    /// Access rules.
    pub access: Access,
    /// Column masks.
    pub masks: Masks,
    /// `[limits] max_result_bytes` (0: none).
    pub max_result_bytes: u64,
}

impl Security {
    /// Everyone may read everything, unmasked (tests, `lakegate exec`).
    pub fn open() -> Self {
        Self {
            auth: Arc::new(Auth::trust()),
            access: Access::default(),
            masks: Masks::default(),
            max_result_bytes: 0,
        }
    }

    /// `user`'s roles.
    pub fn roles(&self, user: &str) -> Vec<String> {
        self.auth.roles(user)
    }

    /// Whether `user` has `role`.
    pub fn has_role(&self, user: &str, role: &str) -> bool {
        self.auth.roles(user).iter().any(|r| r == role)
    }

    /// Checks that `user` may read `tables` in routing group `group`.
    ///
    /// # Errors
    /// [`crate::Error::PermissionDenied`] naming the first table or the group refused.
    pub fn check(
        &self,
        user: &str,
        tables: &[(String, String)],
        group: Option<&str>,
    ) -> Result<()> {
        if !self.access.enabled() {
            return Ok(());
        }
        self.access.check(user, &self.roles(user), tables, group)
    }

    /// The columns `user` sees hashed.
    pub fn masks_of(&self, user: &str) -> Masked {
        self.masks.for_user(user, &self.roles(user))
    }

    /// The lake tables `user` may see in catalog listings (`None`: all of them).
    pub fn visibility(&self, user: &str) -> Option<Visibility> {
        if !self.access.enabled() {
            return None;
        }
        let roles = self.roles(user);
        let access = self.access.clone();
        let key = format!("{user}\u{0}{}", roles.join(","));
        let user = user.to_string();
        Some(Visibility {
            key,
            allows: Arc::new(move |ns, t| access.may_read(&user, &roles, ns, t)),
        })
    }
}
