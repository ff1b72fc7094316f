//! What the receivers hand decoded requests to: [`ExportSink`], implemented by [`Ingest`].

use std::future::Future;

use bytes::Bytes;

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;

use crate::ingest::{DecodeOn, Decoded, ExportOutcome, Ingest, IngestError, Undecoded};

/// The service behind the receivers: takes one decoded export request per signal and answers
/// only once the request is accepted (or refused).
///
/// The binary uses [`Ingest`]; tests can plug in a sink that records what it received.
///
/// The receivers call the `*_decoding` methods with the request still to be decoded: by default
/// it is decoded on the blocking pool and handed to the `*_encoded` method, which also gets the
/// protobuf bytes the request was decoded from (`None` for OTLP/JSON; ignored by default).
/// [`Ingest`] decodes and interprets a trace request in one blocking task.
pub trait ExportSink: Send + Sync + 'static {
    /// Accepts a trace export request.
    fn export_traces(
        &self,
        request: ExportTraceServiceRequest,
    ) -> impl Future<Output = Result<ExportOutcome, IngestError>> + Send;

    /// Accepts a logs export request.
    fn export_logs(
        &self,
        request: ExportLogsServiceRequest,
    ) -> impl Future<Output = Result<ExportOutcome, IngestError>> + Send;

    /// Accepts a metrics export request.
    fn export_metrics(
        &self,
        request: ExportMetricsServiceRequest,
    ) -> impl Future<Output = Result<ExportOutcome, IngestError>> + Send;

    /// Accepts a trace export request decoded from `encoded` (protobuf, after decompression).
    fn export_traces_encoded(
        &self,
        request: ExportTraceServiceRequest,
        encoded: Option<Bytes>,
    ) -> impl Future<Output = Result<ExportOutcome, IngestError>> + Send {
        drop(encoded);
        self.export_traces(request)
    }

    /// Accepts a logs export request decoded from `encoded`.
    fn export_logs_encoded(
        &self,
        request: ExportLogsServiceRequest,
        encoded: Option<Bytes>,
    ) -> impl Future<Output = Result<ExportOutcome, IngestError>> + Send {
        drop(encoded);
        self.export_logs(request)
    }

    /// Accepts a metrics export request decoded from `encoded`.
    fn export_metrics_encoded(
        &self,
        request: ExportMetricsServiceRequest,
        encoded: Option<Bytes>,
    ) -> impl Future<Output = Result<ExportOutcome, IngestError>> + Send {
        drop(encoded);
        self.export_metrics(request)
    }

    /// Accepts a trace export request that `decode` decodes (CPU work, run on the blocking
    /// pool, or in the caller for a small request: `on`; its guard is dropped once the request
    /// is decoded, or, for [`Ingest`], interpreted).
    fn export_traces_decoding<E, G, D>(
        &self,
        decode: D,
        on: DecodeOn,
    ) -> impl Future<Output = Result<ExportOutcome, Undecoded<E>>> + Send
    where
        D: FnOnce() -> Result<Decoded<ExportTraceServiceRequest, G>, E> + Send + 'static,
        E: Send + 'static,
        G: Send + 'static,
    {
        async move {
            let (request, encoded) = decode_blocking(decode, on).await?;
            self.export_traces_encoded(request, encoded)
                .await
                .map_err(Undecoded::Ingest)
        }
    }

    /// Accepts a logs export request that `decode` decodes where `on` says.
    fn export_logs_decoding<E, G, D>(
        &self,
        decode: D,
        on: DecodeOn,
    ) -> impl Future<Output = Result<ExportOutcome, Undecoded<E>>> + Send
    where
        D: FnOnce() -> Result<Decoded<ExportLogsServiceRequest, G>, E> + Send + 'static,
        E: Send + 'static,
        G: Send + 'static,
    {
        async move {
            let (request, encoded) = decode_blocking(decode, on).await?;
            self.export_logs_encoded(request, encoded)
                .await
                .map_err(Undecoded::Ingest)
        }
    }

    /// Accepts a metrics export request that `decode` decodes where `on` says.
    fn export_metrics_decoding<E, G, D>(
        &self,
        decode: D,
        on: DecodeOn,
    ) -> impl Future<Output = Result<ExportOutcome, Undecoded<E>>> + Send
    where
        D: FnOnce() -> Result<Decoded<ExportMetricsServiceRequest, G>, E> + Send + 'static,
        E: Send + 'static,
        G: Send + 'static,
    {
        async move {
            let (request, encoded) = decode_blocking(decode, on).await?;
            self.export_metrics_encoded(request, encoded)
                .await
                .map_err(Undecoded::Ingest)
        }
    }
}

/// Runs `decode` where `on` says (the blocking pool, or here); its guard is dropped once it is
/// done.
async fn decode_blocking<R, E, G, D>(
    decode: D,
    on: DecodeOn,
) -> Result<(R, Option<Bytes>), Undecoded<E>>
where
    D: FnOnce() -> Result<Decoded<R, G>, E> + Send + 'static,
    R: Send + 'static,
    E: Send + 'static,
    G: Send + 'static,
{
    let decode = move || {
        decode().map(|d| {
            drop(d.guard);
            (d.request, d.received)
        })
    };
    let decoded = match on {
        DecodeOn::Caller => decode(),
        DecodeOn::BlockingPool => tokio::task::spawn_blocking(decode).await.map_err(|err| {
            Undecoded::Ingest(IngestError::Internal(format!(
                "decoding task failed: {err}"
            )))
        })?,
    };
    decoded.map_err(Undecoded::Decode)
}

impl ExportSink for Ingest {
    fn export_traces(
        &self,
        request: ExportTraceServiceRequest,
    ) -> impl Future<Output = Result<ExportOutcome, IngestError>> + Send {
        Ingest::export_traces(self, request)
    }

    fn export_logs(
        &self,
        request: ExportLogsServiceRequest,
    ) -> impl Future<Output = Result<ExportOutcome, IngestError>> + Send {
        Ingest::export_logs(self, request)
    }

    fn export_metrics(
        &self,
        request: ExportMetricsServiceRequest,
    ) -> impl Future<Output = Result<ExportOutcome, IngestError>> + Send {
        Ingest::export_metrics(self, request)
    }

    fn export_traces_encoded(
        &self,
        request: ExportTraceServiceRequest,
        encoded: Option<Bytes>,
    ) -> impl Future<Output = Result<ExportOutcome, IngestError>> + Send {
        Ingest::export_traces_from(self, request, encoded)
    }

    fn export_logs_encoded(
        &self,
        request: ExportLogsServiceRequest,
        encoded: Option<Bytes>,
    ) -> impl Future<Output = Result<ExportOutcome, IngestError>> + Send {
        Ingest::export_logs_from(self, request, encoded)
    }

    fn export_metrics_encoded(
        &self,
        request: ExportMetricsServiceRequest,
        encoded: Option<Bytes>,
    ) -> impl Future<Output = Result<ExportOutcome, IngestError>> + Send {
        Ingest::export_metrics_from(self, request, encoded)
    }

    fn export_traces_decoding<E, G, D>(
        &self,
        decode: D,
        on: DecodeOn,
    ) -> impl Future<Output = Result<ExportOutcome, Undecoded<E>>> + Send
    where
        D: FnOnce() -> Result<Decoded<ExportTraceServiceRequest, G>, E> + Send + 'static,
        E: Send + 'static,
        G: Send + 'static,
    {
        Ingest::export_traces_decoding(self, decode, on)
    }
}
