//! Authentication and transport security keys: the receivers' `tls` and `auth` blocks, the
//! `bearertokenauth` extension, the query API's token, `/metrics` token and Host allow-list,
//! and the start-up check that a token written as `${env:VAR}` did not resolve empty.
//!
//! Collector layout:
//!
//! ```yaml
//! receivers:
//!   otlp:
//!     protocols:
//!       grpc:
//!         tls: { cert_file: server.pem, key_file: server.key, client_ca_file: ca.pem }
//!         auth: { authenticator: bearertokenauth }
//! extensions:
//!   bearertokenauth:
//!     token: ${env:OTLP_TOKEN}
//! service:
//!   extensions: [bearertokenauth]
//! ```
//!
//! Pure: no I/O. The PEM files are read when the receivers are built (and by
//! `--validate-config`), see `crate::receiver::check_tls`.

use std::fmt;
use std::path::PathBuf;

use serde::Deserialize;
use serde_yaml_ng::Value;

use super::error::ConfigProblem;
use super::text::Text;

/// The extension type that authenticates receivers with a bearer token.
pub(crate) const BEARERTOKENAUTH: &str = "bearertokenauth";
/// The query API extension type (for the secret check).
const STEPLINE_API: &str = "stepline_api";
/// The scheme `bearertokenauth` expects unless `scheme` says otherwise.
pub const DEFAULT_AUTH_SCHEME: &str = "Bearer";

// ---------------------------------------------------------------------------------------------
// Raw (as written)

/// `receivers.otlp.protocols.{grpc,http}.tls`: the server side of TLS.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawServerTls {
    /// `cert_file`: PEM certificate chain the receiver presents.
    pub(crate) cert_file: Option<Text>,
    /// `key_file`: its PEM private key.
    pub(crate) key_file: Option<Text>,
    /// `client_ca_file`: PEM CA certificates client certificates must chain to (mutual TLS).
    pub(crate) client_ca_file: Option<Text>,
    /// `min_version`: `"1.2"` (default) or `"1.3"`.
    pub(crate) min_version: Option<Text>,
}

/// `receivers.otlp.protocols.{grpc,http}.auth`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawReceiverAuth {
    /// `authenticator`: id of a `bearertokenauth` extension.
    pub(crate) authenticator: Option<Text>,
}

/// `extensions.bearertokenauth[/name]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawBearerTokenAuth {
    /// `scheme`: the `Authorization` scheme, `Bearer` by default; empty = the bare token.
    pub(crate) scheme: Option<Text>,
    /// `token`: the accepted token.
    pub(crate) token: Option<Text>,
    /// `tokens`: several accepted tokens (e.g. while rotating).
    pub(crate) tokens: Option<Vec<Option<Text>>>,
}

// ---------------------------------------------------------------------------------------------
// Validated

/// The lowest TLS version a receiver accepts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum TlsVersion {
    /// TLS 1.2 and 1.3 (the default).
    #[default]
    Tls12,
    /// TLS 1.3 only.
    Tls13,
}

/// `receivers.otlp.protocols.{grpc,http}.tls`: the receiver speaks TLS only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerTlsConfig {
    /// PEM certificate chain presented to clients.
    pub cert_file: PathBuf,
    /// PEM private key of `cert_file`.
    pub key_file: PathBuf,
    /// When set, clients must present a certificate that chains to one of these PEM CA
    /// certificates (mutual TLS); connections without one are refused.
    pub client_ca_file: Option<PathBuf>,
    /// The lowest TLS version accepted.
    pub min_version: TlsVersion,
    /// The key path of this block (e.g. `receivers.otlp.protocols.grpc.tls`), for messages
    /// about its files.
    pub key_path: String,
}

/// `receivers.otlp.protocols.{grpc,http}.auth`, resolved: requests must carry
/// `Authorization: <scheme> <token>` with one of `tokens`.
#[derive(Clone, PartialEq, Eq)]
pub struct ReceiverAuthConfig {
    /// The id of the `bearertokenauth` extension it comes from.
    pub authenticator: String,
    /// The expected scheme (compared case-insensitively); empty: the header is the bare token.
    pub scheme: String,
    /// The accepted tokens; never empty in a validated [`super::Config`].
    pub tokens: Vec<String>,
}

impl fmt::Debug for ReceiverAuthConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReceiverAuthConfig")
            .field("authenticator", &self.authenticator)
            .field("scheme", &self.scheme)
            .field("tokens", &format_args!("[{} redacted]", self.tokens.len()))
            .finish()
    }
}

/// A `bearertokenauth` extension's settings.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct BearerTokenAuth {
    scheme: String,
    tokens: Vec<String>,
}

impl BearerTokenAuth {
    /// Gives a receiver protocol's authenticator this extension's scheme and tokens.
    pub(crate) fn fill(&self, auth: &mut ReceiverAuthConfig) {
        auth.scheme = self.scheme.clone();
        auth.tokens = self.tokens.clone();
    }
}

impl fmt::Debug for BearerTokenAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BearerTokenAuth")
            .field("scheme", &self.scheme)
            .finish_non_exhaustive()
    }
}

// ---------------------------------------------------------------------------------------------
// Validation

/// A token as configured: `Ok(None)` when empty (not set), a message when it holds spaces or
/// control characters (which no `Authorization` header could carry intact).
pub(crate) fn validate_token(text: Option<Text>) -> Result<Option<String>, String> {
    match text {
        None => Ok(None),
        Some(Text(token)) if token.is_empty() => Ok(None),
        Some(Text(token)) if token.chars().any(|c| c.is_whitespace() || c.is_control()) => {
            Err("must not contain spaces or control characters".into())
        }
        Some(Text(token)) => Ok(Some(token)),
    }
}

/// `tls` at `path`; problems are reported with their key paths.
pub(crate) fn validate_server_tls(
    raw: RawServerTls,
    path: &str,
    problems: &mut Vec<ConfigProblem>,
) -> Option<ServerTlsConfig> {
    let before = problems.len();
    let mut file = |text: Option<Text>, key: &str, required: bool| -> Option<PathBuf> {
        match text {
            Some(Text(file)) if !file.trim().is_empty() => Some(PathBuf::from(file)),
            _ => {
                if required {
                    problems.push(ConfigProblem::new(
                        format!("{path}.{key}"),
                        "required when tls is set (a PEM file); remove the tls block for plain \
                         text",
                    ));
                }
                None
            }
        }
    };
    let cert_file = file(raw.cert_file, "cert_file", true);
    let key_file = file(raw.key_file, "key_file", true);
    let client_ca_file = file(raw.client_ca_file, "client_ca_file", false);
    let min_version = match raw.min_version.as_ref().map(|Text(t)| t.trim()) {
        None | Some("" | "1.2") => TlsVersion::Tls12,
        Some("1.3") => TlsVersion::Tls13,
        Some(other) => {
            problems.push(ConfigProblem::new(
                format!("{path}.min_version"),
                format!("unsupported TLS version \"{other}\" (expected \"1.2\" or \"1.3\")"),
            ));
            TlsVersion::Tls12
        }
    };
    if problems.len() != before {
        return None;
    }
    Some(ServerTlsConfig {
        cert_file: cert_file?,
        key_file: key_file?,
        client_ca_file,
        min_version,
        key_path: path.to_owned(),
    })
}

/// `auth` at `path`: checks the authenticator id. The extension's settings are filled in by
/// [`super::authenticators::resolve_authenticators`] once every extension is known (until then `tokens` is empty).
pub(crate) fn validate_receiver_auth(
    raw: RawReceiverAuth,
    path: &str,
    problems: &mut Vec<ConfigProblem>,
) -> Option<ReceiverAuthConfig> {
    let key = format!("{path}.authenticator");
    let id = match raw.authenticator {
        Some(Text(id)) if !id.trim().is_empty() => id.trim().to_owned(),
        _ => {
            problems.push(ConfigProblem::new(
                key,
                format!("required: the id of a {BEARERTOKENAUTH} extension"),
            ));
            return None;
        }
    };
    let type_name = id.split_once('/').map_or(id.as_str(), |(t, _)| t);
    if type_name != BEARERTOKENAUTH {
        problems.push(ConfigProblem::new(
            key,
            format!(
                "unsupported authenticator \"{id}\": only {BEARERTOKENAUTH} (or \
                 {BEARERTOKENAUTH}/<name>) extensions authenticate receivers"
            ),
        ));
        return None;
    }
    Some(ReceiverAuthConfig {
        authenticator: id,
        scheme: DEFAULT_AUTH_SCHEME.to_owned(),
        tokens: Vec::new(),
    })
}

/// `extensions.bearertokenauth[/name]` at `path`.
pub(crate) fn validate_bearer_token_auth(
    raw: RawBearerTokenAuth,
    path: &str,
    problems: &mut Vec<ConfigProblem>,
) -> Option<BearerTokenAuth> {
    let before = problems.len();
    let scheme = match raw.scheme {
        None => DEFAULT_AUTH_SCHEME.to_owned(),
        Some(Text(scheme)) => {
            let valid = scheme
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._~+/".contains(&b));
            if !valid {
                problems.push(ConfigProblem::new(
                    format!("{path}.scheme"),
                    format!(
                        "invalid scheme \"{scheme}\": one word such as Bearer (empty: the \
                         header holds the bare token)"
                    ),
                ));
            }
            scheme
        }
    };
    let mut tokens = Vec::new();
    let mut add =
        |text: Option<Text>, key: String, problems: &mut Vec<ConfigProblem>| match validate_token(
            text,
        ) {
            Ok(Some(token)) => tokens.push(token),
            Ok(None) => problems.push(ConfigProblem::new(key, "must not be empty")),
            Err(message) => problems.push(ConfigProblem::new(key, message)),
        };
    let listed = raw.tokens.unwrap_or_default();
    if raw.token.is_some() || listed.is_empty() {
        add(raw.token, format!("{path}.token"), problems);
    }
    for (index, token) in listed.into_iter().enumerate() {
        add(token, format!("{path}.tokens[{index}]"), problems);
    }
    (problems.len() == before).then_some(BearerTokenAuth { scheme, tokens })
}

/// `extensions.stepline_api.allowed_hosts`: host names (or IP addresses), each optionally with
/// a port, lowercased, IPv6 addresses in brackets.
pub(crate) fn validate_allowed_hosts(
    raw: Option<Vec<Option<Text>>>,
    path: &str,
    problems: &mut Vec<ConfigProblem>,
) -> Option<Vec<String>> {
    let before = problems.len();
    let mut hosts = Vec::new();
    for (index, entry) in raw.unwrap_or_default().into_iter().enumerate() {
        let key = format!("{path}.allowed_hosts[{index}]");
        let Some(Text(text)) = entry.filter(|Text(text)| !text.trim().is_empty()) else {
            problems.push(ConfigProblem::new(key, "must not be empty"));
            continue;
        };
        match normalize_host(&text) {
            Some(host) => hosts.push(host),
            None => problems.push(ConfigProblem::new(
                key,
                format!(
                    "invalid host \"{text}\": write a host name or IP address, optionally with \
                     :port (e.g. stepline.internal or stepline.internal:4320), without a scheme"
                ),
            )),
        }
    }
    (problems.len() == before).then_some(hosts)
}

/// A Host allow-list entry in canonical form (lowercase, IPv6 in brackets), or `None` when it
/// is not `host[:port]`.
fn normalize_host(text: &str) -> Option<String> {
    let text = text.trim().to_ascii_lowercase();
    if text.is_empty() || text.contains("://") || text.contains('/') {
        return None;
    }
    if text.parse::<std::net::Ipv6Addr>().is_ok() {
        return Some(format!("[{text}]"));
    }
    let (host, port) = match text.strip_prefix('[') {
        Some(bracketed) => {
            let (address, after) = bracketed.split_once(']')?;
            address.parse::<std::net::Ipv6Addr>().ok()?;
            (&text[..address.len() + 2], after.strip_prefix(':'))
        }
        None => match text.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (text.as_str(), None),
        },
    };
    let host_ok = host.starts_with('[')
        || (!host.is_empty()
            && host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_'));
    let port_ok = port.is_none_or(|p| !p.is_empty() && p.parse::<u16>().is_ok());
    (host_ok && port_ok).then_some(text)
}

// ---------------------------------------------------------------------------------------------
// Tokens written as ${env:VAR} that resolved empty

/// One secret key whose value, as written, references environment variables.
#[derive(Debug, Clone)]
struct SecretReference {
    /// The extension's key in `extensions`.
    extension: Value,
    /// The extension's id, for messages.
    extension_id: String,
    /// The key holding the secret.
    key: &'static str,
    /// The value as written.
    written: String,
    /// The variables it references.
    variables: Vec<String>,
    /// Whether `allow_no_auth: true` on the extension permits an empty value.
    may_be_empty: bool,
}

/// The secret keys (API tokens, `bearertokenauth` tokens) written with `${env:…}` references,
/// found before substitution so that one resolving empty can stop the start instead of
/// silently meaning "no authentication".
#[derive(Debug, Clone, Default)]
pub(crate) struct SecretReferences(Vec<SecretReference>);

impl SecretReferences {
    /// Finds the secret keys of `root` (the tree before `${env:…}` substitution) that hold
    /// references.
    pub(crate) fn find(root: &Value) -> Self {
        let mut found = Vec::new();
        let Some(Value::Mapping(extensions)) = root.get("extensions") else {
            return Self(found);
        };
        for (id, body) in extensions {
            let Some(id_text) = id.as_str() else { continue };
            let type_name = id_text.split_once('/').map_or(id_text, |(t, _)| t);
            let (keys, may_be_empty): (&[&'static str], bool) = match type_name {
                STEPLINE_API => (&["bearer_token", "metrics_bearer_token"], true),
                BEARERTOKENAUTH => (&["token"], false),
                _ => continue,
            };
            for &key in keys {
                let Some(Value::String(written)) = body.get(key) else {
                    continue;
                };
                let variables = referenced_variables(written);
                if !variables.is_empty() {
                    found.push(SecretReference {
                        extension: id.clone(),
                        extension_id: id_text.to_owned(),
                        key,
                        written: written.clone(),
                        variables,
                        may_be_empty,
                    });
                }
            }
        }
        Self(found)
    }

    /// The problems in `expanded` (the tree after substitution): every secret found by
    /// [`SecretReferences::find`] that is now empty, unless its extension says
    /// `allow_no_auth: true` (API tokens only).
    pub(crate) fn check(&self, expanded: &Value) -> Vec<ConfigProblem> {
        let mut problems = Vec::new();
        for secret in &self.0 {
            let Some(body) = expanded
                .get("extensions")
                .and_then(|extensions| extensions.get(&secret.extension))
            else {
                continue;
            };
            let empty = match body.get(secret.key) {
                None | Some(Value::Null) => true,
                Some(Value::String(text)) => text.is_empty(),
                Some(_) => false,
            };
            if !empty {
                continue;
            }
            let allowed = body.get("allow_no_auth") == Some(&Value::Bool(true));
            if secret.may_be_empty && allowed {
                continue;
            }
            let variables = secret.variables.join(", ");
            let path = format!("extensions.{}.{}", secret.extension_id, secret.key);
            let message = if secret.may_be_empty {
                format!(
                    "{} is empty ({variables} unset or empty), which would turn authentication \
                     off; set {variables}, or add allow_no_auth: true to extensions.{} to run \
                     without a token",
                    secret.written, secret.extension_id
                )
            } else {
                format!(
                    "{} is empty ({variables} unset or empty); set {variables}: the receivers \
                     using this authenticator need a token",
                    secret.written
                )
            };
            problems.push(ConfigProblem::new(path, message));
        }
        problems
    }
}

/// The variables `${env:NAME}` / `${env:NAME:-default}` in `text` refers to (`$$` escapes).
fn referenced_variables(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = text;
    while let Some(dollar) = rest.find('$') {
        let after = &rest[dollar + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            rest = tail;
            continue;
        }
        rest = after;
        let Some(spec) = after.strip_prefix("{env:") else {
            continue;
        };
        let Some(close) = spec.find('}') else { break };
        let body = &spec[..close];
        let name = body.split_once(":-").map_or(body, |(name, _)| name);
        names.push(name.to_owned());
        rest = &spec[close + 1..];
    }
    names
}

/// Joins `empty_secrets` (from [`SecretReferences::check`]) with the outcome of validation;
/// a validation problem at the same key as an empty secret is left out (the empty secret says
/// more).
pub(crate) fn with_secret_problems<T>(
    empty_secrets: Vec<ConfigProblem>,
    validated: Result<T, Vec<ConfigProblem>>,
) -> Result<T, Vec<ConfigProblem>> {
    if empty_secrets.is_empty() {
        return validated;
    }
    let mut problems = empty_secrets;
    if let Err(others) = validated {
        let others: Vec<ConfigProblem> = others
            .into_iter()
            .filter(|other| !problems.iter().any(|p| p.path == other.path))
            .collect();
        problems.extend(others);
    }
    Err(problems)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use std::path::Path;

    fn load(yaml: &str, env: &[(&str, &str)]) -> Result<Config, Vec<String>> {
        let lookup = |name: &str| {
            env.iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| (*value).to_owned())
        };
        Config::from_yaml(yaml, Path::new("collector.yaml"), &lookup)
            .map_err(|error| error.to_string().lines().map(str::to_owned).collect())
    }

    const PIPELINE: &str = "service:\n  pipelines:\n    traces:\n      receivers: [otlp]\n";

    fn api(body: &str) -> String {
        format!("receivers:\n  otlp:\n    protocols:\n      grpc:\nextensions:\n  stepline_api:\n{body}{PIPELINE}")
    }

    #[test]
    fn an_api_token_variable_that_resolves_empty_stops_the_start() {
        let yaml = api("    bearer_token: ${env:API_TOKEN}\n");
        let lines = load(&yaml, &[]).unwrap_err();
        assert_eq!(lines.len(), 1, "{lines:#?}");
        assert!(
            lines[0].starts_with(
                "collector.yaml: extensions.stepline_api.bearer_token: ${env:API_TOKEN} is \
                 empty (API_TOKEN unset or empty)"
            ),
            "{}",
            lines[0]
        );
        assert!(lines[0].contains("allow_no_auth: true"), "{}", lines[0]);
        // Set but empty, or empty through a default: the same.
        assert!(load(&yaml, &[("API_TOKEN", "")]).is_err());
        let with_default = api("    bearer_token: ${env:API_TOKEN:-}\n");
        assert!(load(&with_default, &[]).is_err());
        // Set: used.
        let config = load(&yaml, &[("API_TOKEN", "s3cret")]).unwrap();
        assert_eq!(config.api.bearer_token.as_deref(), Some("s3cret"));
        // allow_no_auth: true permits it.
        let allowed = api("    bearer_token: ${env:API_TOKEN}\n    allow_no_auth: true\n");
        assert_eq!(load(&allowed, &[]).unwrap().api.bearer_token, None);
        let from_env = api("    bearer_token: ${env:API_TOKEN}\n    allow_no_auth: ${env:OPEN}\n");
        assert!(load(&from_env, &[("OPEN", "true")]).is_ok());
        assert!(load(&from_env, &[("OPEN", "false")]).is_err());
        // Written empty (no variable) is an explicit choice.
        assert_eq!(
            load(&api("    bearer_token: ''\n"), &[])
                .unwrap()
                .api
                .bearer_token,
            None
        );
    }

    #[test]
    fn metrics_token_and_allowed_hosts() {
        let yaml = api(
            "    metrics_bearer_token: ${env:METRICS_TOKEN}\n    allowed_hosts: [Stepline.Internal, '::1', 'api.example:8443']\n",
        );
        let lines = load(&yaml, &[]).unwrap_err();
        assert!(
            lines[0].starts_with(
                "collector.yaml: extensions.stepline_api.metrics_bearer_token: \
                 ${env:METRICS_TOKEN} is empty"
            ),
            "{lines:#?}"
        );
        let config = load(&yaml, &[("METRICS_TOKEN", "m")]).unwrap();
        assert_eq!(config.api.metrics_bearer_token.as_deref(), Some("m"));
        assert_eq!(config.api.bearer_token, None);
        assert_eq!(
            config.api.allowed_hosts,
            ["stepline.internal", "[::1]", "api.example:8443"]
        );
        let lines = load(&api("    allowed_hosts: ['http://x', '']\n"), &[]).unwrap_err();
        assert!(
            lines[0].starts_with(
                "collector.yaml: extensions.stepline_api.allowed_hosts[0]: invalid host \"http://x\""
            ),
            "{lines:#?}"
        );
        assert_eq!(
            lines[1],
            "collector.yaml: extensions.stepline_api.allowed_hosts[1]: must not be empty"
        );
        let lines = load(&api("    metrics_bearer_token: 'a b'\n"), &[]).unwrap_err();
        assert_eq!(
            lines,
            [
                "collector.yaml: extensions.stepline_api.metrics_bearer_token: must not contain \
              spaces or control characters"
            ]
        );
    }

    const RECEIVER: &str = "
receivers:
  otlp/agents:
    protocols:
      grpc:
        tls: { cert_file: server.pem, key_file: server.key, client_ca_file: ca.pem, min_version: '1.3' }
        auth: { authenticator: bearertokenauth/agents }
      http:
        tls: { cert_file: server.pem, key_file: server.key }
        auth: { authenticator: bearertokenauth/agents }
extensions:
  bearertokenauth/agents:
    token: ${env:OTLP_TOKEN}
";

    fn receiver(extensions: &str) -> String {
        format!(
            "{RECEIVER}service:\n  extensions: [{extensions}]\n  pipelines:\n    traces:\n      receivers: [otlp/agents]\n"
        )
    }

    #[test]
    fn receivers_take_tls_and_a_bearer_token_authenticator() {
        let config = load(
            &receiver("bearertokenauth/agents"),
            &[("OTLP_TOKEN", "t0k")],
        )
        .unwrap();
        let grpc = config.receiver.grpc.unwrap();
        let tls = grpc.tls.unwrap();
        assert_eq!(tls.cert_file, PathBuf::from("server.pem"));
        assert_eq!(tls.key_file, PathBuf::from("server.key"));
        assert_eq!(tls.client_ca_file, Some(PathBuf::from("ca.pem")));
        assert_eq!(tls.min_version, TlsVersion::Tls13);
        assert_eq!(tls.key_path, "receivers.otlp/agents.protocols.grpc.tls");
        let auth = grpc.auth.unwrap();
        assert_eq!(auth.authenticator, "bearertokenauth/agents");
        assert_eq!(auth.scheme, "Bearer");
        assert_eq!(auth.tokens, ["t0k"]);
        assert!(
            !format!("{auth:?}").contains("t0k"),
            "tokens stay out of logs"
        );
        let http = config.receiver.http.unwrap();
        assert_eq!(http.tls.unwrap().client_ca_file, None);
        assert_eq!(http.auth.unwrap().tokens, ["t0k"]);
    }

    #[test]
    fn authenticator_problems_name_their_keys() {
        // Not listed in service.extensions.
        let lines = load(&receiver(""), &[("OTLP_TOKEN", "t")]).unwrap_err();
        assert_eq!(lines.len(), 2, "{lines:#?}");
        assert_eq!(
            lines[0],
            "collector.yaml: receivers.otlp/agents.protocols.grpc.auth.authenticator: extension \
             \"bearertokenauth/agents\" is configured but not listed in service.extensions; add it \
             there"
        );
        // The token variable is empty: one line, naming it.
        let lines = load(&receiver("bearertokenauth/agents"), &[]).unwrap_err();
        assert_eq!(
            lines,
            [
                "collector.yaml: extensions.bearertokenauth/agents.token: ${env:OTLP_TOKEN} is \
              empty (OTLP_TOKEN unset or empty); set OTLP_TOKEN: the receivers using this \
              authenticator need a token"
            ]
        );
        // Not configured at all.
        let yaml = "receivers:\n  otlp:\n    protocols:\n      http:\n        auth: { authenticator: bearertokenauth }\n\
                    service:\n  pipelines:\n    traces:\n      receivers: [otlp]\n";
        let lines = load(yaml, &[]).unwrap_err();
        assert!(
            lines[0].starts_with(
                "collector.yaml: receivers.otlp.protocols.http.auth.authenticator: extension \
                 \"bearertokenauth\" is not configured"
            ),
            "{lines:#?}"
        );
        // Other authenticator types, bad tls blocks, empty tokens, unknown keys.
        let yaml = "receivers:\n  otlp:\n    protocols:\n      grpc:\n        auth: { authenticator: oidc }\n        tls: { cert_file: a.pem, min_version: '1.1' }\n\
                    extensions:\n  bearertokenauth:\n    token: ''\n    scheme: 'Bearer token'\n\
                    service:\n  extensions: [bearertokenauth]\n  pipelines:\n    traces:\n      receivers: [otlp]\n";
        let lines = load(yaml, &[]).unwrap_err();
        for expected in [
            "collector.yaml: receivers.otlp.protocols.grpc.tls.key_file: required when tls is set",
            "collector.yaml: receivers.otlp.protocols.grpc.tls.min_version: unsupported TLS version \"1.1\"",
            "collector.yaml: receivers.otlp.protocols.grpc.auth.authenticator: unsupported authenticator \"oidc\"",
            "collector.yaml: extensions.bearertokenauth.scheme: invalid scheme \"Bearer token\"",
            "collector.yaml: extensions.bearertokenauth.token: must not be empty",
        ] {
            assert!(
                lines.iter().any(|line| line.starts_with(expected)),
                "no line starting {expected:?} in {lines:#?}"
            );
        }
    }

    #[test]
    fn unknown_tls_keys_are_refused_with_their_path() {
        let yaml = "receivers:\n  otlp:\n    protocols:\n      http:\n        tls: { cert_file: a.pem, key_file: a.key, ca_file: x }\n\
                    service:\n  pipelines:\n    traces:\n      receivers: [otlp]\n";
        let lines = load(yaml, &[]).unwrap_err();
        assert!(
            lines[0].starts_with(
                "collector.yaml: receivers.otlp.protocols.http.tls.ca_file: unknown field `ca_file`"
            ),
            "{lines:#?}"
        );
    }

    #[test]
    fn several_tokens_and_an_empty_scheme() {
        let yaml = "receivers:\n  otlp:\n    protocols:\n      http:\n        auth: { authenticator: bearertokenauth }\n\
                    extensions:\n  bearertokenauth:\n    scheme: ''\n    tokens: [old, new]\n\
                    service:\n  extensions: [bearertokenauth]\n  pipelines:\n    traces:\n      receivers: [otlp]\n";
        let auth = load(yaml, &[])
            .unwrap()
            .receiver
            .http
            .unwrap()
            .auth
            .unwrap();
        assert_eq!(auth.scheme, "");
        assert_eq!(auth.tokens, ["old", "new"]);
    }

    #[test]
    fn variables_are_found_in_references_only() {
        assert_eq!(referenced_variables("${env:A}"), ["A"]);
        assert_eq!(referenced_variables("x${env:A:-d}y${env:B}"), ["A", "B"]);
        assert!(referenced_variables("$${env:A}").is_empty());
        assert!(referenced_variables("pa$$word").is_empty());
        assert!(referenced_variables("plain").is_empty());
        assert!(referenced_variables("${env:A").is_empty());
    }

    #[test]
    fn host_entries_are_normalized() {
        assert_eq!(
            normalize_host("Stepline.Internal").unwrap(),
            "stepline.internal"
        );
        assert_eq!(normalize_host("a.b:4320").unwrap(), "a.b:4320");
        assert_eq!(normalize_host("::1").unwrap(), "[::1]");
        assert_eq!(normalize_host("[::1]:80").unwrap(), "[::1]:80");
        for bad in ["", "http://a", "a/b", "a:", "a:99999", "[zz]", "a b"] {
            assert_eq!(normalize_host(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn tokens_reject_spaces() {
        assert_eq!(
            validate_token(Some(Text("ok".into()))),
            Ok(Some("ok".into()))
        );
        assert_eq!(validate_token(Some(Text(String::new()))), Ok(None));
        assert!(validate_token(Some(Text("a b".into()))).is_err());
        assert!(validate_token(Some(Text("a\u{7}".into()))).is_err());
    }
}
