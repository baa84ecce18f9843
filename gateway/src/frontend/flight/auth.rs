//! Flight SQL authentication: with users configured, every call but the handshake needs a
//! live bearer token (the handshake itself checks basic auth and issues one); the verified user
//! is passed on in [`USER_HEADER`], and a client's own value of that header is removed.

use std::pin::Pin;
use std::sync::Arc;

use tonic::Status;

use crate::security::auth::Auth;

/// Set by [`AuthGate`] to the authenticated user (a client's own value is removed).
pub const USER_HEADER: &str = "x-lakegate-authenticated-user";

/// Checks every Flight call but the handshake for a live bearer token when users are
/// configured (the handshake itself checks basic auth), and passes the user on.
#[derive(Clone)]
pub(super) struct AuthGate<S> {
    inner: S,
    auth: Arc<Auth>,
}

impl<S> AuthGate<S> {
    /// The gate in front of `inner`.
    pub(super) fn new(inner: S, auth: Arc<Auth>) -> Self {
        Self { inner, auth }
    }
}

impl<S, B> tower::Service<http::Request<B>> for AuthGate<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<tonic::body::Body>>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future =
        Pin<Box<dyn std::future::Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<B>) -> Self::Future {
        req.headers_mut().remove(USER_HEADER);
        if self.auth.required() && !req.uri().path().ends_with("/Handshake") {
            let user = req
                .headers()
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .and_then(|t| self.auth.check_token(t.trim()));
            match user.and_then(|u| http::HeaderValue::from_str(&u).ok()) {
                Some(u) => {
                    req.headers_mut().insert(USER_HEADER, u);
                }
                None => {
                    let denied = Status::unauthenticated(
                        "missing, unknown or expired bearer token: authenticate with a handshake \
                         (basic auth) first",
                    );
                    return Box::pin(async move { Ok(denied.into_http()) });
                }
            }
        }
        // The clone is the one that was made ready; keep the ready one for this call.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        Box::pin(async move { inner.call(req).await })
    }
}
