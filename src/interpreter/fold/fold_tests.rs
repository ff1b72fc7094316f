//! Property tests of the fold: folding all of a run's facts at once equals folding a prefix,
//! storing the state through its serde form, and folding the rest.

use std::collections::{HashMap, HashSet};

use proptest::prelude::*;
use serde_json::{json, Value};

use super::tests::{answer, call, model, text, tool, user};
use super::*;
use crate::domain::{ChainIds, MessageHash};
use crate::records::run_state::RunMeta;

/// A run of `steps` model requests (each sending the whole history so far, one tool call out)
/// and their tool spans, in arrival order. `variant` bits: 1, a tool fails; 2, a tool span never
/// comes (the next input answers the call); 4, every third call reuses one id; 8, the second
/// request asks for two calls at once; 16, odd requests carry system instructions; 32, times
/// are in milliseconds rather than nanoseconds (so durations round to whole milliseconds);
/// 64, spans carry a trigger and a tenant attribute, the later ones a further attribute.
fn run(steps: u64, variant: u8) -> Vec<SpanFact> {
    let mut facts = run_ns(steps, variant);
    if variant & 32 != 0 {
        for f in &mut facts {
            f.start_ns *= 1_000_000;
            f.end_ns *= 1_000_000;
        }
    }
    if variant & 64 != 0 {
        let n = facts.len();
        for (i, f) in facts.iter_mut().enumerate() {
            f.run_info.trigger.kind = Some("schedule".into());
            f.run_info.attributes.insert("tenant".into(), "acme".into());
            if i >= n / 2 {
                f.run_info.attributes.insert("env".into(), "prod".into());
            }
        }
    }
    facts
}

/// [`run`]'s facts with times in nanoseconds.
fn run_ns(steps: u64, variant: u8) -> Vec<SpanFact> {
    let mut history = vec![user()];
    let mut facts = Vec::new();
    for k in 1..=steps {
        let start = 1000 + k * 100;
        let id = if variant & 4 != 0 && k % 3 == 0 {
            "dup".to_string()
        } else {
            format!("c{k}")
        };
        let last = k == steps;
        let mut ids = vec![id.clone()];
        if variant & 8 != 0 && k == 2 {
            ids.push("p2".into());
        }
        let output: Vec<Value> = if last {
            vec![text()]
        } else {
            ids.iter().map(|i| call(i)).collect()
        };
        let mut m = model(&format!("m{k:02}"), start, history.clone(), output.clone());
        if variant & 16 != 0 && k % 2 == 1 {
            m.system_instructions = Some(json!({"instructions": format!("step {k}")}));
        }
        m.input_tokens = Some(3);
        m.output_tokens = Some(k);
        facts.push(m);
        if last {
            break;
        }
        history.extend(output);
        for (n, i) in ids.iter().enumerate() {
            let skipped = variant & 2 != 0 && k == 2 && n == 0;
            if !skipped {
                let failed = variant & 1 != 0 && k == 1;
                facts.push(tool(
                    &format!("t{k:02}{n}"),
                    i,
                    start + 20 + 10 * n as u64,
                    failed,
                ));
            }
            history.push(answer(i));
        }
    }
    facts
}

/// A run's records as a fold leaves them, composed from a first fold and the appends after it.
struct Composed {
    run: Run,
    events: Vec<StepEvent>,
    effects: Vec<ToolEffect>,
    snapshots: Vec<SnapshotRecord>,
    nodes: HashSet<NodeId>,
    bodies: HashSet<MessageHash>,
    state: Option<RunState>,
}

impl Composed {
    fn of(d: DerivedRun) -> Self {
        Self {
            run: d.run,
            events: d.events,
            effects: d.effects,
            snapshots: d.snapshots,
            nodes: d.nodes.iter().map(|(id, _)| *id).collect(),
            bodies: d.new_messages.iter().map(MessageHash::of).collect(),
            state: d.state,
        }
    }

    /// Applies an append as the store does.
    fn apply(&mut self, a: Append) {
        self.events.extend(a.events);
        for (i, e) in a.effects {
            match self.effects.get_mut(i as usize) {
                Some(old) => *old = e,
                None => {
                    assert_eq!(i as usize, self.effects.len(), "entries in index order");
                    self.effects.push(e);
                }
            }
        }
        let from = a
            .snapshots
            .first()
            .map_or(a.run.snapshot_count, |s| s.meta.seq);
        self.snapshots.truncate(from as usize);
        self.snapshots.extend(a.snapshots);
        self.snapshots.truncate(a.run.snapshot_count as usize);
        self.nodes.extend(a.nodes.iter().map(|(id, _)| *id));
        self.bodies
            .extend(a.new_messages.iter().map(MessageHash::of));
        self.run = a.run;
        self.state = Some(a.state);
    }
}

/// The state as the store keeps it: through its JSON form.
fn stored(state: &RunState) -> RunState {
    let bytes = serde_json::to_vec(state).unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

/// Folds `facts[..cuts[0]]` at once, then each further piece up to the next cut on the state
/// stored after the one before; `None` as soon as a piece is refused (the caller would derive in
/// full), else the composed records and the input nodes the store keeps with the facts.
fn fold_in_pieces(facts: &[SpanFact], cuts: &[usize]) -> Option<(Composed, HashSet<NodeId>)> {
    let meta = RunMeta::default();
    let first = cuts.first().copied().unwrap_or(facts.len());
    let mut composed = Composed::of(derive("r", &facts[..first], &meta));
    let mut input_nodes = HashSet::new();
    let mut ids = ChainIds::default();
    let bounds = cuts.iter().skip(1).copied().chain([facts.len()]);
    let mut at = first;
    for end in bounds {
        let piece = &facts[at..end];
        at = end;
        if piece.is_empty() {
            continue;
        }
        let state = stored(composed.state.as_ref()?);
        let new: Vec<NewFact<'_>> = piece
            .iter()
            .map(|fact| NewFact {
                fact,
                input_chain: None,
                input_prefixes: None,
            })
            .collect();
        // The store chains every input when it stores the fact.
        for input in piece.iter().filter_map(|f| f.input.as_ref()) {
            input_nodes.extend(ids.ids(input.iter().map(|m| &m.hash)).iter().copied());
        }
        let mut counts: HashMap<&str, u32> = HashMap::new();
        for e in &composed.effects {
            *counts.entry(e.tool_call_id.as_str()).or_default() += 1;
        }
        let a = append(&composed.run, &state, &new, |id| {
            Some(counts.get(id).copied().unwrap_or(0))
        })?;
        composed.apply(a);
    }
    Some((composed, input_nodes))
}

/// The composed records equal the fold of all facts at once.
fn assert_same(all: &DerivedRun, got: &Composed, input_nodes: &HashSet<NodeId>) {
    assert_eq!(all.run, got.run);
    assert_rollups_agree(&got.run, &got.effects);
    assert_eq!(all.events, got.events);
    assert_eq!(all.effects, got.effects);
    assert_eq!(all.snapshots, got.snapshots);
    assert_eq!(all.state, got.state);
    for (id, _) in &all.nodes {
        assert!(
            got.nodes.contains(id) || input_nodes.contains(id),
            "node {id}"
        );
    }
    for body in &all.new_messages {
        assert!(got.bodies.contains(&MessageHash::of(body)), "body {body}");
    }
}

/// The run record's ledger rollups are those of its ledger.
fn assert_rollups_agree(run: &Run, effects: &[ToolEffect]) {
    let counts = run.tool_calls_by_status;
    assert_eq!(counts.total(), run.tool_call_count, "{counts:?}");
    let completed = effects
        .iter()
        .filter(|e| e.status == crate::domain::EffectStatus::Completed)
        .count() as u32;
    assert_eq!(counts.completed, completed);
    let time: u64 = effects.iter().filter_map(|e| e.duration_ms).sum();
    assert_eq!(run.tool_time_ms, time);
    assert!(effects
        .iter()
        .all(|e| e.duration_ms.unwrap_or(0) <= run.tool_time_ms));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..Default::default() })]

    /// Folding all facts at once equals folding a prefix, storing the state through its serde
    /// form, and folding the rest (in up to three pieces), whenever the guard lets the rest be
    /// appended.
    #[test]
    fn folding_in_pieces_equals_folding_at_once(
        steps in 2u64..8,
        variant in 0u8..128,
        cuts in proptest::collection::vec(0usize..64, 1..4),
    ) {
        let facts = run(steps, variant);
        let all = derive("r", &facts, &RunMeta::default());
        assert_rollups_agree(&all.run, &all.effects);
        let mut cuts: Vec<usize> = cuts.iter().map(|c| 1 + c % facts.len()).collect();
        cuts.sort_unstable();
        if let Some((got, input_nodes)) = fold_in_pieces(&facts, &cuts) {
            assert_same(&all, &got, &input_nodes);
        }
    }
}

#[test]
fn every_split_of_an_in_order_run_is_appended_and_equals_the_whole() {
    for variant in [0u8, 1, 4, 8, 16, 31, 32, 33, 63] {
        let facts = run(6, variant);
        let all = derive("r", &facts, &RunMeta::default());
        assert!(
            all.state.is_some(),
            "{variant}: a running run keeps its state"
        );
        for cut in 1..facts.len() {
            let (got, input_nodes) = fold_in_pieces(&facts, &[cut])
                .unwrap_or_else(|| panic!("variant {variant}, cut {cut}: refused"));
            assert_same(&all, &got, &input_nodes);
        }
        // One fact at a time.
        let each: Vec<usize> = (1..facts.len()).collect();
        let (got, input_nodes) = fold_in_pieces(&facts, &each).unwrap();
        assert_same(&all, &got, &input_nodes);
    }
}

#[test]
fn rollups_follow_the_ledger_through_appends() {
    // Times in milliseconds: tools take 5 ms, model requests 10 ms; one tool fails.
    let facts = run(5, 32 | 1);
    let all = derive("r", &facts, &RunMeta::default());
    assert_eq!(all.run.model_time_ms, 5 * 10);
    assert_eq!(all.run.tool_time_ms, 4 * 5);
    assert!(all.effects.iter().all(|e| e.duration_ms == Some(5)));
    assert_eq!(all.run.tool_calls_by_status.completed, 3);
    assert_eq!(all.run.tool_calls_by_status.failed, 1);
    assert_eq!(all.run.tool_calls_by_status.unresolved, 0);
    // Cut after a model request whose tool span has not come: that call is unresolved, and
    // turns completed when its span is appended.
    let cut = 3; // m1, t1, m2
    let first = derive("r", &facts[..cut], &RunMeta::default());
    assert_eq!(first.run.tool_calls_by_status.unresolved, 1);
    assert_eq!(first.run.tool_time_ms, 5);
    let (got, input_nodes) = fold_in_pieces(&facts, &[cut, cut + 1]).unwrap();
    assert_same(&all, &got, &input_nodes);
}

#[test]
fn trigger_and_attributes_merge_and_new_ones_are_derived_in_full() {
    let facts = run(4, 64);
    let all = derive("r", &facts, &RunMeta::default());
    assert_eq!(
        all.run.trigger.as_ref().and_then(|t| t.kind.as_deref()),
        Some("schedule")
    );
    assert_eq!(all.run.attributes["tenant"], "acme");
    assert_eq!(all.run.attributes["env"], "prod");
    // Facts that repeat what the run has are appended; one that adds an attribute is not.
    let half = facts.len() / 2;
    assert!(fold_in_pieces(&facts[..half], &[1]).is_some());
    assert!(fold_in_pieces(&facts, &[half]).is_none());
}

#[test]
fn a_state_from_before_the_rollups_is_never_appended_to() {
    let facts = run(3, 32);
    let first = derive("r", &facts[..1], &RunMeta::default());
    let current = first.state.clone().unwrap();
    assert!(current.keeps_rollups);
    let mut before = current.clone();
    before.keeps_rollups = false;
    let new: Vec<NewFact<'_>> = facts[1..].iter().map(NewFact::bare).collect();
    assert!(append(&first.run, &stored(&before), &new, |_| Some(0)).is_none());
    assert!(append(&first.run, &stored(&current), &new, |_| Some(0)).is_some());
}
