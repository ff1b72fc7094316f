//! TLS for the exporters: one rustls client configuration (trusted roots, client certificate,
//! server verification) built from the `tls` settings, used by both transports. gRPC dials
//! through [`TlsConnector`] (tonic is built without its own TLS), OTLP/HTTP hands the
//! configuration to reqwest.
//!
//! Reading the PEM files is the only I/O; it happens once, when the exporter is built, and
//! its failures name the key they come from (`tls.ca_file`, …).

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use hyper_util::rt::TokioIo;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{
    verify_tls12_signature, verify_tls13_signature, CryptoProvider, WebPkiSupportedAlgorithms,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio::net::TcpStream;

use crate::config::TlsConfig;
use crate::otlp::TlsError;

/// ALPN for gRPC (HTTP/2 only).
pub const ALPN_GRPC: &[&[u8]] = &[b"h2"];
/// ALPN for OTLP/HTTP (the HTTP client speaks HTTP/1.1).
pub const ALPN_HTTP: &[&[u8]] = &[b"http/1.1"];

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The rustls client configuration for `tls`, offering `alpn`.
pub fn client_config(tls: &TlsConfig, alpn: &[&[u8]]) -> Result<ClientConfig, TlsError> {
    let provider = provider();
    let algorithms = provider.signature_verification_algorithms;
    let verifier: Arc<dyn ServerCertVerifier> = if tls.insecure_skip_verify {
        Arc::new(AnyCertificate(algorithms))
    } else {
        let roots = Arc::new(roots(tls.ca_file.as_deref())?);
        let webpki = WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
            .build()
            .map_err(|e| TlsError::new("tls.ca_file", e.to_string()))?;
        match &tls.server_name_override {
            Some(name) => {
                let name = ServerName::try_from(name.clone()).map_err(|e| {
                    TlsError::new("tls.server_name_override", format!("\"{name}\": {e}"))
                })?;
                Arc::new(NamedServer {
                    inner: webpki,
                    name,
                })
            }
            None => webpki,
        }
    };
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::new("tls", e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let mut config = match (&tls.cert_file, &tls.key_file) {
        (Some(cert), Some(key)) => {
            let chain = certificates(cert, "tls.cert_file")?;
            let key = PrivateKeyDer::from_pem_file(key).map_err(|e| {
                TlsError::new(
                    "tls.key_file",
                    format!("no usable PEM private key in {}: {e}", key.display()),
                )
            })?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| TlsError::new("tls.key_file", format!("not usable: {e}")))?
        }
        _ => builder.with_no_client_auth(),
    };
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(config)
}

/// The CA certificates of `ca_file`, or the Mozilla root set.
fn roots(ca_file: Option<&Path>) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    match ca_file {
        Some(file) => {
            for certificate in certificates(file, "tls.ca_file")? {
                roots.add(certificate).map_err(|e| {
                    TlsError::new(
                        "tls.ca_file",
                        format!("bad CA certificate in {}: {e}", file.display()),
                    )
                })?;
            }
        }
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    Ok(roots)
}

/// Every certificate of a PEM file (at least one).
fn certificates(file: &Path, key: &'static str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let unreadable = |e: rustls::pki_types::pem::Error| {
        TlsError::new(key, format!("cannot read {}: {e}", file.display()))
    };
    let certificates = CertificateDer::pem_file_iter(file)
        .map_err(unreadable)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(unreadable)?;
    if certificates.is_empty() {
        return Err(TlsError::new(
            key,
            format!("no PEM certificate in {}", file.display()),
        ));
    }
    Ok(certificates)
}

/// Verifies the server certificate for a fixed name (`server_name_override`).
#[derive(Debug)]
struct NamedServer {
    inner: Arc<WebPkiServerVerifier>,
    name: ServerName<'static>,
}

impl ServerCertVerifier for NamedServer {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.inner
            .verify_server_cert(end_entity, intermediates, &self.name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// `insecure_skip_verify`: any certificate is accepted (the handshake signatures are still
/// checked, so the connection is encrypted, just not authenticated).
#[derive(Debug)]
struct AnyCertificate(WebPkiSupportedAlgorithms);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(message, cert, dss, &self.0)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.0)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_schemes()
    }
}

/// The gRPC channel's connector for `https://` endpoints: TCP, then a TLS handshake with the
/// exporter's configuration (SNI: `server_name_override`, else the endpoint's host).
#[derive(Clone)]
pub struct TlsConnector {
    config: Arc<ClientConfig>,
    server_name: Option<ServerName<'static>>,
}

impl TlsConnector {
    /// A connector using `config`; `server_name` replaces the endpoint's host in SNI.
    pub fn new(config: ClientConfig, server_name: Option<&str>) -> Self {
        Self {
            config: Arc::new(config),
            server_name: server_name.and_then(|name| ServerName::try_from(name.to_owned()).ok()),
        }
    }
}

type Connecting = Pin<
    Box<
        dyn Future<Output = std::io::Result<TokioIo<tokio_rustls::client::TlsStream<TcpStream>>>>
            + Send,
    >,
>;

impl tower::Service<http::Uri> for TlsConnector {
    type Response = TokioIo<tokio_rustls::client::TlsStream<TcpStream>>;
    type Error = std::io::Error;
    type Future = Connecting;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        let (config, server_name) = (self.config.clone(), self.server_name.clone());
        Box::pin(async move {
            let invalid =
                |message: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, message);
            let host = uri
                .host()
                .map(|h| h.trim_start_matches('[').trim_end_matches(']').to_owned())
                .ok_or_else(|| invalid(format!("no host in {uri}")))?;
            let port = uri.port_u16().unwrap_or(443);
            let name = match server_name {
                Some(name) => name,
                None => ServerName::try_from(host.clone())
                    .map_err(|e| invalid(format!("\"{host}\" as a TLS server name: {e}")))?,
            };
            let tcp = TcpStream::connect((host.as_str(), port)).await?;
            tcp.set_nodelay(true)?;
            let tls = tokio_rustls::TlsConnector::from(config)
                .connect(name, tcp)
                .await?;
            Ok(TokioIo::new(tls))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn unreadable_files_name_their_key() {
        let missing = TlsConfig {
            ca_file: Some(PathBuf::from("/nonexistent/ca.pem")),
            ..TlsConfig::default()
        };
        let error = client_config(&missing, ALPN_GRPC).unwrap_err();
        assert_eq!(error.key, "tls.ca_file");
        assert!(error.message.contains("/nonexistent/ca.pem"), "{error}");

        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate").unwrap();
        let error = client_config(
            &TlsConfig {
                cert_file: Some(empty.clone()),
                key_file: Some(empty),
                ..TlsConfig::default()
            },
            ALPN_HTTP,
        )
        .unwrap_err();
        assert_eq!(error.key, "tls.cert_file");
        assert!(error.message.starts_with("no PEM certificate"), "{error}");

        let defaults = client_config(&TlsConfig::default(), ALPN_GRPC).unwrap();
        assert_eq!(defaults.alpn_protocols, [b"h2".to_vec()]);
    }
}
