//! What protects one receiver: TLS (the rustls server configuration) and bearer-token
//! authentication, both optional, built once from the protocol's `tls` and `auth` blocks.

use std::sync::Arc;

use rustls::ServerConfig;

use super::auth::BearerAuth;
use super::tls::server_config;
use crate::config::{ReceiverAuthConfig, ServerTlsConfig};
use crate::otlp::TlsError;

/// TLS and authentication of one receiver; the default is neither (plain text, no token).
#[derive(Debug, Clone, Default)]
pub struct ReceiverSecurity {
    /// When set, the receiver speaks TLS only.
    pub tls: Option<Arc<ServerConfig>>,
    /// When set, every request must pass this check before its body is read.
    pub auth: Option<Arc<BearerAuth>>,
}

impl ReceiverSecurity {
    /// Builds the protection a protocol's `tls` and `auth` blocks describe, offering `alpn`
    /// (`tls::ALPN_GRPC` or `tls::ALPN_HTTP`); reads the PEM files.
    pub fn new(
        tls: Option<&ServerTlsConfig>,
        auth: Option<&ReceiverAuthConfig>,
        alpn: &[&[u8]],
    ) -> Result<Self, TlsError> {
        Ok(Self {
            tls: tls
                .map(|tls| server_config(tls, alpn).map(Arc::new))
                .transpose()?,
            auth: auth.map(|auth| Arc::new(BearerAuth::from_config(auth))),
        })
    }
}
