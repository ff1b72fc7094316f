//! Where recent commits changed each run's tool-effect ledger and model-request records, so a
//! reader that read them at an earlier point reads again only from the first key changed since,
//! instead of scanning every record of a long run at each of its steps.
//!
//! A reader takes a [`ChangeMark`] before it reads. Later, [`ChangeLog::since`] gives, for one
//! run, the smallest key that a commit after the mark put or deleted ([`Changed::From`]),
//! [`Changed::Nothing`] when no commit since touched the run's records, or [`Changed::Unknown`]
//! when that is no longer remembered (the reader then reads everything, as without the log).
//!
//! A commit is noted only after its batch was written, and a mark is taken under the same
//! lock: a commit counted at or before a mark was in the key-value store before the reader that
//! took the mark started reading. A commit noted after the mark may or may not have been seen
//! by that read; either way its keys are given again next time, which at worst reads them twice.
//!
//! In memory only, bounded: at most [`RUNS`] runs, each with at most [`PER_RUN`] commits (past
//! it the two oldest are merged into one, the later commit with the smaller key, which only ever
//! widens what a reader reads again). Runs forgotten past the bound raise a floor below which
//! every mark is answered [`Changed::Unknown`]; so do range deletions in these column families
//! (a run deleted, a run key given back) and keys of a shape not recognised.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use super::column::Cf;
use super::kv::Op;

/// Most runs whose changes are remembered at once.
pub const RUNS: usize = 2048;
/// Most commits remembered per run.
pub const PER_RUN: usize = 8;
/// Most estimated bytes held (run ids are a sender's to choose); past it, as past [`RUNS`],
/// the runs changed longest ago are forgotten.
pub const BYTES: usize = 1 << 20;

/// Gives each change log an id of its own, so a mark is never read against another store's log.
static LOGS: AtomicU64 = AtomicU64::new(1);

/// A point in a store's commits (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChangeMark {
    log: u64,
    commit: u64,
}

/// What commits after a mark changed of one run's records in one column family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Changed<K = Vec<u8>> {
    /// Not known: read every record of the run.
    Unknown,
    /// No record of the run was put or deleted.
    Nothing,
    /// The smallest key put or deleted (here a whole key, the run's prefix included; the
    /// store's readers give it decoded): the records before it are as they were at the mark.
    From(K),
}

/// The column families tracked, by their index in the log's tables.
const TRACKED: [Cf; 2] = [Cf::Effects, Cf::ModelRequests];

/// The index of a tracked column family.
fn tracked(cf: Cf) -> Option<usize> {
    TRACKED.iter().position(|t| *t == cf)
}

/// The run-prefix length of `key` in the tracked column family `at`; `None` for a key of a
/// shape not recognised.
fn prefix_len(at: usize, key: &[u8]) -> Option<usize> {
    if at == 0 {
        // run key(8) index(be32)
        (key.len() == 12).then_some(8)
    } else {
        // run key(8) start(be64) span_id
        (key.len() >= 16).then_some(8)
    }
}

/// Per run prefix, a key (or list of them).
type ByRun<T> = HashMap<Box<[u8]>, T>;

/// A run's commits remembered: `(commit, smallest key it changed)`, oldest first.
type Commits = Vec<(u64, Box<[u8]>)>;

/// What one batch changed in the tracked column families.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Touched {
    /// Per tracked column family and run prefix, the smallest key put or deleted.
    first: [ByRun<Box<[u8]>>; 2],
    /// A write no run can be told for (a range deletion, a key of another shape).
    any: bool,
}

impl Touched {
    /// What `ops` change in the tracked column families; `None` when they change none.
    pub fn of(ops: &[Op]) -> Option<Touched> {
        let mut touched: Option<Touched> = None;
        for op in ops {
            let (cf, key) = match op {
                Op::Put { cf, key, .. } | Op::Delete { cf, key } => (*cf, key.as_slice()),
                Op::DeleteRange { cf, .. } => (*cf, &[][..]),
            };
            let Some(at) = tracked(cf) else {
                continue;
            };
            let t = touched.get_or_insert_with(Touched::default);
            let len = match op {
                Op::DeleteRange { .. } => None,
                _ => prefix_len(at, key),
            };
            let Some(len) = len else {
                t.any = true;
                continue;
            };
            // Looked up by the borrowed prefix: a run's many keys in one batch allocate once.
            match t.first[at].get_mut(&key[..len]) {
                Some(first) if **first > *key => *first = Box::from(key),
                Some(_) => {}
                None => {
                    t.first[at].insert(Box::from(&key[..len]), Box::from(key));
                }
            }
        }
        touched
    }
}

/// Estimated bytes of one run remembered, besides its commits.
fn run_bytes(prefix: &[u8]) -> usize {
    64 + prefix.len()
}

/// Estimated bytes of one commit remembered for a run.
fn commit_bytes(key: &[u8]) -> usize {
    32 + key.len()
}

/// The commits of a store that changed tracked records, counted, with where each changed them.
#[derive(Debug)]
pub struct ChangeLog {
    log: u64,
    /// Commits noted so far.
    commit: u64,
    /// Marks below this are answered [`Changed::Unknown`].
    floor: u64,
    /// Per tracked column family and run prefix: `(commit, smallest key it changed)`, oldest
    /// first.
    runs: [ByRun<Commits>; 2],
    /// Estimated bytes held (see [`ChangeLog::bytes`]).
    held: usize,
}

impl Default for ChangeLog {
    fn default() -> Self {
        Self {
            log: LOGS.fetch_add(1, Ordering::Relaxed),
            commit: 0,
            floor: 0,
            runs: Default::default(),
            held: 0,
        }
    }
}

impl ChangeLog {
    /// The point reached: take it before reading.
    pub fn mark(&self) -> ChangeMark {
        ChangeMark {
            log: self.log,
            commit: self.commit,
        }
    }

    /// Notes a commit written with the changes `touched`.
    pub fn note(&mut self, touched: Touched) {
        self.commit += 1;
        let commit = self.commit;
        if touched.any {
            self.floor = commit;
            self.runs = Default::default();
            self.held = 0;
            return;
        }
        for (runs, first) in self.runs.iter_mut().zip(touched.first) {
            for (run, first) in first {
                let commits = runs.entry(run).or_insert_with_key(|run| {
                    self.held += run_bytes(run);
                    Vec::new()
                });
                self.held += commit_bytes(&first);
                commits.push((commit, first));
                if commits.len() > PER_RUN {
                    let (_, older) = commits.remove(0);
                    self.held -= commit_bytes(&older);
                    if older < commits[0].1 {
                        self.held = self.held + older.len() - commits[0].1.len();
                        commits[0].1 = older;
                    }
                }
            }
        }
        if self.runs.iter().map(HashMap::len).sum::<usize>() > RUNS || self.held > BYTES {
            self.forget_oldest();
        }
    }

    /// Forgets the runs changed longest ago, down to three quarters of either bound (so this
    /// runs once per quarter of it, not at every commit), and raises the floor past them.
    fn forget_oldest(&mut self) {
        let mut runs: Vec<(u64, usize, &[u8], usize)> = self
            .runs
            .iter()
            .enumerate()
            .flat_map(|(at, runs)| {
                runs.iter().map(move |(run, commits)| {
                    let newest = commits.last().map_or(0, |(commit, _)| *commit);
                    let bytes = run_bytes(run)
                        + commits.iter().map(|(_, k)| commit_bytes(k)).sum::<usize>();
                    (newest, at, &run[..], bytes)
                })
            })
            .collect();
        runs.sort_unstable();
        let (mut count, mut held) = (runs.len(), self.held);
        let mut forget: Vec<(usize, Box<[u8]>)> = Vec::new();
        let mut floor = self.floor;
        for (newest, at, run, bytes) in runs {
            if count <= RUNS * 3 / 4 && held <= BYTES * 3 / 4 {
                break;
            }
            forget.push((at, Box::from(run)));
            floor = floor.max(newest);
            count -= 1;
            held -= bytes;
        }
        for (at, run) in forget {
            self.runs[at].remove(&run);
        }
        self.floor = floor;
        self.held = held;
    }

    /// What commits after `mark` changed of the records of `cf` under `prefix`.
    pub fn since(&self, cf: Cf, prefix: &[u8], mark: ChangeMark) -> Changed {
        let Some(at) = tracked(cf) else {
            return Changed::Unknown;
        };
        if mark.log != self.log || mark.commit < self.floor || mark.commit > self.commit {
            return Changed::Unknown;
        }
        let Some(commits) = self.runs[at].get(prefix) else {
            return Changed::Nothing;
        };
        commits
            .iter()
            .filter(|(commit, _)| *commit > mark.commit)
            .map(|(_, first)| first)
            .min()
            .map_or(Changed::Nothing, |first| Changed::From(first.to_vec()))
    }

    /// Estimated bytes held: at most about [`BYTES`].
    pub fn bytes(&self) -> usize {
        self.held
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::keys::RunKey;

    /// The run key a test names `run`.
    fn run(name: &str) -> RunKey {
        use std::hash::{Hash, Hasher};
        let mut h = std::hash::DefaultHasher::new();
        name.hash(&mut h);
        RunKey::of(h.finish() >> 8)
    }

    fn effect(name: &str, n: u32) -> Vec<u8> {
        super::super::keys::run_key_seq(run(name), n)
    }

    fn put(cf: Cf, key: Vec<u8>) -> Op {
        Op::Put {
            cf,
            key,
            value: b"v".to_vec(),
        }
    }

    fn commit(log: &mut ChangeLog, ops: &[Op]) {
        if let Some(t) = Touched::of(ops) {
            log.note(t);
        }
    }

    fn prefix(name: &str) -> Vec<u8> {
        run(name).0.to_vec()
    }

    /// What changed of `run`'s ledger since `mark`.
    fn ledger(log: &ChangeLog, run: &str, mark: ChangeMark) -> Changed {
        log.since(Cf::Effects, &prefix(run), mark)
    }

    #[test]
    fn a_reader_is_told_the_first_key_changed_since_its_mark() {
        let mut log = ChangeLog::default();
        let start = log.mark();
        assert_eq!(ledger(&log, "a", start), Changed::Nothing);
        commit(
            &mut log,
            &[
                put(Cf::Effects, effect("a", 7)),
                put(Cf::Effects, effect("a", 5)),
            ],
        );
        let after_first = log.mark();
        commit(
            &mut log,
            &[Op::Delete {
                cf: Cf::Effects,
                key: effect("a", 9),
            }],
        );
        commit(&mut log, &[put(Cf::Effects, effect("b", 1))]);
        assert_eq!(ledger(&log, "a", start), Changed::From(effect("a", 5)));
        assert_eq!(
            ledger(&log, "a", after_first),
            Changed::From(effect("a", 9))
        );
        assert_eq!(ledger(&log, "a", log.mark()), Changed::Nothing);
        assert_eq!(
            ledger(&log, "b", after_first),
            Changed::From(effect("b", 1))
        );
        // Another column family's records of the run are apart.
        assert_eq!(
            log.since(Cf::ModelRequests, &prefix("a"), start),
            Changed::Nothing
        );
    }

    #[test]
    fn untracked_writes_are_not_counted_and_a_mark_of_another_log_is_unknown() {
        let mut log = ChangeLog::default();
        let before = log.mark();
        commit(&mut log, &[put(Cf::Runs, b"a".to_vec())]);
        assert_eq!(log.mark(), before);
        let other = ChangeLog::default();
        assert_eq!(ledger(&log, "a", other.mark()), Changed::Unknown);
    }

    #[test]
    fn range_deletions_and_unknown_shapes_make_every_earlier_mark_unknown() {
        for op in [
            Op::DeleteRange {
                cf: Cf::ModelRequests,
                from: vec![0; 8],
                to: vec![1; 8],
            },
            put(Cf::Effects, b"short".to_vec()),
            put(Cf::Effects, vec![1; 13]),
            put(Cf::ModelRequests, vec![1; 9]),
        ] {
            let mut log = ChangeLog::default();
            commit(&mut log, &[put(Cf::Effects, effect("a", 1))]);
            let before = log.mark();
            commit(&mut log, &[op]);
            assert_eq!(ledger(&log, "a", before), Changed::Unknown);
            assert_eq!(ledger(&log, "z", before), Changed::Unknown);
            let after = log.mark();
            assert_eq!(ledger(&log, "a", after), Changed::Nothing);
        }
    }

    #[test]
    fn merged_commits_only_widen_what_is_read_again() {
        let mut log = ChangeLog::default();
        let mut marks = Vec::new();
        for n in 0..(PER_RUN as u32 * 3) {
            marks.push((log.mark(), n));
            // Each commit changes one entry, at positions going down then up.
            let at = if n % 2 == 0 { 100 - n } else { 100 + n };
            commit(&mut log, &[put(Cf::Effects, effect("a", at))]);
        }
        assert!(log.runs[0].values().all(|c| c.len() <= PER_RUN));
        for (mark, n) in marks {
            let exact = (n..PER_RUN as u32 * 3)
                .map(|m| if m % 2 == 0 { 100 - m } else { 100 + m })
                .min()
                .unwrap();
            let Changed::From(first) = ledger(&log, "a", mark) else {
                panic!("changes after commit {n} not given");
            };
            assert!(first <= effect("a", exact), "after commit {n}");
        }
    }

    #[test]
    fn runs_forgotten_past_the_bound_make_older_marks_unknown() {
        let mut log = ChangeLog::default();
        let start = log.mark();
        commit(&mut log, &[put(Cf::Effects, effect("first", 0))]);
        let after_first = log.mark();
        for n in 0..RUNS {
            commit(
                &mut log,
                &[put(Cf::Effects, effect(&format!("run-{n}"), 0))],
            );
        }
        assert!(log.runs[0].len() <= RUNS);
        assert_eq!(ledger(&log, "first", start), Changed::Unknown);
        assert_eq!(ledger(&log, "first", after_first), Changed::Unknown);
        let now = log.mark();
        assert_eq!(ledger(&log, "first", now), Changed::Nothing);
        let last = format!("run-{}", RUNS - 1);
        assert_eq!(ledger(&log, &last, now), Changed::Nothing);
        assert!(log.bytes() > 0);
    }

    #[test]
    fn long_span_ids_are_held_to_the_byte_bound() {
        let mut log = ChangeLog::default();
        // A model-request record's key ends with its span id, which a sender chooses.
        let request = |n: u32| {
            super::super::keys::model_request_key(run(&format!("run-{n}")), 7, &"s".repeat(4096))
        };
        for n in 0..2000 {
            commit(&mut log, &[put(Cf::ModelRequests, request(n))]);
            assert!(log.bytes() <= BYTES + 8192, "{}", log.bytes());
        }
        let recomputed: usize = log.runs[1]
            .iter()
            .map(|(run, c)| run_bytes(run) + c.iter().map(|(_, k)| commit_bytes(k)).sum::<usize>())
            .sum();
        assert_eq!(log.bytes(), recomputed);
        let before = ChangeMark {
            commit: log.commit - 1,
            ..log.mark()
        };
        assert_eq!(
            log.since(Cf::ModelRequests, &prefix("run-1999"), before),
            Changed::From(request(1999))
        );
    }
}
