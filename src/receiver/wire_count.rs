//! Counting the items of an export request before decoding it.
//!
//! A protobuf span can be two bytes on the wire and a few hundred in memory, so a request
//! within the byte limit can still decode into millions of structs. The functions here count
//! spans, log records and metric data points by walking the wire format (tags and lengths of
//! the few nested messages that hold them) or, for OTLP/JSON, by a serde pass that keeps
//! nothing. Neither allocates per item, both take time linear in the body, and both fail
//! cleanly on truncated or malformed input; the receivers refuse a request over its cap before
//! prost or serde builds anything.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// Why a body could not be counted (the decoder would refuse it too).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct CountError(pub(crate) String);

/// The path from an export request down to the repeated field that holds the counted items.
///
/// Each level names the field numbers to follow (all length-delimited); the last level's fields
/// are the counted items.
type Path = &'static [&'static [u32]];

/// `ExportTraceServiceRequest.resource_spans(1) → ResourceSpans.scope_spans(2) →
/// ScopeSpans.spans(2)`.
const SPANS: Path = &[&[1], &[2], &[2]];
/// `ExportLogsServiceRequest.resource_logs(1) → ResourceLogs.scope_logs(2) →
/// ScopeLogs.log_records(2)`.
const LOG_RECORDS: Path = &[&[1], &[2], &[2]];
/// `ExportMetricsServiceRequest.resource_metrics(1) → ResourceMetrics.scope_metrics(2) →
/// ScopeMetrics.metrics(2) → Metric.{gauge(5), sum(7), histogram(9), exponential_histogram(10),
/// summary(11)} → data_points(1)`.
const DATA_POINTS: Path = &[&[1], &[2], &[2], &[5, 7, 9, 10, 11], &[1]];

/// What a request of each signal is counted in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Counted {
    /// Spans of a trace export request.
    Spans,
    /// Log records of a logs export request.
    LogRecords,
    /// Data points of a metrics export request.
    DataPoints,
}

impl Counted {
    fn path(self) -> Path {
        match self {
            Self::Spans => SPANS,
            Self::LogRecords => LOG_RECORDS,
            Self::DataPoints => DATA_POINTS,
        }
    }

    /// The counted items' name in messages.
    pub(crate) fn noun(self) -> &'static str {
        match self {
            Self::Spans => "spans",
            Self::LogRecords => "log records",
            Self::DataPoints => "metric data points",
        }
    }
}

/// Protobuf wire types.
const VARINT: u64 = 0;
const FIXED64: u64 = 1;
const LEN: u64 = 2;
const START_GROUP: u64 = 3;
const END_GROUP: u64 = 4;
const FIXED32: u64 = 5;

/// Most nested groups skipped inside an unknown field (prost's own recursion limit).
const MAX_GROUP_DEPTH: usize = 100;

/// Counts the `counted` items of a protobuf-encoded export request.
pub(crate) fn count_protobuf(counted: Counted, body: &[u8]) -> Result<u64, CountError> {
    let mut total = 0;
    count_level(body, counted.path(), &mut total)?;
    Ok(total)
}

/// Walks one message: fields on `path[0]` are followed into (or counted, on the last level),
/// every other field is skipped.
fn count_level(mut body: &[u8], path: Path, total: &mut u64) -> Result<(), CountError> {
    let Some((fields, rest)) = path.split_first() else {
        return Ok(());
    };
    while !body.is_empty() {
        let key = varint(&mut body)?;
        let number = key >> 3;
        let wire = key & 7;
        if number == 0 || number > u64::from(u32::MAX >> 3) {
            return Err(CountError(format!("invalid field number {number}")));
        }
        let followed = u32::try_from(number).is_ok_and(|n| fields.contains(&n));
        if followed && wire != LEN {
            return Err(CountError(format!(
                "field {number} has wire type {wire}, expected length-delimited"
            )));
        }
        if followed {
            let inner = length_delimited(&mut body)?;
            if rest.is_empty() {
                *total += 1;
            } else {
                count_level(inner, rest, total)?;
            }
        } else {
            skip(&mut body, number, wire)?;
        }
    }
    Ok(())
}

/// Reads a base-128 varint.
fn varint(body: &mut &[u8]) -> Result<u64, CountError> {
    let bytes = *body;
    let mut value = 0u64;
    for (index, &byte) in bytes.iter().enumerate().take(10) {
        value |= u64::from(byte & 0x7f) << (7 * index);
        if byte & 0x80 == 0 {
            if index == 9 && byte > 1 {
                break;
            }
            *body = &bytes[index + 1..];
            return Ok(value);
        }
    }
    Err(CountError(if bytes.len() < 10 {
        "truncated varint".into()
    } else {
        "invalid varint".into()
    }))
}

/// Reads a length prefix and returns the bytes it covers.
fn length_delimited<'a>(body: &mut &'a [u8]) -> Result<&'a [u8], CountError> {
    let len = varint(body)?;
    let len = usize::try_from(len)
        .ok()
        .filter(|&len| len <= body.len())
        .ok_or_else(|| CountError("length-delimited field runs past the end".into()))?;
    let (inner, rest) = body.split_at(len);
    *body = rest;
    Ok(inner)
}

/// Advances `body` by `n` bytes.
fn advance(body: &mut &[u8], n: usize) -> Result<(), CountError> {
    if body.len() < n {
        return Err(CountError("fixed-width field runs past the end".into()));
    }
    *body = &body[n..];
    Ok(())
}

/// Skips the value of field `number` with wire type `wire` (its key already read).
fn skip(body: &mut &[u8], number: u64, wire: u64) -> Result<(), CountError> {
    match wire {
        VARINT => varint(body).map(drop),
        FIXED64 => advance(body, 8),
        LEN => length_delimited(body).map(drop),
        FIXED32 => advance(body, 4),
        START_GROUP => skip_group(body, number),
        END_GROUP => Err(CountError(format!("unexpected end of group {number}"))),
        _ => Err(CountError(format!("invalid wire type {wire}"))),
    }
}

/// Skips a group up to its matching end, without recursion.
fn skip_group(body: &mut &[u8], number: u64) -> Result<(), CountError> {
    let mut open = vec![number];
    while let Some(&innermost) = open.last() {
        let key = varint(body)?;
        let (field, wire) = (key >> 3, key & 7);
        if field == 0 {
            return Err(CountError("invalid field number 0".into()));
        }
        match wire {
            START_GROUP => {
                if open.len() == MAX_GROUP_DEPTH {
                    return Err(CountError("groups nested too deeply".into()));
                }
                open.push(field);
            }
            END_GROUP if field == innermost => {
                open.pop();
            }
            END_GROUP => {
                return Err(CountError(format!(
                    "end of group {field} inside group {innermost}"
                )))
            }
            _ => skip(body, field, wire)?,
        }
    }
    Ok(())
}

/// [`count_json_partial`] without the partial count (for tests).
#[cfg(test)]
pub(crate) fn count_json(counted: Counted, body: &[u8]) -> Result<u64, CountError> {
    count_json_partial(counted, body).map_err(|(err, _)| err)
}

/// Counts the `counted` items of an OTLP/JSON export request without keeping anything; on
/// failure, also gives how many items were counted before it.
///
/// Field names are matched in both the lowerCamelCase OTLP/JSON uses and the snake_case of the
/// proto; every other value is skipped with [`IgnoredAny`] (which walks nested values without
/// recursion). The count is of array elements, so a body the decoder refuses later may still
/// count; a body that is not JSON is an error here.
pub(crate) fn count_json_partial(counted: Counted, body: &[u8]) -> Result<u64, (CountError, u64)> {
    let path: JsonPath = match counted {
        Counted::Spans => &[
            &["resourceSpans", "resource_spans"],
            &["scopeSpans", "scope_spans"],
            &["spans"],
        ],
        Counted::LogRecords => &[
            &["resourceLogs", "resource_logs"],
            &["scopeLogs", "scope_logs"],
            &["logRecords", "log_records"],
        ],
        Counted::DataPoints => &[
            &["resourceMetrics", "resource_metrics"],
            &["scopeMetrics", "scope_metrics"],
            &["metrics"],
            &[
                "gauge",
                "sum",
                "histogram",
                "exponentialHistogram",
                "exponential_histogram",
                "summary",
            ],
            &["dataPoints", "data_points"],
        ],
    };
    let mut total = 0;
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    let outcome = JsonLevel {
        path,
        total: &mut total,
    }
    .deserialize(&mut deserializer);
    match outcome {
        Ok(()) => Ok(total),
        Err(err) => Err((CountError(err.to_string()), total)),
    }
}

/// Like [`Path`], for JSON: the member names to follow on each level. Every level but the
/// first is reached through an array of objects (or, for a metric's kind, an object).
type JsonPath = &'static [&'static [&'static str]];

/// One object on the way down: follows the members named on `path[0]`.
struct JsonLevel<'a> {
    path: JsonPath,
    total: &'a mut u64,
}

impl<'de> DeserializeSeed<'de> for JsonLevel<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for JsonLevel<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object")
    }

    // `null` where a message is expected means "unset".
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let Some((names, rest)) = self.path.split_first() else {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            return Ok(());
        };
        while let Some(key) = map.next_key::<MemberName>()? {
            if names.contains(&key.0.as_ref()) {
                map.next_value_seed(JsonArray {
                    path: rest,
                    total: &mut *self.total,
                })?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(())
    }
}

/// The value of a followed member: an array whose elements are counted (last level) or walked.
/// A metric's kind (`gauge`, `sum`, ...) is an object and is walked directly.
struct JsonArray<'a> {
    path: JsonPath,
    total: &'a mut u64,
}

impl<'de> DeserializeSeed<'de> for JsonArray<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for JsonArray<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array or object")
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        if self.path.is_empty() {
            while seq.next_element::<IgnoredAny>()?.is_some() {
                *self.total += 1;
            }
            return Ok(());
        }
        while seq
            .next_element_seed(JsonLevel {
                path: self.path,
                total: &mut *self.total,
            })?
            .is_some()
        {}
        Ok(())
    }

    // A metric element's kind member (`"gauge": {...}`): an object holding `dataPoints`.
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<(), A::Error> {
        JsonLevel {
            path: self.path,
            total: self.total,
        }
        .visit_map(map)
    }
}

/// A member name, borrowed from the body when it has no escapes.
struct MemberName<'de>(std::borrow::Cow<'de, str>);

impl<'de> de::Deserialize<'de> for MemberName<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct NameVisitor;
        impl<'de> Visitor<'de> for NameVisitor {
            type Value = MemberName<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a member name")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(MemberName(std::borrow::Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(MemberName(std::borrow::Cow::Owned(v.to_owned())))
            }
        }
        deserializer.deserialize_str(NameVisitor)
    }
}

#[cfg(test)]
mod tests {
    use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
    use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
    use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
    use opentelemetry_proto::tonic::metrics::v1::{
        metric, Gauge, Histogram, HistogramDataPoint, Metric, NumberDataPoint, ResourceMetrics,
        ScopeMetrics, Sum, Summary, SummaryDataPoint,
    };
    use opentelemetry_proto::tonic::resource::v1::Resource;
    use opentelemetry_proto::tonic::trace::v1::{span, ResourceSpans, ScopeSpans, Span};
    use proptest::prelude::*;
    use prost::Message;

    use super::*;

    fn attribute(key: &str) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: Some(AnyValue {
                value: Some(any_value::Value::StringValue("v".repeat(key.len()))),
            }),
            ..Default::default()
        }
    }

    /// A trace request with `shape[r][s]` spans in scope `s` of resource `r`.
    fn traces(shape: &[Vec<usize>]) -> ExportTraceServiceRequest {
        ExportTraceServiceRequest {
            resource_spans: shape
                .iter()
                .map(|scopes| ResourceSpans {
                    resource: Some(Resource {
                        attributes: vec![attribute("service.name")],
                        ..Default::default()
                    }),
                    scope_spans: scopes
                        .iter()
                        .map(|&n| ScopeSpans {
                            spans: (0..n)
                                .map(|i| Span {
                                    name: format!("span {i}"),
                                    span_id: vec![i as u8; 8],
                                    attributes: vec![attribute("gen_ai.system")],
                                    events: vec![span::Event {
                                        name: "e".into(),
                                        ..Default::default()
                                    }],
                                    ..Default::default()
                                })
                                .collect(),
                            schema_url: "s".into(),
                            ..Default::default()
                        })
                        .collect(),
                    ..Default::default()
                })
                .collect(),
        }
    }

    fn logs(shape: &[Vec<usize>]) -> ExportLogsServiceRequest {
        ExportLogsServiceRequest {
            resource_logs: shape
                .iter()
                .map(|scopes| ResourceLogs {
                    scope_logs: scopes
                        .iter()
                        .map(|&n| ScopeLogs {
                            log_records: (0..n)
                                .map(|i| LogRecord {
                                    time_unix_nano: i as u64,
                                    attributes: vec![attribute("event.name")],
                                    ..Default::default()
                                })
                                .collect(),
                            ..Default::default()
                        })
                        .collect(),
                    ..Default::default()
                })
                .collect(),
        }
    }

    /// A metrics request whose metrics take turns over the five kinds, `n` points each.
    fn metrics(shape: &[Vec<usize>]) -> ExportMetricsServiceRequest {
        let kinds = |k: usize, n: usize| -> metric::Data {
            let numbers = || vec![NumberDataPoint::default(); n];
            match k % 5 {
                0 => metric::Data::Gauge(Gauge {
                    data_points: numbers(),
                }),
                1 => metric::Data::Sum(Sum {
                    data_points: numbers(),
                    is_monotonic: true,
                    ..Default::default()
                }),
                2 => metric::Data::Histogram(Histogram {
                    data_points: vec![HistogramDataPoint::default(); n],
                    ..Default::default()
                }),
                3 => metric::Data::ExponentialHistogram(Default::default()),
                _ => metric::Data::Summary(Summary {
                    data_points: vec![SummaryDataPoint::default(); n],
                }),
            }
        };
        ExportMetricsServiceRequest {
            resource_metrics: shape
                .iter()
                .map(|scopes| ResourceMetrics {
                    scope_metrics: scopes
                        .iter()
                        .enumerate()
                        .map(|(k, &n)| ScopeMetrics {
                            metrics: (0..3)
                                .map(|j| Metric {
                                    name: "m".into(),
                                    data: Some(kinds(k + j, n)),
                                    ..Default::default()
                                })
                                .collect(),
                            ..Default::default()
                        })
                        .collect(),
                    ..Default::default()
                })
                .collect(),
        }
    }

    fn span_count(r: &ExportTraceServiceRequest) -> u64 {
        r.resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .map(|s| s.spans.len() as u64)
            .sum()
    }

    fn log_count(r: &ExportLogsServiceRequest) -> u64 {
        r.resource_logs
            .iter()
            .flat_map(|r| &r.scope_logs)
            .map(|s| s.log_records.len() as u64)
            .sum()
    }

    fn point_count(r: &ExportMetricsServiceRequest) -> u64 {
        r.resource_metrics
            .iter()
            .flat_map(|r| &r.scope_metrics)
            .flat_map(|s| &s.metrics)
            .map(|m| match &m.data {
                Some(metric::Data::Gauge(g)) => g.data_points.len(),
                Some(metric::Data::Sum(s)) => s.data_points.len(),
                Some(metric::Data::Histogram(h)) => h.data_points.len(),
                Some(metric::Data::ExponentialHistogram(h)) => h.data_points.len(),
                Some(metric::Data::Summary(s)) => s.data_points.len(),
                None => 0,
            } as u64)
            .sum()
    }

    fn shapes() -> impl Strategy<Value = Vec<Vec<usize>>> {
        prop::collection::vec(prop::collection::vec(0usize..6, 0..4), 0..4)
    }

    proptest! {
        #[test]
        fn counts_equal_what_prost_decodes(shape in shapes()) {
            let t = traces(&shape);
            let bytes = t.encode_to_vec();
            let decoded = ExportTraceServiceRequest::decode(&bytes[..]).unwrap();
            prop_assert_eq!(count_protobuf(Counted::Spans, &bytes).unwrap(), span_count(&decoded));
            let json = serde_json::to_vec(&t).unwrap();
            prop_assert_eq!(count_json(Counted::Spans, &json).unwrap(), span_count(&t));

            let l = logs(&shape);
            let bytes = l.encode_to_vec();
            let decoded = ExportLogsServiceRequest::decode(&bytes[..]).unwrap();
            prop_assert_eq!(count_protobuf(Counted::LogRecords, &bytes).unwrap(), log_count(&decoded));
            let json = serde_json::to_vec(&l).unwrap();
            prop_assert_eq!(count_json(Counted::LogRecords, &json).unwrap(), log_count(&l));

            let m = metrics(&shape);
            let bytes = m.encode_to_vec();
            let decoded = ExportMetricsServiceRequest::decode(&bytes[..]).unwrap();
            prop_assert_eq!(count_protobuf(Counted::DataPoints, &bytes).unwrap(), point_count(&decoded));
            let json = serde_json::to_vec(&m).unwrap();
            prop_assert_eq!(count_json(Counted::DataPoints, &json).unwrap(), point_count(&m));
        }

        #[test]
        fn truncated_or_damaged_input_never_panics(shape in shapes(), cut in any::<prop::sample::Index>(), flip in any::<(prop::sample::Index, u8)>()) {
            let bytes = traces(&shape).encode_to_vec();
            let truncated = &bytes[..cut.index(bytes.len() + 1)];
            let mut damaged = bytes.clone();
            if !damaged.is_empty() {
                let at = flip.0.index(damaged.len());
                damaged[at] ^= flip.1;
            }
            for body in [truncated, &damaged[..]] {
                let counted = count_protobuf(Counted::Spans, body);
                if let Ok(decoded) = ExportTraceServiceRequest::decode(body) {
                    // Whatever prost accepts is counted exactly.
                    prop_assert_eq!(counted.unwrap(), span_count(&decoded));
                }
                let _ = count_protobuf(Counted::DataPoints, body);
                let _ = count_json(Counted::Spans, body);
            }
        }

        #[test]
        fn garbage_never_panics(body in prop::collection::vec(any::<u8>(), 0..256)) {
            for counted in [Counted::Spans, Counted::LogRecords, Counted::DataPoints] {
                let _ = count_protobuf(counted, &body);
                let _ = count_json(counted, &body);
            }
        }
    }

    #[test]
    fn an_empty_span_bomb_is_counted_without_decoding() {
        // 2 bytes per empty span: `spans` (field 2, length 0).
        let spans = 1_000_000;
        let scope: Vec<u8> = [0x12, 0x00].repeat(spans);
        let mut scope_spans = vec![0x12];
        push_varint(&mut scope_spans, scope.len() as u64);
        scope_spans.extend_from_slice(&scope);
        let mut body = vec![0x0a];
        push_varint(&mut body, scope_spans.len() as u64);
        body.extend_from_slice(&scope_spans);
        assert_eq!(count_protobuf(Counted::Spans, &body).unwrap(), spans as u64);

        let json = format!(
            r#"{{"resourceSpans":[{{"scopeSpans":[{{"spans":[{}]}}]}}]}}"#,
            vec!["{}"; 1000].join(",")
        );
        assert_eq!(count_json(Counted::Spans, json.as_bytes()).unwrap(), 1000);
    }

    #[test]
    fn malformed_input_is_an_error() {
        // A length past the end, a truncated varint, a field number 0, a group never closed.
        for body in [
            &[0x0a, 0x05, 0x00][..],
            &[0x0a, 0xff],
            &[0x00, 0x00],
            &[0x0b, 0x10, 0x01],
        ] {
            assert!(count_protobuf(Counted::Spans, body).is_err(), "{body:?}");
        }
        // resource_spans with the wrong wire type.
        assert!(count_protobuf(Counted::Spans, &[0x08, 0x01]).is_err());
        // Unknown fields of every wire type, a closed group included, are skipped.
        let body = [
            0x78, 0x01, 0x79, 0, 0, 0, 0, 0, 0, 0, 0, 0x7d, 0, 0, 0, 0, 0x7b, 0x08, 0x01, 0x7c,
        ];
        assert_eq!(count_protobuf(Counted::Spans, &body).unwrap(), 0);
        assert!(count_json(Counted::Spans, b"{\"resourceSpans\": [").is_err());
        assert!(count_json(Counted::Spans, b"[1]").is_err());
        // Deep JSON nesting, skipped or counted, is walked without recursion (the decoder then
        // refuses it at its recursion limit).
        let deep = format!("{{\"x\":{}{}}}", "[".repeat(100_000), "]".repeat(100_000));
        assert_eq!(count_json(Counted::Spans, deep.as_bytes()).unwrap(), 0);
        let deep = format!(
            "{{\"resourceSpans\":[{{\"scopeSpans\":[{{\"spans\":[{}{}]}}]}}]}}",
            "[".repeat(100_000),
            "]".repeat(100_000)
        );
        assert_eq!(count_json(Counted::Spans, deep.as_bytes()).unwrap(), 1);
    }

    fn push_varint(out: &mut Vec<u8>, mut value: u64) {
        while value >= 0x80 {
            out.push((value as u8) | 0x80);
            value >>= 7;
        }
        out.push(value as u8);
    }
}
