//! The span→run block of a traces request's outbox entry: for every span of the request the
//! writer interpreted, the run its fact was stored under (after grouping spans and lineage), so
//! the exporters tag forwarded spans with their run's real id without interpreting them again.

use std::collections::HashSet;

use crate::outbox::{OutboxEntry, SpanRun};
use crate::store::{StoreError, WriteBatch};

/// The longest run id the writer resolves: `<32 hex digits of the trace id>-<16 of a span id>`.
/// A longer one is not put in the block (its span is forwarded untagged), so the block stays
/// within [`run_block_bound`].
const RUN_ID_BYTES: usize = 49;

/// Bytes the run block of an entry with `spans` interpreted spans takes at most, its length
/// prefix included: what the writer reserves in the exporters' queues beyond the request, before
/// the runs are resolved.
pub fn run_block_bound(spans: usize) -> u64 {
    if spans == 0 {
        return 0;
    }
    // The block's length, run-id count and span count; per span its ids and run index, and at
    // most one run id of its own (a length and the id).
    let per_span = 16 + 8 + 4 + 2 + RUN_ID_BYTES;
    (12 + spans.saturating_mul(per_span)) as u64
}

/// The runs resolved for the spans of one request, each span once (the first run resolved for
/// it: a request naming a span twice stores both facts in that span's run).
#[derive(Default)]
pub(super) struct SpanRunList {
    seen: HashSet<([u8; 16], [u8; 8])>,
    runs: Vec<SpanRun>,
}

impl SpanRunList {
    /// Notes that the fact of span `trace`/`span` (hex ids) was stored under run `run_id`. Ids
    /// that are not 16 and 8 bytes of hex are passed by (the receivers refuse such spans).
    pub(super) fn note(&mut self, trace: &str, span: &str, run_id: &str) {
        if run_id.len() > RUN_ID_BYTES {
            return;
        }
        let (mut trace_id, mut span_id) = ([0u8; 16], [0u8; 8]);
        if hex::decode_to_slice(trace, &mut trace_id).is_err()
            || hex::decode_to_slice(span, &mut span_id).is_err()
        {
            return;
        }
        if self.seen.insert((trace_id, span_id)) {
            self.runs.push(SpanRun {
                trace_id,
                span_id,
                run_id: run_id.to_string(),
            });
        }
    }

    /// Puts `entry` in the batch with these span runs, those of runs that are `shown` (a run
    /// known only from grouping spans is not a run yet); returns its stored size.
    pub(super) fn put(
        mut self,
        batch: &mut WriteBatch<'_>,
        entry: &OutboxEntry,
        shown: impl Fn(&str) -> bool,
    ) -> Result<u64, StoreError> {
        self.runs.retain(|s| shown(&s.run_id));
        batch.put_outbox_with(entry, &self.runs)
    }
}
