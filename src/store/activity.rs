//! Which runs were written recently, so readers can act once a run has gone quiet (the
//! continuation prefetch loads the history of a run that stopped sending spans, which is when
//! an orchestrator asks for it). In memory only, best effort: a run missed here is read cold.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Most runs remembered at once; past it the oldest are forgotten, down to three quarters of
/// it (so a busy store sorts the times once per quarter of the bound, not on every commit).
const RECENT_RUNS: usize = 10_000;

/// A run a commit wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WrittenRun {
    /// The run's id.
    pub run_id: String,
    /// The most messages of any of the run's snapshots, when the commit wrote all of them (the
    /// run was derived in full); `None` when it is not known.
    pub longest_history: Option<u32>,
}

impl WrittenRun {
    /// A written run whose longest history is not known.
    pub fn of(run_id: &str) -> Self {
        Self {
            run_id: run_id.to_string(),
            longest_history: None,
        }
    }
}

/// Runs written since they were last taken, with the time of their last commit and their
/// longest history as that commit knew it.
#[derive(Default)]
pub(super) struct RecentWrites(HashMap<String, (Instant, Option<u32>)>);

impl RecentWrites {
    /// Records that the runs were committed just now.
    pub(super) fn note<'a>(&mut self, runs: impl IntoIterator<Item = &'a WrittenRun>) {
        let recent = self;
        let now = Instant::now();
        for run in runs {
            recent
                .0
                .insert(run.run_id.clone(), (now, run.longest_history));
        }
        if recent.0.len() > RECENT_RUNS {
            let mut times: Vec<Instant> = recent.0.values().map(|(at, _)| *at).collect();
            times.sort_unstable();
            let cut = times[times.len() - RECENT_RUNS * 3 / 4];
            recent.0.retain(|_, (at, _)| *at >= cut);
        }
    }

    /// Takes the runs written since they were last taken whose last commit is at least `quiet`
    /// old; a run written again later is given again.
    pub(super) fn take_quiet(&mut self, quiet: Duration) -> Vec<WrittenRun> {
        let recent = self;
        let now = Instant::now();
        let due: Vec<WrittenRun> = recent
            .0
            .iter()
            .filter(|(_, (at, _))| now.saturating_duration_since(*at) >= quiet)
            .map(|(id, (_, longest))| WrittenRun {
                run_id: id.clone(),
                longest_history: *longest,
            })
            .collect();
        for run in &due {
            recent.0.remove(&run.run_id);
        }
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(runs: &[WrittenRun]) -> Vec<&str> {
        let mut ids: Vec<&str> = runs.iter().map(|r| r.run_id.as_str()).collect();
        ids.sort();
        ids
    }

    #[test]
    fn runs_are_given_once_quiet_and_again_after_a_new_write() {
        let mut store = RecentWrites::default();
        store.note(&[WrittenRun::of("a"), WrittenRun::of("b")]);
        assert!(store.take_quiet(Duration::from_secs(60)).is_empty());
        assert_eq!(ids(&store.take_quiet(Duration::ZERO)), ["a", "b"]);
        assert!(store.take_quiet(Duration::ZERO).is_empty(), "taken once");
        store.note(&[WrittenRun::of("a")]);
        assert_eq!(ids(&store.take_quiet(Duration::ZERO)), ["a"]);
    }

    #[test]
    fn a_run_is_given_with_what_its_last_commit_knew_of_its_longest_history() {
        let mut store = RecentWrites::default();
        let known = |n| WrittenRun {
            longest_history: Some(n),
            ..WrittenRun::of("a")
        };
        store.note(&[known(3)]);
        store.note(&[known(700)]);
        assert_eq!(store.take_quiet(Duration::ZERO), [known(700)]);
        // A later commit that did not know it (an append) leaves it unknown.
        store.note(&[known(3)]);
        store.note(&[WrittenRun::of("a")]);
        assert_eq!(store.take_quiet(Duration::ZERO), [WrittenRun::of("a")]);
    }

    #[test]
    fn the_oldest_runs_are_forgotten_past_the_bound() {
        let mut store = RecentWrites::default();
        store.note(&[WrittenRun::of("first")]);
        std::thread::sleep(Duration::from_millis(2));
        let many: Vec<WrittenRun> = (0..RECENT_RUNS)
            .map(|n| WrittenRun::of(&format!("run-{n}")))
            .collect();
        store.note(&many);
        let due = store.take_quiet(Duration::ZERO);
        assert!(
            due.len() >= RECENT_RUNS * 3 / 4 && due.len() <= RECENT_RUNS,
            "{}",
            due.len()
        );
        assert!(!due.iter().any(|r| r.run_id == "first"));
    }
}
