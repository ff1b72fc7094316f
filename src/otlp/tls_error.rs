//! The error of an unusable TLS setting, shared by the receivers' server side and the
//! exporters' client side so each names the key it comes from the same way.

/// A TLS setting that cannot be used, with the key it comes from (e.g. `tls.ca_file`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {message}")]
pub struct TlsError {
    /// The key under the receiver or exporter, e.g. `tls.ca_file`.
    pub key: &'static str,
    /// What is wrong.
    pub message: String,
}

impl TlsError {
    /// An error about `key`.
    pub fn new(key: &'static str, message: impl Into<String>) -> Self {
        Self {
            key,
            message: message.into(),
        }
    }
}
