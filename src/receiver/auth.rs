//! Bearer-token authentication of incoming requests, for both OTLP receivers (the
//! `bearertokenauth` extension) and the query API.
//!
//! The `Authorization` header is `<scheme> <token>`: the scheme is compared case-insensitively
//! (RFC 9110 §11.1, so `bearer`, `Bearer` and `BEARER` are one scheme), the token in constant
//! time: only the SHA-256 of each configured token is kept, and the SHA-256 of the presented one
//! is compared with every one of them without an early exit, so neither the position of the
//! first differing byte nor the configured token's length shows in the answer time.
//!
//! The check reads headers only: a request is refused before its body is read or decoded.

use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::header::AUTHORIZATION;
use sha2::{Digest, Sha256};

use crate::config::ReceiverAuthConfig;
use crate::service_error::{ServiceError, ServiceErrorCode};

/// Why a request's credentials were refused. Every variant is HTTP 401 / gRPC UNAUTHENTICATED.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// No `Authorization` header.
    #[error("missing Authorization header: send `Authorization: {expected}`")]
    Missing {
        /// What the header should look like, e.g. `Bearer <token>`.
        expected: String,
    },
    /// More than one `Authorization` header.
    #[error("more than one Authorization header: send exactly one")]
    Repeated,
    /// The header is not `<scheme> <token>` with the expected scheme.
    #[error("the Authorization header is not `{expected}`")]
    Malformed {
        /// What the header should look like.
        expected: String,
    },
    /// The token is not one of the configured tokens.
    #[error("invalid token in the Authorization header")]
    InvalidToken,
}

impl ServiceError for AuthError {
    fn error_code(&self) -> ServiceErrorCode {
        ServiceErrorCode::Unauthorized
    }
}

/// `a == b` in time that depends only on the lengths (an early exit on a length mismatch is the
/// only shortcut).
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut difference = 0u8;
    for (x, y) in a.iter().zip(b) {
        // black_box keeps the compiler from turning the loop back into an early exit.
        difference = std::hint::black_box(difference | (x ^ y));
    }
    difference == 0
}

/// A configured token; only its SHA-256 is kept (and `Debug` shows nothing of it).
#[derive(Clone)]
struct Secret([u8; 32]);

impl Secret {
    fn new(token: &[u8]) -> Self {
        Self(Sha256::digest(token).into())
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(..)")
    }
}

/// The credentials of an `Authorization` value for `scheme`: the token after `<scheme> `
/// (scheme case-insensitive, one or more spaces or tabs after it, surrounding whitespace
/// ignored); with an empty `scheme`, the whole value. `None` when the value has another scheme
/// or no token.
pub fn credentials<'v>(value: &'v [u8], scheme: &str) -> Option<&'v [u8]> {
    let value = value.trim_ascii();
    if scheme.is_empty() {
        return (!value.is_empty()).then_some(value);
    }
    let split = value.iter().position(|b| *b == b' ' || *b == b'\t')?;
    let (given, rest) = value.split_at(split);
    if !given.eq_ignore_ascii_case(scheme.as_bytes()) {
        return None;
    }
    let token = rest.trim_ascii_start();
    (!token.is_empty()).then_some(token)
}

/// Checks `Authorization` headers against a scheme and a set of accepted tokens.
#[derive(Debug, Clone)]
pub struct BearerAuth {
    scheme: String,
    tokens: Vec<Secret>,
}

impl BearerAuth {
    /// Accepts `Authorization: <scheme> <token>` for any of `tokens` (with an empty `scheme`,
    /// the bare token). With no tokens nothing is accepted.
    pub fn new<T: AsRef<[u8]>>(scheme: &str, tokens: impl IntoIterator<Item = T>) -> Self {
        Self {
            scheme: scheme.to_owned(),
            tokens: tokens
                .into_iter()
                .map(|t| Secret::new(t.as_ref()))
                .collect(),
        }
    }

    /// Accepts `Authorization: Bearer <token>`.
    pub fn bearer(token: &str) -> Self {
        Self::new(crate::config::DEFAULT_AUTH_SCHEME, [token])
    }

    /// The authenticator a receiver's `auth` block describes.
    pub fn from_config(config: &ReceiverAuthConfig) -> Self {
        Self::new(&config.scheme, &config.tokens)
    }

    /// The scheme, for `WWW-Authenticate` (empty when the header holds the bare token).
    pub fn scheme(&self) -> &str {
        &self.scheme
    }

    /// Whether `token` is one of the accepted tokens, in constant time.
    pub fn accepts(&self, token: &[u8]) -> bool {
        let presented = Secret::new(token);
        // Every configured token is compared, so the answer time does not say which matched.
        self.tokens.iter().fold(false, |found, secret| {
            found | constant_time_eq(&secret.0, &presented.0)
        })
    }

    /// Checks the request's `Authorization` header.
    pub fn check(&self, headers: &http::HeaderMap) -> Result<(), AuthError> {
        let expected = || {
            if self.scheme.is_empty() {
                "<token>".to_owned()
            } else {
                format!("{} <token>", self.scheme)
            }
        };
        let mut values = headers.get_all(AUTHORIZATION).iter();
        let value = values.next().ok_or_else(|| AuthError::Missing {
            expected: expected(),
        })?;
        if values.next().is_some() {
            return Err(AuthError::Repeated);
        }
        let token =
            credentials(value.as_bytes(), &self.scheme).ok_or_else(|| AuthError::Malformed {
                expected: expected(),
            })?;
        if self.accepts(token) {
            Ok(())
        } else {
            Err(AuthError::InvalidToken)
        }
    }
}

/// A tower layer for the gRPC server that answers UNAUTHENTICATED, before the request body is
/// read, when `auth` is set and the request's `Authorization` metadata does not pass it.
#[derive(Debug, Clone, Default)]
pub(crate) struct GrpcAuthLayer {
    auth: Option<Arc<BearerAuth>>,
}

impl GrpcAuthLayer {
    /// A layer checking `auth`; `None` lets every request through.
    pub(crate) fn new(auth: Option<Arc<BearerAuth>>) -> Self {
        Self { auth }
    }
}

impl<S> tower::Layer<S> for GrpcAuthLayer {
    type Service = GrpcAuth<S>;

    fn layer(&self, inner: S) -> Self::Service {
        GrpcAuth {
            inner,
            auth: self.auth.clone(),
        }
    }
}

/// The service made by [`GrpcAuthLayer`].
#[derive(Debug, Clone)]
pub(crate) struct GrpcAuth<S> {
    inner: S,
    auth: Option<Arc<BearerAuth>>,
}

impl<S, B> tower::Service<http::Request<B>> for GrpcAuth<S>
where
    S: tower::Service<
        http::Request<B>,
        Response = http::Response<tonic::body::Body>,
        Error = Infallible,
    >,
    S::Future: Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        if let Some(auth) = &self.auth {
            if let Err(error) = auth.check(request.headers()) {
                tracing::debug!(path = request.uri().path(), reason = %error, "unauthenticated OTLP/gRPC request");
                let status = tonic::Status::new(error.error_code().grpc_code(), error.to_string());
                return Box::pin(std::future::ready(Ok(status.into_http())));
            }
        }
        Box::pin(self.inner.call(request))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn headers(values: &[&str]) -> http::HeaderMap {
        let mut headers = http::HeaderMap::new();
        for value in values {
            headers.append(AUTHORIZATION, HeaderValue::from_str(value).unwrap());
        }
        headers
    }

    #[test]
    fn constant_time_eq_compares_whole_slices() {
        assert!(constant_time_eq(b"", b""));
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"xbc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
    }

    #[test]
    fn scheme_is_case_insensitive_and_whitespace_tolerated() {
        for value in [
            "Bearer t0k",
            "bearer t0k",
            "BEARER t0k",
            "bEaReR   t0k",
            "Bearer\tt0k",
            "  Bearer t0k  ",
        ] {
            assert_eq!(
                credentials(value.as_bytes(), "Bearer"),
                Some(&b"t0k"[..]),
                "{value:?}"
            );
        }
        for value in ["Bearer", "Bearer ", "Bearert0k", "Basic t0k", "t0k", ""] {
            assert_eq!(credentials(value.as_bytes(), "Bearer"), None, "{value:?}");
        }
        assert_eq!(credentials(b" t0k ", ""), Some(&b"t0k"[..]));
        assert_eq!(credentials(b"  ", ""), None);
    }

    #[test]
    fn check_accepts_the_right_token_only() {
        let auth = BearerAuth::bearer("s3cret");
        assert_eq!(auth.check(&headers(&["Bearer s3cret"])), Ok(()));
        assert_eq!(auth.check(&headers(&["bearer s3cret"])), Ok(()));
        assert_eq!(
            auth.check(&headers(&[])),
            Err(AuthError::Missing {
                expected: "Bearer <token>".into()
            })
        );
        assert_eq!(
            auth.check(&headers(&["Bearer wrong"])),
            Err(AuthError::InvalidToken)
        );
        assert_eq!(
            auth.check(&headers(&["Bearer s3cre"])),
            Err(AuthError::InvalidToken)
        );
        assert_eq!(
            auth.check(&headers(&["Bearer s3cretX"])),
            Err(AuthError::InvalidToken)
        );
        assert!(matches!(
            auth.check(&headers(&["Basic s3cret"])),
            Err(AuthError::Malformed { .. })
        ));
        assert_eq!(
            auth.check(&headers(&["Bearer s3cret", "Bearer s3cret"])),
            Err(AuthError::Repeated)
        );
        let error = auth.check(&headers(&[])).unwrap_err();
        assert_eq!(error.error_code().http_status(), 401);
        assert_eq!(error.error_code().grpc_code(), tonic::Code::Unauthenticated);
    }

    #[test]
    fn several_tokens_and_custom_schemes() {
        let auth = BearerAuth::new("Token", ["old", "new"]);
        assert_eq!(auth.check(&headers(&["token old"])), Ok(()));
        assert_eq!(auth.check(&headers(&["TOKEN new"])), Ok(()));
        assert!(auth.check(&headers(&["Bearer new"])).is_err());
        let bare = BearerAuth::new("", ["raw"]);
        assert_eq!(bare.check(&headers(&["raw"])), Ok(()));
        assert!(bare.check(&headers(&["Bearer raw"])).is_err());
        let none = BearerAuth::new::<&str>("Bearer", []);
        assert!(none.check(&headers(&["Bearer x"])).is_err());
    }

    #[test]
    fn debug_shows_no_secret() {
        let auth = BearerAuth::bearer("s3cret");
        let text = format!("{auth:?}");
        assert!(!text.contains("s3cret"), "{text}");
    }
}
