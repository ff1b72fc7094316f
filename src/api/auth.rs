//! Access control of the query API: the bearer token on `/v1/*`, the optional token on
//! `/metrics`, and the `Host` allow-list that defeats DNS rebinding when the API listens on a
//! loopback address (a web page whose name an attacker re-points at 127.0.0.1 sends its own
//! name as `Host`, and is refused).
//!
//! Tokens are checked with [`crate::receiver::auth::BearerAuth`]: constant-time comparison,
//! case-insensitive scheme.

use std::net::IpAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use crate::config::ApiConfig;
use crate::receiver::auth::BearerAuth;

/// `Host` names a loopback API always answers to (any port).
const LOOPBACK_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "[::1]"];

/// Who may use the API.
#[derive(Debug, Clone, Default)]
pub struct ApiAccess {
    /// Token required on `/v1/*`, when configured.
    token: Option<BearerAuth>,
    /// Token required on `/metrics`, when configured.
    metrics_token: Option<BearerAuth>,
    /// When set, the `Host` values answered (lowercase `host` matching any port, or
    /// `host:port`).
    allowed_hosts: Option<Vec<String>>,
}

impl ApiAccess {
    /// No token, no `Host` check.
    pub fn open() -> Self {
        Self::default()
    }

    /// The access rules `config` describes: its tokens, and the `Host` check when the endpoint
    /// is a loopback address or `allowed_hosts` is not empty.
    pub fn from_config(config: &ApiConfig) -> Self {
        let endpoint_host = endpoint_host(&config.endpoint);
        let check_hosts = is_loopback(&endpoint_host) || !config.allowed_hosts.is_empty();
        let allowed_hosts = check_hosts.then(|| {
            let mut hosts: Vec<String> = LOOPBACK_HOSTS.iter().map(|h| h.to_string()).collect();
            hosts.push(endpoint_host);
            hosts.extend(config.allowed_hosts.iter().cloned());
            hosts
        });
        Self {
            token: config.bearer_token.as_deref().map(BearerAuth::bearer),
            metrics_token: config
                .metrics_bearer_token
                .as_deref()
                .map(BearerAuth::bearer),
            allowed_hosts,
        }
    }

    /// Requires `Authorization: Bearer <token>` on `/v1/*`.
    pub fn with_token(mut self, token: &str) -> Self {
        self.token = Some(BearerAuth::bearer(token));
        self
    }

    /// Requires `Authorization: Bearer <token>` on `/metrics`.
    pub fn with_metrics_token(mut self, token: &str) -> Self {
        self.metrics_token = Some(BearerAuth::bearer(token));
        self
    }

    /// Answers only requests whose `Host` is a loopback name or one of `extra`.
    pub fn with_host_check(mut self, extra: &[&str]) -> Self {
        let mut hosts: Vec<String> = LOOPBACK_HOSTS.iter().map(|h| h.to_string()).collect();
        hosts.extend(extra.iter().map(|h| h.to_ascii_lowercase()));
        self.allowed_hosts = Some(hosts);
        self
    }

    /// Whether `/v1/*` requires a token.
    pub fn requires_token(&self) -> bool {
        self.token.is_some()
    }

    /// Checks the request's `Host` (or HTTP/2 `:authority`) against the allow-list.
    pub fn check_host(&self, request: &Request) -> Result<(), ApiError> {
        let Some(allowed) = &self.allowed_hosts else {
            return Ok(());
        };
        let host = request
            .headers()
            .get(http::header::HOST)
            .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned())
            .or_else(|| request.uri().authority().map(|a| a.as_str().to_owned()));
        let Some(host) = host else {
            return Err(ApiError::Forbidden(
                "missing Host header: this API answers only to localhost, 127.0.0.1, [::1] \
                 and extensions.stepline_api.allowed_hosts"
                    .into(),
            ));
        };
        if host_allowed(&host, allowed) {
            Ok(())
        } else {
            Err(ApiError::Forbidden(format!(
                "Host {:?} is not allowed: this API answers only to localhost, 127.0.0.1, \
                 [::1] and extensions.stepline_api.allowed_hosts",
                truncate(&host, 256)
            )))
        }
    }
}

/// `true` when `host` (`name`, `name:port`, `[v6]`, `[v6]:port`) is in `allowed`: an entry
/// without a port matches the name on any port, one with a port only that port.
fn host_allowed(host: &str, allowed: &[String]) -> bool {
    let host = host.trim().to_ascii_lowercase();
    let name = match host.strip_prefix('[') {
        Some(rest) => match rest.find(']') {
            Some(end) => &host[..end + 2],
            None => return false,
        },
        None => host
            .rsplit_once(':')
            .map_or(host.as_str(), |(name, _)| name),
    };
    allowed.iter().any(|entry| entry == &host || entry == name)
}

/// The host part of a `host:port` endpoint, lowercase (IPv6 keeps its brackets).
fn endpoint_host(endpoint: &str) -> String {
    let endpoint = endpoint.trim().to_ascii_lowercase();
    match endpoint.strip_prefix('[') {
        Some(rest) => rest
            .split_once(']')
            .map(|(address, _)| format!("[{address}]"))
            .unwrap_or(endpoint.clone()),
        None => endpoint
            .rsplit_once(':')
            .map_or(endpoint.clone(), |(host, _)| host.to_owned()),
    }
}

/// Whether an endpoint host (as from [`endpoint_host`]) is a loopback address or `localhost`.
fn is_loopback(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    host == "localhost" || bare.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

fn truncate(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Middleware: the `Host` check, on every route.
pub(crate) async fn check_host(
    State(access): State<Arc<ApiAccess>>,
    request: Request,
    next: Next,
) -> Response {
    match access.check_host(&request) {
        Ok(()) => next.run(request).await,
        Err(error) => error.into_response(),
    }
}

/// Middleware: the `/v1/*` token.
pub(crate) async fn require_token(
    State(access): State<Arc<ApiAccess>>,
    request: Request,
    next: Next,
) -> Response {
    authorize(access.token.as_ref(), request, next).await
}

/// Middleware: the `/metrics` token.
pub(crate) async fn require_metrics_token(
    State(access): State<Arc<ApiAccess>>,
    request: Request,
    next: Next,
) -> Response {
    authorize(access.metrics_token.as_ref(), request, next).await
}

async fn authorize(token: Option<&BearerAuth>, request: Request, next: Next) -> Response {
    match token.map(|token| token.check(request.headers())) {
        None | Some(Ok(())) => next.run(request).await,
        Some(Err(error)) => ApiError::Unauthorized(error).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allowed(extra: &[&str]) -> Vec<String> {
        let mut hosts: Vec<String> = LOOPBACK_HOSTS.iter().map(|h| h.to_string()).collect();
        hosts.extend(extra.iter().map(|h| h.to_string()));
        hosts
    }

    #[test]
    fn loopback_names_pass_with_or_without_port() {
        let list = allowed(&[]);
        for host in [
            "localhost",
            "LOCALHOST:4320",
            "127.0.0.1",
            "127.0.0.1:4320",
            "[::1]",
            "[::1]:4320",
        ] {
            assert!(host_allowed(host, &list), "{host}");
        }
        for host in [
            "evil.example",
            "evil.example:4320",
            "localhost.evil.example",
            "127.0.0.1.nip.io:4320",
            "[::2]:4320",
            "[::1",
            "",
        ] {
            assert!(!host_allowed(host, &list), "{host}");
        }
    }

    #[test]
    fn configured_hosts_match_name_or_name_and_port() {
        let list = allowed(&["stepline.internal", "api.example:8443"]);
        assert!(host_allowed("stepline.internal:4320", &list));
        assert!(host_allowed("Stepline.Internal", &list));
        assert!(host_allowed("api.example:8443", &list));
        assert!(!host_allowed("api.example:4320", &list));
        assert!(!host_allowed("api.example", &list));
    }

    #[test]
    fn endpoints_are_recognised_as_loopback() {
        for endpoint in [
            "127.0.0.1:4320",
            "127.0.0.9:1",
            "[::1]:4320",
            "localhost:4320",
        ] {
            assert!(is_loopback(&endpoint_host(endpoint)), "{endpoint}");
        }
        for endpoint in [
            "0.0.0.0:4320",
            "[::]:4320",
            "10.0.0.1:4320",
            "example.com:80",
        ] {
            assert!(!is_loopback(&endpoint_host(endpoint)), "{endpoint}");
        }
        assert_eq!(endpoint_host("[::1]:4320"), "[::1]");
        assert_eq!(endpoint_host("127.0.0.5:4320"), "127.0.0.5");
    }

    #[test]
    fn from_config_checks_hosts_only_on_loopback_or_when_listed() {
        let loopback = ApiAccess::from_config(&ApiConfig::default());
        assert!(loopback.allowed_hosts.is_some());
        let open = ApiAccess::from_config(&ApiConfig {
            endpoint: "0.0.0.0:4320".into(),
            ..ApiConfig::default()
        });
        assert!(open.allowed_hosts.is_none());
        let listed = ApiAccess::from_config(&ApiConfig {
            endpoint: "0.0.0.0:4320".into(),
            allowed_hosts: vec!["api.example".into()],
            ..ApiConfig::default()
        });
        assert!(host_allowed(
            "api.example:4320",
            listed.allowed_hosts.as_ref().unwrap()
        ));
        let custom = ApiAccess::from_config(&ApiConfig {
            endpoint: "127.0.0.5:4320".into(),
            ..ApiConfig::default()
        });
        assert!(host_allowed(
            "127.0.0.5:4320",
            custom.allowed_hosts.as_ref().unwrap()
        ));
    }
}
