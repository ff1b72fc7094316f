//! The receiver's side of the three OTLP signals (described in [`crate::otlp`]): how each is
//! counted and capped before decoding and handed to the sink, so both receivers handle them
//! with the same code.

use std::future::Future;

use super::sink::ExportSink;
use super::wire_count::Counted;
use crate::ingest::{DecodeOn, Decoded, ExportOutcome, Undecoded};
use crate::limits::Limits;
use crate::otlp::PartialSuccess;
pub(crate) use crate::otlp::{Logs, Metrics, Traces};

/// One OTLP signal as a receiver takes it in: its cap and how to hand it to the sink.
pub(crate) trait Signal: crate::otlp::Signal {
    /// What a request is counted in before it is decoded.
    const COUNTED: Counted;
    /// The name of the cap on that count under `processors.stepline.limits`.
    const LIMIT_KEY: &'static str;

    /// The cap on [`Self::COUNTED`] items per request.
    fn cap(limits: &Limits) -> usize;

    /// Hands a request still to be decoded to the sink: `decode` runs where `on` says.
    fn export_decoding<S, E, G, D>(
        sink: &S,
        decode: D,
        on: DecodeOn,
    ) -> impl Future<Output = Result<ExportOutcome, Undecoded<E>>> + Send
    where
        S: ExportSink,
        D: FnOnce() -> Result<Decoded<Self::Request, G>, E> + Send + 'static,
        E: Send + 'static,
        G: Send + 'static;

    /// The response for an accepted request; `partial_success` is set only when it says something.
    fn response(outcome: ExportOutcome) -> Self::Response {
        Self::with_partial_success(PartialSuccess {
            rejected: outcome.rejected,
            message: outcome.message,
        })
    }
}

impl Signal for Traces {
    const COUNTED: Counted = Counted::Spans;
    const LIMIT_KEY: &'static str = "max_spans_per_request";

    fn cap(limits: &Limits) -> usize {
        limits.max_spans_per_request
    }

    fn export_decoding<S, E, G, D>(
        sink: &S,
        decode: D,
        on: DecodeOn,
    ) -> impl Future<Output = Result<ExportOutcome, Undecoded<E>>> + Send
    where
        S: ExportSink,
        D: FnOnce() -> Result<Decoded<Self::Request, G>, E> + Send + 'static,
        E: Send + 'static,
        G: Send + 'static,
    {
        sink.export_traces_decoding(decode, on)
    }
}

impl Signal for Logs {
    const COUNTED: Counted = Counted::LogRecords;
    const LIMIT_KEY: &'static str = "max_log_records_per_request";

    fn cap(limits: &Limits) -> usize {
        limits.max_log_records_per_request
    }

    fn export_decoding<S, E, G, D>(
        sink: &S,
        decode: D,
        on: DecodeOn,
    ) -> impl Future<Output = Result<ExportOutcome, Undecoded<E>>> + Send
    where
        S: ExportSink,
        D: FnOnce() -> Result<Decoded<Self::Request, G>, E> + Send + 'static,
        E: Send + 'static,
        G: Send + 'static,
    {
        sink.export_logs_decoding(decode, on)
    }
}

impl Signal for Metrics {
    const COUNTED: Counted = Counted::DataPoints;
    const LIMIT_KEY: &'static str = "max_metric_points_per_request";

    fn cap(limits: &Limits) -> usize {
        limits.max_metric_points_per_request
    }

    fn export_decoding<S, E, G, D>(
        sink: &S,
        decode: D,
        on: DecodeOn,
    ) -> impl Future<Output = Result<ExportOutcome, Undecoded<E>>> + Send
    where
        S: ExportSink,
        D: FnOnce() -> Result<Decoded<Self::Request, G>, E> + Send + 'static,
        E: Send + 'static,
        G: Send + 'static,
    {
        sink.export_metrics_decoding(decode, on)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_outcome_leaves_partial_success_unset() {
        assert_eq!(
            Traces::response(ExportOutcome::default()).partial_success,
            None
        );
        let partial = Logs::response(ExportOutcome {
            rejected: 2,
            message: "two bad records".into(),
        });
        let partial = partial.partial_success.unwrap();
        assert_eq!(partial.rejected_log_records, 2);
        assert_eq!(partial.error_message, "two bad records");
        let warning = Metrics::response(ExportOutcome {
            rejected: 0,
            message: "deprecated attribute".into(),
        });
        assert_eq!(warning.partial_success.unwrap().rejected_data_points, 0);
    }
}
