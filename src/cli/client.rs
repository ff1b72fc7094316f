//! The command line's HTTP client of the query API: a blocking client with the URL and token,
//! and the error an answer turns into (each with the exit code that says what happened).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use reqwest::blocking::{Client, RequestBuilder, Response};
use serde_json::Value;
use stepline::config::TlsConfig;
use stepline::service_error::{ServiceError, ServiceErrorCode};

/// The most an answer may hold (a long run's continuation is a few megabytes).
const MAX_ANSWER_BYTES: u64 = 256 * 1024 * 1024;

/// What went wrong running a command.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The command line, or what the API said of the request (400, 409, 405, ...).
    #[error("{0}")]
    Usage(String),
    /// The run (or the snapshot) does not exist: 404.
    #[error("{0}")]
    NotFound(String),
    /// The token is missing or wrong (401), or the API refuses this client (403).
    #[error("{0}")]
    Unauthorized(String),
    /// The API cannot be reached.
    #[error("cannot connect to {url}: {reason}")]
    Connect {
        /// The URL tried.
        url: String,
        /// Why.
        reason: String,
    },
    /// The API failed (5xx), or answered something that is not the API's JSON.
    #[error("{0}")]
    Server(String),
}

impl ServiceError for CliError {
    fn error_code(&self) -> ServiceErrorCode {
        match self {
            Self::Usage(_) => ServiceErrorCode::BadRequest,
            Self::NotFound(_) => ServiceErrorCode::NotFound,
            Self::Unauthorized(_) => ServiceErrorCode::Unauthorized,
            Self::Connect { .. } => ServiceErrorCode::Unavailable,
            Self::Server(_) => ServiceErrorCode::Internal,
        }
    }
}

impl CliError {
    /// The process exit code (see `EXIT_CODES` in the module above).
    pub fn exit_code(&self) -> ExitCode {
        ExitCode::from(match self {
            Self::Usage(_) => 1,
            Self::NotFound(_) => 2,
            Self::Unauthorized(_) => 3,
            Self::Connect { .. } => 4,
            Self::Server(_) => 5,
        })
    }
}

/// Where the API is and how to talk to it.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// Base URL, e.g. `http://127.0.0.1:4320`.
    pub url: String,
    /// Bearer token, when the API has one.
    pub token: Option<String>,
    /// CA certificates (PEM) for an `https://` URL; the Mozilla roots otherwise.
    pub ca_file: Option<PathBuf>,
    /// Per-request timeout.
    pub timeout: Duration,
}

/// A blocking client of the query API.
pub struct Api {
    client: Client,
    base: String,
    token: Option<String>,
}

/// An answer of the API: its status and body.
pub struct Answer {
    /// The HTTP status.
    pub status: u16,
    /// The body as sent.
    pub body: Vec<u8>,
}

impl Answer {
    /// The body parsed as JSON (a server error when it is not JSON).
    pub fn json(&self) -> Result<Value, CliError> {
        serde_json::from_slice(&self.body).map_err(|e| {
            CliError::Server(format!(
                "the API answered {} with a body that is not JSON ({e})",
                self.status
            ))
        })
    }
}

impl Api {
    /// A client of the API at `endpoint`.
    pub fn new(endpoint: &Endpoint) -> Result<Self, CliError> {
        let base = endpoint.url.trim_end_matches('/').to_string();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(CliError::Usage(format!(
                "--url must start with http:// or https://, not {:?}",
                endpoint.url
            )));
        }
        let mut builder = Client::builder()
            .timeout(endpoint.timeout)
            .connect_timeout(endpoint.timeout);
        if base.starts_with("https://") {
            let tls = TlsConfig {
                ca_file: endpoint.ca_file.clone(),
                ..TlsConfig::default()
            };
            let config = stepline::exporter::client_config(&tls, stepline::exporter::ALPN_HTTP)
                .map_err(|e| CliError::Usage(format!("--ca-file: {e}")))?;
            builder = builder.use_preconfigured_tls(config);
        }
        let client = builder
            .build()
            .map_err(|e| CliError::Usage(format!("cannot build the HTTP client: {e}")))?;
        Ok(Self {
            client,
            base,
            token: endpoint.token.clone().filter(|t| !t.is_empty()),
        })
    }

    /// The full URL of `path` (which starts with `/`).
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// `GET path?query`, answered 2xx, else the error the status says.
    pub fn get(&self, path: &str, query: &[(&str, String)]) -> Result<Answer, CliError> {
        self.send(self.client.get(self.url(path)).query(query), path)
    }

    /// `POST path?query`, answered 2xx, else the error the status says.
    pub fn post(&self, path: &str, query: &[(&str, String)]) -> Result<Answer, CliError> {
        self.send(self.client.post(self.url(path)).query(query), path)
    }

    /// `DELETE path`, answered 2xx, else the error the status says.
    pub fn delete(&self, path: &str) -> Result<Answer, CliError> {
        self.send(self.client.delete(self.url(path)), path)
    }

    fn send(&self, mut request: RequestBuilder, path: &str) -> Result<Answer, CliError> {
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        let response = request.send().map_err(|e| self.transport_error(e))?;
        let status = response.status().as_u16();
        let body = read_body(response);
        let answer = Answer { status, body };
        if (200..300).contains(&status) {
            return Ok(answer);
        }
        let message = error_message(&answer);
        let said = format!("{} {path}: {status}: {message}", self.base);
        Err(match status {
            404 => CliError::NotFound(message),
            401 | 403 => CliError::Unauthorized(said),
            500..=599 => CliError::Server(said),
            _ => CliError::Usage(message),
        })
    }

    fn transport_error(&self, e: reqwest::Error) -> CliError {
        if e.is_connect() || e.is_timeout() {
            CliError::Connect {
                url: self.base.clone(),
                reason: error_chain(&e),
            }
        } else {
            CliError::Server(format!("{}: {}", self.base, error_chain(&e)))
        }
    }
}

/// Reads a body, at most [`MAX_ANSWER_BYTES`] of it. A read error mid-body leaves a truncated
/// body, which the JSON parse that follows reports.
fn read_body(response: Response) -> Vec<u8> {
    use std::io::Read;
    let mut body = Vec::new();
    let _ = response.take(MAX_ANSWER_BYTES).read_to_end(&mut body);
    body
}

/// The `error` of the API's `{"error": ...}` body, else the body's text (cut short).
fn error_message(answer: &Answer) -> String {
    if let Ok(Value::Object(map)) = serde_json::from_slice::<Value>(&answer.body) {
        if let Some(Value::String(e)) = map.get("error") {
            return e.clone();
        }
    }
    let text = String::from_utf8_lossy(&answer.body);
    let text: String = text.chars().take(300).collect();
    if text.trim().is_empty() {
        format!("HTTP {}", answer.status)
    } else {
        text
    }
}

/// An error and its sources, joined (reqwest's own message hides the cause).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}
