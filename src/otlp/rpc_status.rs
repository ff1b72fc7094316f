//! The `google.rpc.Status` error body of OTLP, and the `google.rpc.RetryInfo` detail that tells
//! a gRPC client how long to wait; encoded with prost, without a dependency on googleapis crates.

use std::time::Duration;

/// `google.rpc.Status`: the body of every OTLP error response.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct RpcStatus {
    /// A `google.rpc.Code` (the gRPC status code) value.
    #[prost(int32, tag = "1")]
    pub code: i32,
    /// A developer-facing message in English.
    #[prost(string, tag = "2")]
    pub message: String,
    /// Typed details, e.g. a `google.rpc.RetryInfo`.
    #[prost(message, repeated, tag = "3")]
    pub details: Vec<ProtoAny>,
}

/// `google.protobuf.Any`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ProtoAny {
    /// The type URL of the packed message.
    #[prost(string, tag = "1")]
    pub type_url: String,
    /// The packed message, protobuf-encoded.
    #[prost(bytes = "vec", tag = "2")]
    pub value: Vec<u8>,
}

/// `google.rpc.RetryInfo`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct RetryInfo {
    /// How long the client should wait before retrying.
    #[prost(message, optional, tag = "1")]
    pub retry_delay: Option<ProtoDuration>,
}

/// `google.protobuf.Duration`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ProtoDuration {
    /// Whole seconds.
    #[prost(int64, tag = "1")]
    pub seconds: i64,
    /// Nanoseconds beyond the whole seconds.
    #[prost(int32, tag = "2")]
    pub nanos: i32,
}

/// The type URL of `google.rpc.RetryInfo` inside an `Any`.
pub(crate) const RETRY_INFO_TYPE_URL: &str = "type.googleapis.com/google.rpc.RetryInfo";

impl RpcStatus {
    /// A status without details.
    pub(crate) fn new(code: tonic::Code, message: impl Into<String>) -> Self {
        Self {
            code: code as i32,
            message: message.into(),
            details: Vec::new(),
        }
    }

    /// Adds a `google.rpc.RetryInfo` detail asking the client to wait `delay`.
    pub(crate) fn with_retry_delay(mut self, delay: Duration) -> Self {
        let info = RetryInfo {
            retry_delay: Some(ProtoDuration {
                seconds: i64::try_from(delay.as_secs()).unwrap_or(i64::MAX),
                // Always below 1e9, so it fits.
                nanos: i32::try_from(delay.subsec_nanos()).unwrap_or(0),
            }),
        };
        self.details.push(ProtoAny {
            type_url: RETRY_INFO_TYPE_URL.to_string(),
            value: prost::Message::encode_to_vec(&info),
        });
        self
    }

    /// The delay of the first `google.rpc.RetryInfo` detail, if there is one.
    pub(crate) fn retry_delay(&self) -> Option<Duration> {
        self.details
            .iter()
            .filter(|detail| detail.type_url == RETRY_INFO_TYPE_URL)
            .find_map(|detail| prost::Message::decode(detail.value.as_slice()).ok())
            .and_then(|info: RetryInfo| info.retry_delay)
            .map(|delay| {
                Duration::new(
                    u64::try_from(delay.seconds).unwrap_or(0),
                    u32::try_from(delay.nanos).unwrap_or(0),
                )
            })
    }

    /// The OTLP/JSON form: `{"code": 3, "message": "..."}` (details are not rendered in JSON;
    /// HTTP clients get the retry delay from `Retry-After`).
    pub(crate) fn to_json(&self) -> Vec<u8> {
        let value = serde_json::json!({ "code": self.code, "message": self.message });
        value.to_string().into_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn retry_info_round_trips() {
        let status = RpcStatus::new(tonic::Code::Unavailable, "busy")
            .with_retry_delay(Duration::from_millis(1500));
        let decoded = RpcStatus::decode(status.encode_to_vec().as_slice()).unwrap();
        assert_eq!(decoded.code, tonic::Code::Unavailable as i32);
        assert_eq!(decoded.details[0].type_url, RETRY_INFO_TYPE_URL);
        assert_eq!(decoded.retry_delay(), Some(Duration::from_millis(1500)));
        let info = RetryInfo::decode(decoded.details[0].value.as_slice()).unwrap();
        assert_eq!(
            info.retry_delay,
            Some(ProtoDuration {
                seconds: 1,
                nanos: 500_000_000
            })
        );
    }

    #[test]
    fn json_form_has_code_and_message() {
        let json = RpcStatus::new(tonic::Code::InvalidArgument, "bad \"x\"").to_json();
        let value: serde_json::Value = serde_json::from_slice(&json).unwrap();
        assert_eq!(
            value,
            serde_json::json!({"code": 3, "message": "bad \"x\""})
        );
    }
}
