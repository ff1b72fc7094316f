//! A gRPC unary call whose request message is the concatenation of stored byte strings, sent
//! without copying them: the request body is the 5-byte gRPC message prefix followed by the
//! parts as they are, one HTTP/2 data chunk each (h2 writes large chunks with vectored writes,
//! from the parts themselves). tonic's codec path instead copies the message into its encode
//! buffer (and the batch into one message before that), which for a batch of megabytes is two
//! copies into freshly faulted-in memory per request.
//!
//! The request is built as tonic builds it (POST, `te: trailers`, `content-type:
//! application/grpc`, the exporter's metadata without gRPC's reserved headers, `grpc-timeout`),
//! and the response is read with tonic's own [`Streaming`], so statuses, trailers and errors come
//! out as they do from `tonic::client::Grpc::unary`. Uncompressed requests only: a compressed
//! one needs the message in one piece anyway and goes through tonic.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, TE};
use http::uri::PathAndQuery;
use http::{HeaderName, HeaderValue, Method, Request, Version};
use http_body::Frame;
use tonic::codec::{Decoder, Streaming};
use tonic::metadata::MetadataMap;
use tonic::transport::Channel;
use tonic::Status;
use tower::{Service, ServiceExt};

/// Headers a caller's metadata may not set (tonic removes the same ones).
const RESERVED: [&str; 5] = [
    "te",
    "content-type",
    "grpc-message",
    "grpc-message-type",
    "grpc-status",
];

/// The gRPC length-prefixed message framing: a compression flag (0) and the length.
const PREFIX_BYTES: usize = 5;

/// A request body of ready chunks, sent in order. Its size is not announced (no
/// `content-length`), as with tonic's own request bodies.
pub(super) struct Chunks {
    chunks: VecDeque<Bytes>,
}

impl Chunks {
    /// The framed message made of `parts`, or an error when it is over gRPC's 4 GiB framing
    /// limit.
    pub(super) fn message(parts: Vec<Bytes>) -> Result<Self, Status> {
        let len: usize = parts.iter().map(Bytes::len).sum();
        let len = u32::try_from(len).map_err(|_| {
            Status::resource_exhausted(format!(
                "a request of {len} bytes is over gRPC's message size limit"
            ))
        })?;
        let mut prefix = [0u8; PREFIX_BYTES];
        prefix[1..].copy_from_slice(&len.to_be_bytes());
        let mut chunks = VecDeque::with_capacity(parts.len() + 1);
        chunks.push_back(Bytes::copy_from_slice(&prefix));
        chunks.extend(parts.into_iter().filter(|p| !p.is_empty()));
        Ok(Self { chunks })
    }
}

impl http_body::Body for Chunks {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready(self.chunks.pop_front().map(|chunk| Ok(Frame::data(chunk))))
    }

    fn is_end_stream(&self) -> bool {
        self.chunks.is_empty()
    }
}

/// `grpc-timeout` for `timeout`, in the most precise unit that fits the 8 digits gRPC allows.
fn grpc_timeout(timeout: Duration) -> String {
    let units: [(char, u128); 5] = [
        ('n', timeout.as_nanos()),
        ('u', timeout.as_micros()),
        ('m', timeout.as_millis()),
        ('S', u128::from(timeout.as_secs())),
        ('M', u128::from(timeout.as_secs() / 60)),
    ];
    units
        .iter()
        .find(|(_, value)| *value <= 99_999_999)
        .map_or_else(
            || format!("{}H", (timeout.as_secs() / 3600).min(99_999_999)),
            |(unit, value)| format!("{value}{unit}"),
        )
}

/// Calls `path` on `channel` with the message `parts` (concatenated), `metadata` and
/// `timeout`, and decodes the one response message with `decoder`, as
/// `tonic::client::Grpc::unary` does.
pub(super) async fn unary<D, R>(
    channel: &Channel,
    path: PathAndQuery,
    metadata: &MetadataMap,
    timeout: Duration,
    parts: Vec<Bytes>,
    decoder: D,
) -> Result<R, Status>
where
    D: Decoder<Item = R, Error = Status> + Send + 'static,
    R: Send + 'static,
{
    let body = Chunks::message(parts)?;
    let mut request = Request::builder()
        .method(Method::POST)
        .uri(http::Uri::from(path))
        .version(Version::HTTP_2)
        .body(tonic::body::Body::new(body))
        .map_err(|e| Status::internal(format!("building the request: {e}")))?;
    let headers = request.headers_mut();
    *headers = metadata.clone().into_headers();
    for name in RESERVED {
        headers.remove(name);
    }
    headers.insert(TE, HeaderValue::from_static("trailers"));
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    if let Ok(value) = HeaderValue::from_str(&grpc_timeout(timeout)) {
        headers.insert(HeaderName::from_static("grpc-timeout"), value);
    }

    let mut channel = channel.clone();
    // Worded as tonic's generated clients word it.
    let ready = ServiceExt::<http::Request<tonic::body::Body>>::ready(&mut channel)
        .await
        .map_err(|e| Status::unknown(format!("Service was not ready: {e}")))?;
    let response = ready
        .call(request)
        .await
        .map_err(|e| Status::from_error(e.into()))?;

    // A trailers-only response (every error) carries its status in the headers.
    if let Some(status) = Status::from_header_map(response.headers()) {
        if status.code() != tonic::Code::Ok {
            return Err(status);
        }
    }
    let status_code = response.status();
    let mut streaming =
        Streaming::new_response(decoder, response.into_body(), status_code, None, None);
    let message = streaming
        .message()
        .await?
        .ok_or_else(|| Status::internal("Missing response message."))?;
    streaming.trailers().await?;
    Ok(message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body::Body as _;

    #[test]
    fn the_message_is_the_prefix_then_the_parts_as_they_are() {
        let parts = vec![
            Bytes::from_static(b"abc"),
            Bytes::new(),
            Bytes::from(vec![7u8; 300]),
        ];
        let first = parts[2].as_ptr();
        let mut body = Chunks::message(parts).unwrap();
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut chunks = Vec::new();
        while let Poll::Ready(Some(Ok(frame))) = Pin::new(&mut body).poll_frame(&mut cx) {
            chunks.push(frame.into_data().unwrap());
        }
        assert!(body.is_end_stream());
        assert_eq!(chunks.len(), 3, "the empty part is left out");
        assert_eq!(&chunks[0][..], &[0, 0, 0, 1, 47]);
        assert_eq!(&chunks[1][..], b"abc");
        assert_eq!(chunks[2].as_ptr(), first, "a part is sent without a copy");
    }

    #[test]
    fn grpc_timeouts_use_at_most_eight_digits() {
        assert_eq!(grpc_timeout(Duration::from_millis(500)), "500000u");
        assert_eq!(grpc_timeout(Duration::from_secs(30)), "30000000u");
        assert_eq!(grpc_timeout(Duration::from_secs(3600)), "3600000m");
        assert_eq!(grpc_timeout(Duration::from_nanos(5)), "5n");
        assert_eq!(grpc_timeout(Duration::from_secs(u64::MAX)), "99999999H");
    }
}
