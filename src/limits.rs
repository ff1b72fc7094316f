//! Caps on what one request may hold and on how deep stepline follows sender data.
//!
//! Every count, length and nesting level in an OTLP request is chosen by the sender. These caps
//! keep the work and memory one request can cost proportional to its size and bounded overall:
//! the receivers refuse requests over the per-request caps before decoding them into memory,
//! and the interpreter leaves out (or cuts) what passes the per-span caps, so every record
//! stepline writes reads back.
//!
//! The defaults are generous for real agents (a long OpenInference conversation flattens into
//! thousands of attributes) and small enough that one request within them cannot stall the
//! writer or exhaust memory. They are set in `collector.yaml` under
//! `processors.stepline.limits`.

/// The caps applied to every request; see the module doc.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Spans in one trace export request. Over it, the request is refused (HTTP 413 / gRPC
    /// RESOURCE_EXHAUSTED) before its spans are decoded.
    pub max_spans_per_request: usize,
    /// Log records in one logs export request; over it, refused like too many spans.
    pub max_log_records_per_request: usize,
    /// Metric data points in one metrics export request; over it, refused like too many spans.
    pub max_metric_points_per_request: usize,
    /// Attributes on one span, one span event or one log record.
    pub max_attributes_per_span: usize,
    /// Events on one span.
    pub max_events_per_span: usize,
    /// Tool calls in one model response (and tool results in one request's input).
    pub max_tool_calls_per_response: usize,
    /// Bytes in one attribute key.
    pub max_attribute_key_bytes: usize,
    /// Bytes in one attribute value (a string, or a JSON document held in a string).
    pub max_attribute_value_bytes: usize,
    /// Nesting levels of one value (JSON arrays/objects, OTLP array/kvlist values, flattened
    /// attribute key segments). Deeper parts are not kept as structure.
    pub max_nesting_depth: usize,
}

/// Default for [`Limits::max_spans_per_request`].
pub const DEFAULT_MAX_SPANS_PER_REQUEST: usize = 65_536;
/// Default for [`Limits::max_log_records_per_request`].
pub const DEFAULT_MAX_LOG_RECORDS_PER_REQUEST: usize = 65_536;
/// Default for [`Limits::max_metric_points_per_request`].
pub const DEFAULT_MAX_METRIC_POINTS_PER_REQUEST: usize = 262_144;
/// Default for [`Limits::max_attributes_per_span`].
pub const DEFAULT_MAX_ATTRIBUTES_PER_SPAN: usize = 32_768;
/// Default for [`Limits::max_events_per_span`].
pub const DEFAULT_MAX_EVENTS_PER_SPAN: usize = 8_192;
/// Default for [`Limits::max_tool_calls_per_response`].
pub const DEFAULT_MAX_TOOL_CALLS_PER_RESPONSE: usize = 1_024;
/// Default for [`Limits::max_attribute_key_bytes`].
pub const DEFAULT_MAX_ATTRIBUTE_KEY_BYTES: usize = 4_096;
/// Default for [`Limits::max_attribute_value_bytes`].
pub const DEFAULT_MAX_ATTRIBUTE_VALUE_BYTES: usize = 32 * 1024 * 1024;
/// Default for [`Limits::max_nesting_depth`]: stored records wrap sender values in a few levels
/// of their own, and every record must stay under serde_json's 128-level read limit.
pub const DEFAULT_MAX_NESTING_DEPTH: usize = 64;

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_spans_per_request: DEFAULT_MAX_SPANS_PER_REQUEST,
            max_log_records_per_request: DEFAULT_MAX_LOG_RECORDS_PER_REQUEST,
            max_metric_points_per_request: DEFAULT_MAX_METRIC_POINTS_PER_REQUEST,
            max_attributes_per_span: DEFAULT_MAX_ATTRIBUTES_PER_SPAN,
            max_events_per_span: DEFAULT_MAX_EVENTS_PER_SPAN,
            max_tool_calls_per_response: DEFAULT_MAX_TOOL_CALLS_PER_RESPONSE,
            max_attribute_key_bytes: DEFAULT_MAX_ATTRIBUTE_KEY_BYTES,
            max_attribute_value_bytes: DEFAULT_MAX_ATTRIBUTE_VALUE_BYTES,
            max_nesting_depth: DEFAULT_MAX_NESTING_DEPTH,
        }
    }
}
