//! Accepted connections: every listener of stepline turns Nagle's algorithm off on them.
//!
//! Replies and HTTP/2 control frames (window updates; a response's headers, data and trailers)
//! are small writes. With Nagle's algorithm on, such a write waits for the acknowledgement of
//! the one before, which the client may hold back for up to 40 ms (delayed acknowledgement).
//! At 3,500 agent spans/s over gRPC that held the 99th percentile of durable acknowledgements
//! near 23 ms, while the server's own handling took under 12 ms for all requests but one, and
//! it capped a closed loop of 4 connections at a fraction of what the server could commit.

use axum::serve::{ListenerExt, TapIo};
use tokio::net::{TcpListener, TcpStream};
use tonic::transport::server::TcpIncoming;

/// Turns Nagle's algorithm off on an accepted connection. A failure is only logged: the
/// connection still works, with Nagle's algorithm on.
pub fn no_delay(tcp: &mut TcpStream) {
    if let Err(error) = tcp.set_nodelay(true) {
        tracing::debug!(%error, "TCP_NODELAY could not be set on an accepted connection");
    }
}

/// `listener` for `axum::serve`, with [`no_delay`] on every connection it accepts.
pub fn http_listener(listener: TcpListener) -> TapIo<TcpListener, fn(&mut TcpStream)> {
    listener.tap_io(no_delay as fn(&mut TcpStream))
}

/// `listener` for tonic's `serve_with_incoming`, with `TCP_NODELAY` on every connection it
/// accepts.
pub fn grpc_incoming(listener: TcpListener) -> TcpIncoming {
    TcpIncoming::from(listener).with_nodelay(Some(true))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::serve::Listener;
    use tokio_stream::StreamExt;

    async fn bound() -> (TcpListener, std::net::SocketAddr) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address");
        (listener, addr)
    }

    #[tokio::test]
    async fn both_kinds_of_listener_accept_connections_without_nagle_delay() {
        // A plain accepted connection has Nagle's algorithm on: the check below can fail.
        let (listener, addr) = bound().await;
        let _client = TcpStream::connect(addr).await.expect("connect");
        let (plain, _) = listener.accept().await.expect("accept");
        assert!(!plain.nodelay().expect("option"));

        let (listener, addr) = bound().await;
        let mut http = http_listener(listener);
        let _client = TcpStream::connect(addr).await.expect("connect");
        let (accepted, _) = http.accept().await;
        assert!(accepted.nodelay().expect("option"), "HTTP listener");

        let (listener, addr) = bound().await;
        let mut grpc = grpc_incoming(listener);
        let _client = TcpStream::connect(addr).await.expect("connect");
        let accepted = grpc.next().await.expect("a connection").expect("accepted");
        assert!(accepted.nodelay().expect("option"), "gRPC listener");
    }
}
