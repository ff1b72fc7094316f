//! Which runs were written recently, so readers can act once a run has gone quiet (the
//! continuation prefetch loads the history of a run that stopped sending spans, which is when
//! an orchestrator asks for it). In memory only, best effort: a run missed here is read cold.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Most runs remembered at once; past it the oldest are forgotten, down to three quarters of
/// it (so a busy store sorts the times once per quarter of the bound, not on every commit).
const RECENT_RUNS: usize = 10_000;

/// Runs written since they were last taken, with the time of their last commit.
#[derive(Default)]
pub(super) struct RecentWrites(HashMap<String, Instant>);

impl RecentWrites {
    /// Records that the runs were committed just now.
    pub(super) fn note<'a>(&mut self, run_ids: impl IntoIterator<Item = &'a str>) {
        let recent = self;
        let now = Instant::now();
        for run_id in run_ids {
            recent.0.insert(run_id.to_string(), now);
        }
        if recent.0.len() > RECENT_RUNS {
            let mut times: Vec<Instant> = recent.0.values().copied().collect();
            times.sort_unstable();
            let cut = times[times.len() - RECENT_RUNS * 3 / 4];
            recent.0.retain(|_, at| *at >= cut);
        }
    }

    /// Takes the runs written since they were last taken whose last commit is at least `quiet`
    /// old; a run written again later is given again.
    pub(super) fn take_quiet(&mut self, quiet: Duration) -> Vec<String> {
        let recent = self;
        let now = Instant::now();
        let due: Vec<String> = recent
            .0
            .iter()
            .filter(|(_, at)| now.saturating_duration_since(**at) >= quiet)
            .map(|(id, _)| id.clone())
            .collect();
        for id in &due {
            recent.0.remove(id);
        }
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_are_given_once_quiet_and_again_after_a_new_write() {
        let mut store = RecentWrites::default();
        store.note(["a", "b"]);
        assert!(store.take_quiet(Duration::from_secs(60)).is_empty());
        let mut due = store.take_quiet(Duration::ZERO);
        due.sort();
        assert_eq!(due, ["a", "b"]);
        assert!(store.take_quiet(Duration::ZERO).is_empty(), "taken once");
        store.note(["a"]);
        assert_eq!(store.take_quiet(Duration::ZERO), ["a"]);
    }

    #[test]
    fn the_oldest_runs_are_forgotten_past_the_bound() {
        let mut store = RecentWrites::default();
        store.note(["first"]);
        std::thread::sleep(Duration::from_millis(2));
        let many: Vec<String> = (0..RECENT_RUNS).map(|n| format!("run-{n}")).collect();
        store.note(many.iter().map(String::as_str));
        let due = store.take_quiet(Duration::ZERO);
        assert!(
            due.len() >= RECENT_RUNS * 3 / 4 && due.len() <= RECENT_RUNS,
            "{}",
            due.len()
        );
        assert!(!due.iter().any(|id| id == "first"));
    }
}
