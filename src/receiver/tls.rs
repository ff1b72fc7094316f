//! TLS for the receivers: the rustls server configuration built from a protocol's `tls` block
//! (certificate chain and key, optional client CA for mutual TLS, lowest version), and
//! [`TlsIncoming`], a listener that completes handshakes off the accept loop and hands the
//! finished connections to the gRPC server (as a stream) or the HTTP server (as an axum
//! listener).
//!
//! A handshake gets [`HANDSHAKE_TIMEOUT`] and at most [`MAX_PENDING_HANDSHAKES`] run at once,
//! so clients that connect and never finish the handshake cannot stall the listener or hold
//! unbounded memory. Reading the PEM files is the only I/O; it happens when the receiver is
//! built, and by `--validate-config` through [`check_tls`].

use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};
use tokio::task::JoinHandle;
use tokio_rustls::server::TlsStream;
use tonic::transport::server::{Connected, TcpConnectInfo};

use crate::config::{Config, ConfigError, ConfigProblem, ServerTlsConfig, TlsVersion};
use crate::otlp::TlsError;

/// ALPN the gRPC receiver offers (HTTP/2 only).
pub const ALPN_GRPC: &[&[u8]] = &[b"h2"];
/// ALPN the HTTP receiver offers.
pub const ALPN_HTTP: &[&[u8]] = &[b"h2", b"http/1.1"];

/// How long a client has to complete the TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Handshakes in progress at once; further connections wait in the kernel's accept queue.
pub const MAX_PENDING_HANDSHAKES: usize = 256;

fn tls_error(key: &'static str, message: impl Into<String>) -> TlsError {
    TlsError {
        key,
        message: message.into(),
    }
}

/// The rustls server configuration for `tls`, offering `alpn`.
pub fn server_config(tls: &ServerTlsConfig, alpn: &[&[u8]]) -> Result<ServerConfig, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let versions: &[&rustls::SupportedProtocolVersion] = match tls.min_version {
        TlsVersion::Tls12 => &[&rustls::version::TLS13, &rustls::version::TLS12],
        TlsVersion::Tls13 => &[&rustls::version::TLS13],
    };
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(versions)
        .map_err(|e| tls_error("tls.min_version", e.to_string()))?;
    let builder = match &tls.client_ca_file {
        Some(file) => {
            let mut roots = RootCertStore::empty();
            for certificate in certificates(file, "tls.client_ca_file")? {
                roots.add(certificate).map_err(|e| {
                    tls_error(
                        "tls.client_ca_file",
                        format!("bad CA certificate in {}: {e}", file.display()),
                    )
                })?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| tls_error("tls.client_ca_file", e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let chain = certificates(&tls.cert_file, "tls.cert_file")?;
    let key = PrivateKeyDer::from_pem_file(&tls.key_file).map_err(|e| {
        tls_error(
            "tls.key_file",
            format!(
                "no usable PEM private key in {}: {e}",
                tls.key_file.display()
            ),
        )
    })?;
    let mut config = builder.with_single_cert(chain, key).map_err(|e| {
        tls_error(
            "tls.key_file",
            format!("does not go with tls.cert_file: {e}"),
        )
    })?;
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(config)
}

/// Every certificate of a PEM file (at least one).
fn certificates(file: &Path, key: &'static str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let unreadable = |e: rustls::pki_types::pem::Error| {
        tls_error(key, format!("cannot read {}: {e}", file.display()))
    };
    let certificates = CertificateDer::pem_file_iter(file)
        .map_err(unreadable)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(unreadable)?;
    if certificates.is_empty() {
        return Err(tls_error(
            key,
            format!("no PEM certificate in {}", file.display()),
        ));
    }
    Ok(certificates)
}

/// Reads the receivers' TLS files, as at start, and reports each unusable one with its key
/// path (e.g. `receivers.otlp.protocols.grpc.tls.key_file: no usable PEM private key in …`).
pub fn check_tls(config: &Config) -> Result<(), ConfigError> {
    let blocks = [
        config
            .receiver
            .grpc
            .as_ref()
            .and_then(|g| g.tls.as_ref())
            .map(|t| (t, ALPN_GRPC)),
        config
            .receiver
            .http
            .as_ref()
            .and_then(|h| h.tls.as_ref())
            .map(|t| (t, ALPN_HTTP)),
    ];
    let problems: Vec<ConfigProblem> = blocks
        .into_iter()
        .flatten()
        .filter_map(|(tls, alpn)| {
            server_config(tls, alpn).err().map(|error| {
                let key = error.key.strip_prefix("tls").unwrap_or(error.key);
                ConfigProblem::new(format!("{}{key}", tls.key_path), error.message)
            })
        })
        .collect();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(ConfigError::Invalid {
            file: config.source.clone(),
            problems,
        })
    }
}

/// A TLS connection accepted by [`TlsIncoming`].
#[derive(Debug)]
pub struct TlsConnection(TlsStream<TcpStream>);

impl AsyncRead for TlsConnection {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsConnection {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }
}

impl Connected for TlsConnection {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.0.get_ref().0.connect_info()
    }
}

/// Accepts TCP connections and completes their TLS handshakes in the background; finished
/// connections come out of it as a stream (for tonic) or through [`axum::serve::Listener`].
/// Dropping it stops accepting.
#[derive(Debug)]
pub struct TlsIncoming {
    connections: mpsc::Receiver<(TlsConnection, SocketAddr)>,
    local_addr: io::Result<SocketAddr>,
    acceptor: JoinHandle<()>,
}

impl TlsIncoming {
    /// Starts accepting on `listener` with `config`.
    pub fn new(listener: TcpListener, config: Arc<ServerConfig>) -> Self {
        let local_addr = listener.local_addr();
        let (sender, connections) = mpsc::channel(MAX_PENDING_HANDSHAKES);
        let acceptor = tokio::spawn(accept_loop(
            listener,
            tokio_rustls::TlsAcceptor::from(config),
            sender,
        ));
        Self {
            connections,
            local_addr,
            acceptor,
        }
    }
}

impl Drop for TlsIncoming {
    fn drop(&mut self) {
        self.acceptor.abort();
    }
}

async fn accept_loop(
    listener: TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    sender: mpsc::Sender<(TlsConnection, SocketAddr)>,
) {
    let pending = Arc::new(Semaphore::new(MAX_PENDING_HANDSHAKES));
    loop {
        let Ok(permit) = pending.clone().acquire_owned().await else {
            return;
        };
        let (mut tcp, peer) = tokio::select! {
            _ = sender.closed() => return,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // E.g. too many open files: wait a little instead of spinning.
                    tracing::warn!(%error, "accepting a TLS connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        super::socket::no_delay(&mut tcp);
        let (acceptor, sender) = (acceptor.clone(), sender.clone());
        tokio::spawn(async move {
            let handshake = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await;
            drop(permit);
            match handshake {
                Ok(Ok(stream)) => {
                    let _ = sender.send((TlsConnection(stream), peer)).await;
                }
                Ok(Err(error)) => {
                    tracing::debug!(%peer, %error, "TLS handshake failed");
                }
                Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
            }
        });
    }
}

impl tokio_stream::Stream for TlsIncoming {
    type Item = io::Result<TlsConnection>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.connections
            .poll_recv(cx)
            .map(|next| next.map(|(connection, _)| Ok(connection)))
    }
}

impl axum::serve::Listener for TlsIncoming {
    type Io = TlsConnection;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.connections.recv().await {
            Some(accepted) => accepted,
            // The accept loop only ends when this listener is dropped.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        match &self.local_addr {
            Ok(address) => Ok(*address),
            Err(error) => Err(io::Error::new(error.kind(), error.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn tls(dir: &Path, cert: &str, key: &str) -> ServerTlsConfig {
        ServerTlsConfig {
            cert_file: dir.join(cert),
            key_file: dir.join(key),
            client_ca_file: None,
            min_version: TlsVersion::Tls12,
            key_path: "receivers.otlp.protocols.grpc.tls".into(),
        }
    }

    #[test]
    fn builds_from_rcgen_files_and_names_bad_keys() {
        let dir = tempfile::tempdir().unwrap();
        let certified = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        std::fs::write(dir.path().join("cert.pem"), certified.cert.pem()).unwrap();
        std::fs::write(
            dir.path().join("key.pem"),
            certified.signing_key.serialize_pem(),
        )
        .unwrap();
        std::fs::write(dir.path().join("junk.pem"), "not pem").unwrap();

        let config = server_config(&tls(dir.path(), "cert.pem", "key.pem"), ALPN_HTTP).unwrap();
        assert_eq!(
            config.alpn_protocols,
            [b"h2".to_vec(), b"http/1.1".to_vec()]
        );

        let mutual = ServerTlsConfig {
            client_ca_file: Some(dir.path().join("cert.pem")),
            min_version: TlsVersion::Tls13,
            ..tls(dir.path(), "cert.pem", "key.pem")
        };
        server_config(&mutual, ALPN_GRPC).unwrap();

        let error =
            server_config(&tls(dir.path(), "missing.pem", "key.pem"), ALPN_GRPC).unwrap_err();
        assert_eq!(error.key, "tls.cert_file");
        assert!(error.message.contains("missing.pem"), "{error}");
        let error = server_config(&tls(dir.path(), "junk.pem", "key.pem"), ALPN_GRPC).unwrap_err();
        assert_eq!(error.key, "tls.cert_file");
        assert!(error.message.starts_with("no PEM certificate"), "{error}");
        let error = server_config(&tls(dir.path(), "cert.pem", "junk.pem"), ALPN_GRPC).unwrap_err();
        assert_eq!(error.key, "tls.key_file");

        let other = rcgen::generate_simple_self_signed(vec!["other".into()]).unwrap();
        std::fs::write(
            dir.path().join("other.key"),
            other.signing_key.serialize_pem(),
        )
        .unwrap();
        let error =
            server_config(&tls(dir.path(), "cert.pem", "other.key"), ALPN_GRPC).unwrap_err();
        assert_eq!(error.key, "tls.key_file");
        assert!(error.message.starts_with("does not go with"), "{error}");

        let unused = PathBuf::from("/nonexistent/ca.pem");
        let error = server_config(
            &ServerTlsConfig {
                client_ca_file: Some(unused),
                ..tls(dir.path(), "cert.pem", "key.pem")
            },
            ALPN_GRPC,
        )
        .unwrap_err();
        assert_eq!(error.key, "tls.client_ca_file");
    }
}
