//! OTLP/HTTP payload handling: content type and encoding negotiation, bounded decompression,
//! protobuf / OTLP-JSON decoding of requests and encoding of responses.
//!
//! Everything here is plain synchronous code over byte slices, tested without sockets.

use std::io::Read;

use bytes::Bytes;
use http::header::{CONTENT_ENCODING, CONTENT_TYPE};
use http::HeaderMap;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::error::ReceiverError;
use super::wire_count::{count_json_partial, count_protobuf, Counted};
use crate::otlp::RpcStatus;
use crate::otlp::{JSON_CONTENT_TYPE, PROTOBUF_CONTENT_TYPE};

/// The payload format of an OTLP/HTTP request; the response uses the same one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PayloadFormat {
    /// Binary protobuf, `application/x-protobuf`.
    Protobuf,
    /// OTLP/JSON, `application/json`.
    Json,
}

impl PayloadFormat {
    /// The format named by the request's `Content-Type`, ignoring parameters such as `charset`.
    pub(crate) fn from_headers(headers: &HeaderMap) -> Result<Self, ReceiverError> {
        let value = headers
            .get(CONTENT_TYPE)
            .ok_or(ReceiverError::MissingContentType)?;
        let raw = String::from_utf8_lossy(value.as_bytes());
        let media_type = raw.split(';').next().unwrap_or_default().trim();
        if media_type.eq_ignore_ascii_case(PROTOBUF_CONTENT_TYPE) {
            Ok(Self::Protobuf)
        } else if media_type.eq_ignore_ascii_case(JSON_CONTENT_TYPE) {
            Ok(Self::Json)
        } else {
            Err(ReceiverError::UnsupportedContentType {
                content_type: raw.into_owned(),
            })
        }
    }

    /// The `Content-Type` of a body in this format.
    pub(crate) fn content_type(self) -> &'static str {
        match self {
            Self::Protobuf => PROTOBUF_CONTENT_TYPE,
            Self::Json => JSON_CONTENT_TYPE,
        }
    }
}

/// The `Content-Encoding` of an OTLP/HTTP request body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ContentEncoding {
    /// Not compressed.
    Identity,
    /// gzip (RFC 1952), possibly several concatenated members.
    Gzip,
    /// Zstandard, possibly several concatenated frames.
    Zstd,
}

impl ContentEncoding {
    /// The encoding named by the request's `Content-Encoding` header(s). `identity` and `none`
    /// mean no compression; more than one real coding is not supported.
    pub(crate) fn from_headers(headers: &HeaderMap) -> Result<Self, ReceiverError> {
        let mut found = Self::Identity;
        for value in headers.get_all(CONTENT_ENCODING) {
            let raw = String::from_utf8_lossy(value.as_bytes());
            for token in raw.split(',').map(str::trim) {
                let coding = if token.is_empty()
                    || token.eq_ignore_ascii_case("identity")
                    || token.eq_ignore_ascii_case("none")
                {
                    continue;
                } else if token.eq_ignore_ascii_case("gzip") || token.eq_ignore_ascii_case("x-gzip")
                {
                    Self::Gzip
                } else if token.eq_ignore_ascii_case("zstd") {
                    Self::Zstd
                } else {
                    return Err(ReceiverError::UnsupportedContentEncoding {
                        encoding: raw.into_owned(),
                    });
                };
                if found != Self::Identity {
                    return Err(ReceiverError::UnsupportedContentEncoding {
                        encoding: raw.into_owned(),
                    });
                }
                found = coding;
            }
        }
        Ok(found)
    }

    /// The coding's name in messages.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Identity => "identity",
            Self::Gzip => "gzip",
            Self::Zstd => "zstd",
        }
    }
}

/// Decompresses `body`, producing at most `limit` bytes: a larger output is refused as soon as
/// it passes the limit, so a compression bomb never inflates into memory.
pub(crate) fn decompress(
    encoding: ContentEncoding,
    body: Bytes,
    limit: usize,
) -> Result<Bytes, ReceiverError> {
    match encoding {
        ContentEncoding::Identity => {
            if body.len() > limit {
                return Err(ReceiverError::BodyTooLarge { limit });
            }
            Ok(body)
        }
        ContentEncoding::Gzip => read_bounded(
            flate2::read::MultiGzDecoder::new(&body[..]),
            encoding,
            limit,
        ),
        ContentEncoding::Zstd => {
            let decoder =
                zstd::stream::read::Decoder::with_buffer(&body[..]).map_err(|source| {
                    ReceiverError::Decompress {
                        encoding: encoding.name(),
                        source,
                    }
                })?;
            read_bounded(decoder, encoding, limit)
        }
    }
}

/// Reads `reader` to its end, failing once more than `limit` bytes come out.
fn read_bounded(
    reader: impl Read,
    encoding: ContentEncoding,
    limit: usize,
) -> Result<Bytes, ReceiverError> {
    let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    let mut out = Vec::new();
    reader
        .take(cap)
        .read_to_end(&mut out)
        .map_err(|source| ReceiverError::Decompress {
            encoding: encoding.name(),
            source,
        })?;
    if out.len() > limit {
        return Err(ReceiverError::DecompressedTooLarge {
            encoding: encoding.name(),
            limit,
        });
    }
    Ok(Bytes::from(out))
}

/// The cap on one request's items: what is counted, the most allowed, and the config key of
/// the cap (under `processors.stepline.limits`) for the refusal message.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ItemCap {
    /// What the request is counted in.
    pub(crate) counted: Counted,
    /// The most items accepted.
    pub(crate) limit: usize,
    /// The cap's config key.
    pub(crate) key: &'static str,
}

/// Counts the items of `body` without decoding it and refuses it when they are over `cap`;
/// then decodes it like [`decode_request`]. A body that cannot be counted is invalid.
pub(crate) fn decode_counted<T>(
    format: PayloadFormat,
    body: &[u8],
    message_type: &'static str,
    cap: ItemCap,
) -> Result<T, ReceiverError>
where
    T: prost::Message + Default + DeserializeOwned,
{
    let limit = u64::try_from(cap.limit).unwrap_or(u64::MAX);
    let count = match format {
        PayloadFormat::Protobuf => {
            count_protobuf(cap.counted, body).map_err(|err| ReceiverError::InvalidWire {
                message_type,
                reason: err.0,
            })?
        }
        PayloadFormat::Json => match count_json_partial(cap.counted, body) {
            Ok(count) => count,
            // Not JSON the decoder takes either: its error names the JSON path. Decoded only
            // when what came before the error is within the cap.
            Err((err, count)) if count <= limit => {
                decode_request::<T>(format, body, message_type)?;
                return Err(ReceiverError::InvalidJson {
                    message_type,
                    reason: err.0,
                });
            }
            Err((_, count)) => count,
        },
    };
    if count > limit {
        return Err(ReceiverError::TooManyItems {
            noun: cap.counted.noun(),
            count,
            limit: cap.limit,
            key: cap.key,
        });
    }
    decode_request(format, body, message_type)
}

/// Decodes an export request of type `T` (named `message_type` in errors) from `body`.
///
/// JSON follows OTLP/JSON (lowerCamelCase names, hex trace and span ids, unknown fields
/// ignored); its errors name the JSON path of the offending value.
pub(crate) fn decode_request<T>(
    format: PayloadFormat,
    body: &[u8],
    message_type: &'static str,
) -> Result<T, ReceiverError>
where
    T: prost::Message + Default + DeserializeOwned,
{
    match format {
        PayloadFormat::Protobuf => {
            T::decode(body).map_err(|source| ReceiverError::InvalidProtobuf {
                message_type,
                source,
            })
        }
        PayloadFormat::Json => {
            let invalid = |reason: String| ReceiverError::InvalidJson {
                message_type,
                reason,
            };
            let mut deserializer = serde_json::Deserializer::from_slice(body);
            let request: T =
                serde_path_to_error::deserialize(&mut deserializer).map_err(|err| {
                    let path = err.path().to_string();
                    if path == "." {
                        invalid(err.into_inner().to_string())
                    } else {
                        invalid(format!("at {path}: {}", err.into_inner()))
                    }
                })?;
            deserializer.end().map_err(|err| invalid(err.to_string()))?;
            Ok(request)
        }
    }
}

/// Encodes an export response in `format`. JSON leaves unset fields out.
pub(crate) fn encode_response<T>(
    format: PayloadFormat,
    response: &T,
) -> Result<Vec<u8>, ReceiverError>
where
    T: prost::Message + Serialize,
{
    match format {
        PayloadFormat::Protobuf => Ok(response.encode_to_vec()),
        PayloadFormat::Json => {
            let mut value = serde_json::to_value(response)
                .map_err(|err| ReceiverError::Internal(format!("encoding JSON response: {err}")))?;
            drop_nulls(&mut value);
            Ok(value.to_string().into_bytes())
        }
    }
}

/// Encodes an error body (`google.rpc.Status`) in `format`.
pub(crate) fn encode_status(format: PayloadFormat, status: &RpcStatus) -> Vec<u8> {
    match format {
        PayloadFormat::Protobuf => prost::Message::encode_to_vec(status),
        PayloadFormat::Json => status.to_json(),
    }
}

/// Removes `null` members from every JSON object (unset optional messages).
fn drop_nulls(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Object(map) => {
            map.retain(|_, member| !member.is_null());
            map.values_mut().for_each(drop_nulls);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(drop_nulls),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use http::HeaderValue;
    use opentelemetry_proto::tonic::collector::trace::v1::{
        ExportTracePartialSuccess, ExportTraceServiceRequest, ExportTraceServiceResponse,
    };
    use prost::Message;

    use super::*;

    fn headers(name: http::HeaderName, values: &[&str]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for value in values {
            map.append(name.clone(), HeaderValue::from_str(value).unwrap());
        }
        map
    }

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        encoder.write_all(data).unwrap();
        encoder.finish().unwrap()
    }

    #[test]
    fn content_type_ignores_parameters_and_case() {
        let parse = |value: &str| PayloadFormat::from_headers(&headers(CONTENT_TYPE, &[value]));
        assert_eq!(
            parse("application/x-protobuf").unwrap(),
            PayloadFormat::Protobuf
        );
        assert_eq!(
            parse("application/json; charset=utf-8").unwrap(),
            PayloadFormat::Json
        );
        assert_eq!(parse(" Application/JSON ").unwrap(), PayloadFormat::Json);
        let err = parse("text/plain").unwrap_err();
        assert_eq!(
            err.to_string(),
            "unsupported Content-Type \"text/plain\": use application/x-protobuf or application/json"
        );
        let missing = PayloadFormat::from_headers(&HeaderMap::new()).unwrap_err();
        assert!(matches!(missing, ReceiverError::MissingContentType));
    }

    #[test]
    fn content_encoding_accepts_known_codings_only() {
        let parse =
            |values: &[&str]| ContentEncoding::from_headers(&headers(CONTENT_ENCODING, values));
        assert_eq!(parse(&[]).unwrap(), ContentEncoding::Identity);
        assert_eq!(parse(&["identity"]).unwrap(), ContentEncoding::Identity);
        assert_eq!(parse(&["none"]).unwrap(), ContentEncoding::Identity);
        assert_eq!(parse(&["GZIP"]).unwrap(), ContentEncoding::Gzip);
        assert_eq!(parse(&["zstd"]).unwrap(), ContentEncoding::Zstd);
        assert_eq!(parse(&["identity, zstd"]).unwrap(), ContentEncoding::Zstd);
        let err = parse(&["br"]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "unsupported Content-Encoding \"br\": use gzip, zstd or identity"
        );
        assert!(parse(&["gzip", "zstd"]).is_err());
    }

    #[test]
    fn gzip_and_zstd_round_trip() {
        let data = b"hello otlp".repeat(100);
        let out = decompress(ContentEncoding::Gzip, gzip(&data).into(), 10_000).unwrap();
        assert_eq!(out, data);
        let zstd_body = zstd::encode_all(&data[..], 3).unwrap();
        let out = decompress(ContentEncoding::Zstd, zstd_body.into(), 10_000).unwrap();
        assert_eq!(out, data);
    }

    #[test]
    fn concatenated_gzip_members_are_all_read() {
        let mut body = gzip(b"first ");
        body.extend(gzip(b"second"));
        let out = decompress(ContentEncoding::Gzip, body.into(), 100).unwrap();
        assert_eq!(out, &b"first second"[..]);
    }

    #[test]
    fn truncated_streams_are_rejected() {
        let data = b"some payload that compresses".repeat(50);
        let body = gzip(&data);
        let err = decompress(
            ContentEncoding::Gzip,
            Bytes::copy_from_slice(&body[..body.len() / 2]),
            10_000,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid gzip body: incomplete deflate stream"
        );
        // Cut inside the CRC/length trailer.
        let err = decompress(
            ContentEncoding::Gzip,
            Bytes::copy_from_slice(&body[..body.len() - 3]),
            10_000,
        )
        .unwrap_err();
        assert_eq!(err.to_string(), "invalid gzip body: unexpected end of file");

        let body = zstd::encode_all(&data[..], 3).unwrap();
        let err = decompress(
            ContentEncoding::Zstd,
            Bytes::copy_from_slice(&body[..body.len() - 3]),
            10_000,
        )
        .unwrap_err();
        assert_eq!(err.to_string(), "invalid zstd body: incomplete frame");

        let err =
            decompress(ContentEncoding::Gzip, Bytes::from_static(b"not gzip"), 100).unwrap_err();
        assert!(err.to_string().starts_with("invalid gzip body: "), "{err}");
    }

    #[test]
    fn bombs_stop_at_the_limit() {
        // 64 MiB of zeros compresses to a few tens of KiB.
        let zeros = vec![0u8; 64 * 1024 * 1024];
        let bomb = gzip(&zeros);
        assert!(bomb.len() < 1024 * 1024);
        let err = decompress(ContentEncoding::Gzip, bomb.into(), 1024 * 1024).unwrap_err();
        assert!(matches!(
            err,
            ReceiverError::DecompressedTooLarge {
                encoding: "gzip",
                limit: 1_048_576
            }
        ));
        assert_eq!(
            err.to_string(),
            "request body exceeds the limit of 1048576 bytes after gzip decompression"
        );
        let zstd_bomb = zstd::encode_all(&zeros[..], 3).unwrap();
        let err = decompress(ContentEncoding::Zstd, zstd_bomb.into(), 1024).unwrap_err();
        assert!(matches!(err, ReceiverError::DecompressedTooLarge { .. }));

        let err = decompress(ContentEncoding::Identity, Bytes::from(vec![1; 11]), 10).unwrap_err();
        assert!(matches!(err, ReceiverError::BodyTooLarge { limit: 10 }));
        // Exactly at the limit is fine.
        let out = decompress(ContentEncoding::Gzip, gzip(&[7; 10]).into(), 10).unwrap();
        assert_eq!(out.len(), 10);
    }

    #[test]
    fn otlp_json_example_decodes_with_hex_ids() {
        // From opentelemetry-proto/examples/trace.json, with a string timestamp as well.
        let json = r#"{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name",
            "value":{"stringValue":"my.service"}}]},"scopeSpans":[{"scope":{"name":"my.library",
            "version":"1.0.0"},"spans":[{"traceId":"5B8EFFF798038103D269B633813FC60C",
            "spanId":"EEE19B7EC3C1B174","parentSpanId":"EEE19B7EC3C1B173",
            "name":"I'm a server span","startTimeUnixNano":1544712660000000000,
            "endTimeUnixNano":"1544712661000000000","kind":2,"unknownField":true,
            "attributes":[{"key":"my.span.attr","value":{"stringValue":"some value"}}]}]}]}]}"#;
        let request: ExportTraceServiceRequest = decode_request(
            PayloadFormat::Json,
            json.as_bytes(),
            "ExportTraceServiceRequest",
        )
        .unwrap();
        let span = &request.resource_spans[0].scope_spans[0].spans[0];
        assert_eq!(
            span.trace_id,
            [
                0x5B, 0x8E, 0xFF, 0xF7, 0x98, 0x03, 0x81, 0x03, 0xD2, 0x69, 0xB6, 0x33, 0x81, 0x3F,
                0xC6, 0x0C
            ]
        );
        assert_eq!(
            span.span_id,
            [0xEE, 0xE1, 0x9B, 0x7E, 0xC3, 0xC1, 0xB1, 0x74]
        );
        assert_eq!(span.name, "I'm a server span");
        assert_eq!(span.kind, 2);
        assert_eq!(span.start_time_unix_nano, 1_544_712_660_000_000_000);
        assert_eq!(span.end_time_unix_nano, 1_544_712_661_000_000_000);
    }

    #[test]
    fn invalid_payloads_say_what_is_wrong() {
        let err = decode_request::<ExportTraceServiceRequest>(
            PayloadFormat::Protobuf,
            b"\xff\xff\xff garbage",
            "ExportTraceServiceRequest",
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("invalid protobuf ExportTraceServiceRequest: "),
            "{err}"
        );

        let err = decode_request::<ExportTraceServiceRequest>(
            PayloadFormat::Json,
            b"{\"resourceSpans\": [",
            "ExportTraceServiceRequest",
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("invalid JSON ExportTraceServiceRequest: "),
            "{err}"
        );

        let err = decode_request::<ExportTraceServiceRequest>(
            PayloadFormat::Json,
            br#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"xyz"}]}]}]}"#,
            "ExportTraceServiceRequest",
        )
        .unwrap_err();
        let message = err.to_string();
        assert!(
            message.starts_with(
                "invalid JSON ExportTraceServiceRequest: at resourceSpans[0].scopeSpans[0].spans[0].traceId: "
            ),
            "{message}"
        );

        let err = decode_request::<ExportTraceServiceRequest>(
            PayloadFormat::Json,
            b"{} trailing",
            "ExportTraceServiceRequest",
        )
        .unwrap_err();
        assert!(err.to_string().contains("trailing characters"), "{err}");
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_crash() {
        let depth = 50_000;
        let json = format!(
            r#"{{"resourceSpans":[{{"resource":{{"attributes":[{{"key":"k","value":{}{}}}]}}}}]}}"#,
            r#"{"arrayValue":{"values":["#.repeat(depth),
            "]}}".repeat(depth)
        );
        let err = decode_request::<ExportTraceServiceRequest>(
            PayloadFormat::Json,
            json.as_bytes(),
            "ExportTraceServiceRequest",
        )
        .unwrap_err();
        assert!(err.to_string().contains("recursion limit"), "{err}");

        use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, ArrayValue, KeyValue};
        use opentelemetry_proto::tonic::resource::v1::Resource;
        use opentelemetry_proto::tonic::trace::v1::ResourceSpans;
        let mut value = AnyValue::default();
        for _ in 0..200 {
            value = AnyValue {
                value: Some(any_value::Value::ArrayValue(ArrayValue {
                    values: vec![value],
                })),
            };
        }
        let request = ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                resource: Some(Resource {
                    attributes: vec![KeyValue {
                        key: "k".into(),
                        value: Some(value),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
                ..Default::default()
            }],
        };
        let err = decode_request::<ExportTraceServiceRequest>(
            PayloadFormat::Protobuf,
            &request.encode_to_vec(),
            "ExportTraceServiceRequest",
        )
        .unwrap_err();
        assert!(err.to_string().contains("recursion limit"), "{err}");
    }

    #[test]
    fn responses_encode_in_the_request_format() {
        let empty = ExportTraceServiceResponse::default();
        assert_eq!(encode_response(PayloadFormat::Json, &empty).unwrap(), b"{}");
        assert!(encode_response(PayloadFormat::Protobuf, &empty)
            .unwrap()
            .is_empty());

        let partial = ExportTraceServiceResponse {
            partial_success: Some(ExportTracePartialSuccess {
                rejected_spans: 3,
                error_message: "three spans without ids".into(),
            }),
        };
        let json: serde_json::Value =
            serde_json::from_slice(&encode_response(PayloadFormat::Json, &partial).unwrap())
                .unwrap();
        assert_eq!(json["partialSuccess"]["rejectedSpans"], 3);
        assert_eq!(
            json["partialSuccess"]["errorMessage"],
            "three spans without ids"
        );
        let bytes = encode_response(PayloadFormat::Protobuf, &partial).unwrap();
        assert_eq!(
            ExportTraceServiceResponse::decode(bytes.as_slice()).unwrap(),
            partial
        );
    }
}
