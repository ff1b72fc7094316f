//! What a request holds while it is in the ingest service: its encoded bytes counted against
//! the admission budget, its outbox payload (the bytes as received when the receiver kept them),
//! and the items over a per-span cap that are stored and forwarded but not interpreted.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use prost::Message;

use super::{ExportOutcome, IngestError};
use crate::interpreter::NotInterpreted;

/// Items of one request accepted but not interpreted because they are over a per-span cap.
#[derive(Debug, Default)]
pub(super) struct OverLimits {
    count: u64,
    /// The first reason, as an example for the message.
    first: Option<String>,
}

impl OverLimits {
    pub(super) fn note(&mut self, reason: NotInterpreted) {
        if let NotInterpreted::OverLimit(over) = reason {
            self.count += 1;
            self.first.get_or_insert_with(|| over.to_string());
        }
    }

    /// Adds a warning to `outcome` (nothing is rejected: the items are stored in the outbox
    /// and forwarded, only not interpreted), per the OTLP partial-success rules.
    pub(super) fn warn(self, outcome: &mut ExportOutcome, items: &str, counter: &AtomicU64) {
        let Some(first) = self.first else { return };
        counter.fetch_add(self.count, Ordering::Relaxed);
        tracing::warn!(
            count = self.count,
            "{items} over a per-span cap not interpreted: {first}"
        );
        let warning = format!(
            "{} {items} accepted but not interpreted: over a per-span cap (e.g. {first})",
            self.count
        );
        if outcome.message.is_empty() {
            outcome.message = warning;
        } else {
            outcome.message = format!("{}; {warning}", outcome.message);
        }
    }
}

/// Bytes counted in the ingest service's admission total until dropped.
pub(super) struct Admitted {
    total: Arc<AtomicU64>,
    bytes: u64,
}

impl Admitted {
    /// The bytes counted.
    pub(super) fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.total.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

/// Counts `bytes` into `total`, or refuses them when it already holds `cap` bytes; one request
/// of any size is taken when nothing else is in.
pub(super) fn admit(total: &Arc<AtomicU64>, bytes: u64, cap: u64) -> Result<Admitted, IngestError> {
    let admitted = total.fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
        (held == 0 || held.saturating_add(bytes) <= cap).then(|| held.saturating_add(bytes))
    });
    match admitted {
        Ok(_) => Ok(Admitted {
            total: Arc::clone(total),
            bytes,
        }),
        Err(held) => Err(IngestError::OverBytes(held)),
    }
}

/// The encoded size of a request: the length of its bytes as received, when given.
pub(super) fn encoded_len(request: &impl Message, received: Option<&Bytes>) -> u64 {
    received.map_or_else(|| request.encoded_len(), Bytes::len) as u64
}

/// The outbox payload of a request: its bytes as received (the receivers decoded them into
/// `request`), or the request encoded.
pub(super) fn payload(request: &impl Message, received: Option<Bytes>) -> Bytes {
    received.unwrap_or_else(|| request.encode_to_vec().into())
}
