//! Rendering a history whose tool calls a sender chose: however many calls go unanswered and
//! however many results answer no call, a continuation costs linear time in them (every format,
//! and `repair=true`, which closes each unanswered call). Timed, so not run with the suite,
//! whose other tests share the cores: `cargo test --release --lib scaling_tests -- --ignored
//! --nocapture` prints each format's time per call. The suite checks the same with the fuzz
//! engine's size probe "unanswered calls and orphan results of one history" (`tests/fuzz.rs`).

use std::time::Instant;

use serde_json::{json, Value};

use super::tests::{history, parts};
use super::{render, Format};

/// A history of `n` unanswered calls (in assistant messages of 10 calls each) and `n` results
/// that answer none of them (in tool messages of 10 results each), the two kinds alternating.
fn unpaired(n: usize) -> Vec<Value> {
    let mut messages = vec![json!({"role": "user", "parts": [parts::text("go")]})];
    for group in 0..n / 10 {
        let ids = (0..10).map(|i| group * 10 + i);
        let calls: Vec<Value> = ids
            .clone()
            .map(|i| parts::call(&format!("call-{i}"), json!({})))
            .collect();
        let results: Vec<Value> = ids
            .map(|i| parts::result(&format!("other-{i}"), json!("ok")))
            .collect();
        messages.push(json!({"role": "assistant", "parts": calls}));
        messages.push(json!({"role": "tool", "parts": results}));
    }
    messages
}

/// Seconds to render the history of [`unpaired`]`(n)` in `format` (repaired first when
/// `repair`), the best of `tries`.
fn render_seconds(format: Format, repair: bool, n: usize, tries: usize) -> f64 {
    let mut best = f64::MAX;
    for _ in 0..tries {
        let mut h = history(unpaired(n), None);
        let start = Instant::now();
        if repair {
            assert_eq!(h.repair().len(), n);
        }
        let (fields, _) = render(format, &h);
        best = best.min(start.elapsed().as_secs_f64());
        assert!(!fields.is_empty(), "{format:?}");
    }
    best
}

/// Per call, rendering 8 times the calls must not take more than 4 times as long, in any format.
#[test]
#[ignore = "timed: run alone (see the module documentation)"]
fn unanswered_calls_and_orphan_results_cost_linear_time() {
    const N: usize = 2_000;
    let mut figures = Vec::new();
    let mut slow = false;
    for name in Format::NAMES {
        let format = Format::parse(name).unwrap();
        for repair in [false, true] {
            let small = render_seconds(format, repair, N, 5) / N as f64;
            let large = render_seconds(format, repair, 8 * N, 5) / (8 * N) as f64;
            slow |= large >= small * 4.0;
            figures.push(format!(
                "{name} (repair {repair}): {:.2} µs per call at {N}, {:.2} µs at {}",
                small * 1e6,
                large * 1e6,
                8 * N
            ));
        }
    }
    eprintln!("{}", figures.join("\n"));
    assert!(!slow, "{}", figures.join("\n"));
}
