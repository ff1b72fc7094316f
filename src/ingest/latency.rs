//! How long received requests take in the ingest, stage by stage, as histograms for `/metrics`
//! (`stepline_ingest_request_duration_seconds`, `stepline_ingest_stage_duration_seconds`).
//!
//! Each observation is one request: a request that waited in a group of eight for a RocksDB
//! write of 3 ms adds 3 ms to that stage eight times, as each of them waited that long. The
//! stages of one request add up to a little less than its whole duration: what is left is the
//! media store (when a request carries blobs) and the wake-ups between the stages.
//!
//! Recording is a few relaxed atomic adds; reading takes no lock either, so a scrape may see an
//! observation's bucket and not yet its sum (the count is the buckets' sum, always consistent).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds of the buckets, in nanoseconds (the last, `+Inf`, is implied).
const BOUNDS_NS: [u64; 14] = [
    500_000,
    1_000_000,
    2_000_000,
    5_000_000,
    10_000_000,
    20_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
    5_000_000_000,
    10_000_000_000,
];

/// Buckets, `+Inf` included.
const BUCKETS: usize = BOUNDS_NS.len() + 1;

/// A latency histogram with fixed buckets from 0.5 ms to 10 s.
#[derive(Debug, Default)]
pub struct Histogram {
    counts: [AtomicU64; BUCKETS],
    sum_ns: AtomicU64,
}

/// What a histogram held when it was read.
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramReading {
    /// Seconds of all observations together.
    pub sum_seconds: f64,
    /// Observations.
    pub count: u64,
    /// Per bucket, its upper bound in seconds (`f64::INFINITY` last) and the observations in it
    /// (not cumulative).
    pub buckets: Vec<(f64, u64)>,
}

impl Histogram {
    /// Records `n` observations of `took`.
    pub fn observe_n(&self, took: Duration, n: u64) {
        if n == 0 {
            return;
        }
        let ns = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        let bucket = BOUNDS_NS.partition_point(|&bound| bound < ns);
        self.counts[bucket].fetch_add(n, Ordering::Relaxed);
        let add = ns.saturating_mul(n);
        // Saturating, so an absurd duration cannot wrap the sum around.
        let _ = self
            .sum_ns
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |sum| {
                Some(sum.saturating_add(add))
            });
    }

    /// Records one observation of `took`.
    pub fn observe(&self, took: Duration) {
        self.observe_n(took, 1);
    }

    /// The histogram as it stands.
    pub fn read(&self) -> HistogramReading {
        let bounds = BOUNDS_NS
            .iter()
            .map(|&ns| ns as f64 / 1e9)
            .chain(std::iter::once(f64::INFINITY));
        let buckets: Vec<(f64, u64)> = bounds
            .zip(&self.counts)
            .map(|(bound, count)| (bound, count.load(Ordering::Relaxed)))
            .collect();
        HistogramReading {
            sum_seconds: self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9,
            count: buckets.iter().map(|(_, n)| n).sum(),
            buckets,
        }
    }
}

/// A stage of a received request, as `stepline_ingest_stage_duration_seconds` labels it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// A trace request waiting for a thread of the blocking pool to decode and interpret it.
    PoolWait,
    /// Decoding and interpreting a trace request (and packing its outbox entry).
    Interpret,
    /// Waiting in the writer's queue until its group starts.
    WriterQueue,
    /// The writer deriving the group's records (run state, snapshots, the ledger, lineage),
    /// reading what it needs from the store.
    WriterApply,
    /// The group's RocksDB write: the WAL, its fsync when `sync` is on, the memtables, and
    /// any wait for the memtables to come under their budget.
    RocksdbWrite,
}

impl Stage {
    /// Every stage, in the order a request goes through them.
    pub const ALL: [Stage; 5] = [
        Stage::PoolWait,
        Stage::Interpret,
        Stage::WriterQueue,
        Stage::WriterApply,
        Stage::RocksdbWrite,
    ];

    /// The `stage` label.
    pub fn label(self) -> &'static str {
        match self {
            Stage::PoolWait => "pool_wait",
            Stage::Interpret => "interpret",
            Stage::WriterQueue => "writer_queue",
            Stage::WriterApply => "writer_apply",
            Stage::RocksdbWrite => "rocksdb_write",
        }
    }
}

/// The ingest's latency histograms.
#[derive(Debug, Default)]
pub struct Latencies {
    /// Trace export requests, from the moment the ingest takes one (still encoded) to its
    /// answer.
    pub trace_requests: Histogram,
    stages: [Histogram; Stage::ALL.len()],
}

impl Latencies {
    /// The histogram of `stage`.
    pub fn stage(&self, stage: Stage) -> &Histogram {
        &self.stages[stage as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_observation_lands_in_the_first_bucket_whose_bound_it_does_not_pass() {
        let h = Histogram::default();
        h.observe(Duration::from_micros(10));
        h.observe(Duration::from_micros(500)); // on a bound: that bucket
        h.observe(Duration::from_micros(501));
        h.observe_n(Duration::from_millis(30), 3);
        h.observe(Duration::from_secs(60));
        h.observe(Duration::MAX);
        h.observe_n(Duration::from_millis(1), 0);
        let r = h.read();
        assert_eq!(r.count, 8);
        assert_eq!(r.buckets.len(), BUCKETS);
        let count_at = |bound: f64| r.buckets.iter().find(|(b, _)| *b == bound).map(|b| b.1);
        assert_eq!(count_at(0.0005), Some(2));
        assert_eq!(count_at(0.001), Some(1));
        assert_eq!(count_at(0.05), Some(3));
        assert_eq!(count_at(f64::INFINITY), Some(2));
        assert_eq!(r.buckets.iter().map(|b| b.1).sum::<u64>(), 8);
        // The sum saturates rather than wrapping on an absurd duration.
        assert!(r.sum_seconds >= 60.0);
    }

    #[test]
    fn the_bounds_rise_and_every_stage_has_its_own_histogram() {
        assert!(BOUNDS_NS.windows(2).all(|w| w[0] < w[1]));
        let l = Latencies::default();
        for (i, stage) in Stage::ALL.into_iter().enumerate() {
            l.stage(stage)
                .observe_n(Duration::from_millis(1), i as u64 + 1);
        }
        for (i, stage) in Stage::ALL.into_iter().enumerate() {
            assert_eq!(
                l.stage(stage).read().count,
                i as u64 + 1,
                "{}",
                stage.label()
            );
        }
        assert_eq!(l.trace_requests.read().count, 0);
    }
}
