//! Joining tool spans that carry no tool-call id (OpenInference TOOL spans, OpenLLMetry `tool`
//! spans), or one that matches no call the model asked for (Google ADK's invented `adk-<uuid>`
//! ids, whose messages call the same call `get_weather_0`), to the calls the model asked for: by
//! name, then arguments, then order. This is the fallback of every convention.
//!
//! A tool span is matched among the unclaimed calls of the latest model request that ended
//! before it started (any earlier request when that one has none). Among calls of that name, one
//! with equal arguments (compared as JSON, since tool spans re-serialise them) wins; when several
//! are equal, or none is, the first in response order is taken and a warning says the join was
//! by order. Tool spans are taken in start order, so parallel calls pair up in the order the
//! model listed them. A pure function of the facts: arrival order cannot change the join.
//!
//! A tool span whose id matches no call keeps it when no open call of its name is left (the
//! model request may not have arrived, or the tool ran without one); when it is joined, the run
//! carries one warning that says how many were, with an example.

use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap, HashSet};

use serde_json::Value;

use super::fact::{FactKind, SpanFact};

/// The open calls of one tool name in one model request: in response order, and by their
/// arguments (as canonical JSON text: object keys are sorted, so equal values have equal text).
#[derive(Default)]
struct Group {
    open: BTreeSet<usize>,
    by_args: HashMap<String, BTreeSet<usize>>,
}

/// The open calls of one tool name across the run's model requests.
#[derive(Default)]
struct Named {
    /// Requests with an open call of the name.
    open: BTreeSet<usize>,
    /// Those of them that ended before the tool span being joined started.
    ended: BTreeSet<usize>,
}

/// The facts with call ids filled in on id-less tool spans, and warnings for ambiguous joins.
/// O(n log n) in the number of calls and tool spans (plus the size of their arguments).
pub fn join(facts: &[SpanFact]) -> (Cow<'_, [SpanFact]>, Vec<String>) {
    let asked = asked_ids(facts);
    let unjoined = |f: &SpanFact| missing(f) || unmatched(f, &asked);
    if !facts.iter().any(unjoined) {
        return (Cow::Borrowed(facts), Vec::new());
    }
    let mut models: Vec<&SpanFact> = facts
        .iter()
        .filter(|f| f.kind == FactKind::ModelRequest && f.error.is_none())
        .collect();
    models.sort_by_key(|f| (f.start_ns, f.span_id.as_str()));
    let claimed: HashSet<&str> = facts
        .iter()
        .filter(|f| f.kind == FactKind::ToolCall)
        .filter_map(|f| f.tool_call_id.as_deref())
        .filter(|id| asked.contains(id))
        .collect();
    // Every call not already claimed by a tool span with an id: its id, and where it is open.
    let mut slot_ids: Vec<&str> = Vec::new();
    let mut slot_args: Vec<Option<String>> = Vec::new();
    let mut groups: HashMap<(&str, usize), Group> = HashMap::new();
    let mut named: HashMap<&str, Named> = HashMap::new();
    let mut names_of: Vec<Vec<&str>> = vec![Vec::new(); models.len()];
    for (m, model) in models.iter().enumerate() {
        for call in &model.requested_calls {
            if call.id.is_empty() || claimed.contains(call.id.as_str()) {
                continue;
            }
            let k = slot_ids.len();
            let args = call.arguments.as_ref().map(|a| normalise(a).to_string());
            let group = groups.entry((call.name.as_str(), m)).or_default();
            if group.open.is_empty() {
                names_of[m].push(call.name.as_str());
            }
            group.open.insert(k);
            if let Some(args) = &args {
                group.by_args.entry(args.clone()).or_default().insert(k);
            }
            named.entry(call.name.as_str()).or_default().open.insert(m);
            slot_ids.push(call.id.as_str());
            slot_args.push(args);
        }
    }
    // Requests by end, to move them into `ended` as the tool spans' starts pass them.
    let mut by_end: Vec<usize> = (0..models.len()).collect();
    by_end.sort_by_key(|&m| models[m].end_ns);
    let mut ended_upto = 0;

    let mut order: Vec<usize> = (0..facts.len()).filter(|&i| unjoined(&facts[i])).collect();
    order.sort_by_key(|&i| (facts[i].start_ns, facts[i].span_id.as_str()));
    let mut out = facts.to_vec();
    let mut warnings = Vec::new();
    // Tool spans whose own id matched no call and that were joined: how many, and the first.
    let mut rejoined: Option<(usize, String)> = None;
    for i in order {
        let tool = &facts[i];
        let name = tool.tool_name.as_deref().unwrap_or("");
        let own_id = tool.tool_call_id.as_deref().filter(|id| !id.is_empty());
        while let Some(&m) = by_end.get(ended_upto) {
            if models[m].end_ns > tool.start_ns {
                break;
            }
            ended_upto += 1;
            for n in &names_of[m] {
                if let Some(calls) = named.get_mut(n) {
                    if calls.open.contains(&m) {
                        calls.ended.insert(m);
                    }
                }
            }
        }
        // The latest request that ended before the tool started and has an open call of it,
        // else the earliest with one.
        let model = named
            .get(name)
            .and_then(|calls| calls.ended.last().or(calls.open.first()).copied());
        let Some(model) = model else {
            // A tool span with an id of its own keeps it: its call may be one no request shows.
            if own_id.is_none() {
                warnings.push(format!(
                    "tool span {} ({name}) matches no tool call the model asked for",
                    tool.span_id
                ));
            }
            continue;
        };
        let Some(group) = groups.get_mut(&(name, model)) else {
            continue;
        };
        let args = tool.arguments.as_ref().map(|a| normalise(a).to_string());
        let equal = args
            .as_ref()
            .and_then(|a| group.by_args.get(a))
            .filter(|equal| !equal.is_empty());
        let pick = match (equal, group.open.first()) {
            (Some(equal), _) => {
                let Some(&first) = equal.first() else {
                    continue;
                };
                if equal.len() > 1 {
                    warnings.push(format!(
                        "tool span {} ({name}) joined to call {} by order: {} calls have the same name and arguments",
                        tool.span_id,
                        slot_ids[first],
                        equal.len()
                    ));
                }
                first
            }
            (None, Some(&only)) if args.is_none() && group.open.len() == 1 => only,
            (None, Some(&first)) => {
                warnings.push(format!(
                    "tool span {} ({name}) joined to call {} by name and order: no call has its arguments",
                    tool.span_id, slot_ids[first]
                ));
                first
            }
            (None, None) => continue,
        };
        group.open.remove(&pick);
        if let Some(a) = &slot_args[pick] {
            if let Some(equal) = group.by_args.get_mut(a) {
                equal.remove(&pick);
            }
        }
        if group.open.is_empty() {
            if let Some(calls) = named.get_mut(name) {
                calls.open.remove(&model);
                calls.ended.remove(&model);
            }
        }
        if let Some(own) = own_id {
            let example = || {
                format!(
                    "tool span {} ({name}) with id {own} to call {}",
                    tool.span_id, slot_ids[pick]
                )
            };
            match &mut rejoined {
                Some((count, _)) => *count += 1,
                None => rejoined = Some((1, example())),
            }
        }
        out[i].tool_call_id = Some(slot_ids[pick].to_string());
    }
    if let Some((count, example)) = rejoined {
        warnings.push(format!(
            "{count} tool span(s) carry a call id that matches no tool call the model asked for; \
             joined by name, arguments and order (e.g. {example})"
        ));
    }
    (Cow::Owned(out), warnings)
}

/// Whether the run's facts have a tool span the join may change: one without a call id, or
/// with one that matches no call the model asked for. Such runs are derived in full.
pub fn needs_join(facts: &[SpanFact]) -> bool {
    if facts.iter().any(missing) {
        return true;
    }
    let asked = asked_ids(facts);
    facts.iter().any(|f| unmatched(f, &asked))
}

/// The call ids of every tool call the run's model requests asked for.
fn asked_ids(facts: &[SpanFact]) -> HashSet<&str> {
    facts
        .iter()
        .filter(|f| f.kind == FactKind::ModelRequest)
        .flat_map(|f| f.requested_calls.iter())
        .map(|c| c.id.as_str())
        .filter(|id| !id.is_empty())
        .collect()
}

/// A tool span with a call id that no model request of the run asked for.
fn unmatched(f: &SpanFact, asked: &HashSet<&str>) -> bool {
    f.kind == FactKind::ToolCall
        && f.tool_call_id
            .as_deref()
            .is_some_and(|id| !id.is_empty() && !asked.contains(id))
}

/// A tool span that carries no call id: it is joined to a call by [`join`].
pub fn missing(f: &SpanFact) -> bool {
    f.kind == FactKind::ToolCall && f.tool_call_id.as_deref().is_none_or(str::is_empty)
}

/// Arguments as JSON: a string holding JSON is parsed, so re-serialised text compares equal.
fn normalise(value: &Value) -> Value {
    match value {
        Value::String(s) => serde_json::from_str(s).unwrap_or_else(|_| value.clone()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interpreter::fact::RequestedCall;
    use serde_json::json;

    fn model(span: &str, start: u64, calls: &[(&str, &str, Value)]) -> SpanFact {
        let mut f = SpanFact::new(FactKind::ModelRequest, "t".into(), span.into(), "m".into());
        f.start_ns = start;
        f.end_ns = start + 10;
        f.requested_calls = calls
            .iter()
            .map(|(id, name, args)| RequestedCall {
                id: id.to_string(),
                name: name.to_string(),
                arguments: Some(args.clone()),
            })
            .collect();
        f
    }

    fn tool(span: &str, start: u64, name: &str, args: Value) -> SpanFact {
        let mut f = SpanFact::new(FactKind::ToolCall, "t".into(), span.into(), name.into());
        f.start_ns = start;
        f.end_ns = start + 5;
        f.tool_name = Some(name.into());
        f.arguments = Some(args);
        f
    }

    fn ids(facts: &[SpanFact]) -> Vec<Option<String>> {
        facts
            .iter()
            .filter(|f| f.kind == FactKind::ToolCall)
            .map(|f| f.tool_call_id.clone())
            .collect()
    }

    #[test]
    fn joins_by_arguments_then_order_and_warns_when_ambiguous() {
        let facts = vec![
            model(
                "m1",
                100,
                &[
                    ("c1", "add", json!("{\"a\":1}")),
                    ("c2", "add", json!("{\"a\":2}")),
                    ("c3", "add", json!("{\"a\":2}")),
                ],
            ),
            // Parallel: started in the opposite order of the calls.
            tool("t3", 120, "add", json!({"a": 2})),
            tool("t1", 121, "add", json!({"a": 1})),
            tool("t2", 122, "add", json!({"a": 2})),
        ];
        let (joined, warnings) = join(&facts);
        assert_eq!(
            ids(&joined),
            vec![Some("c2".into()), Some("c1".into()), Some("c3".into())]
        );
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("by order"));
    }

    #[test]
    fn later_requests_claim_later_tools_and_arrival_order_is_irrelevant() {
        let facts = vec![
            model("m1", 100, &[("c1", "add", json!({"a": 1}))]),
            tool("t1", 120, "add", json!({"a": 1})),
            model("m2", 200, &[("c2", "add", json!({"a": 1}))]),
            tool("t2", 220, "add", json!({"a": 1})),
        ];
        let (a, wa) = join(&facts);
        let mut reversed = facts.clone();
        reversed.reverse();
        let (b, wb) = join(&reversed);
        assert_eq!(ids(&a), vec![Some("c1".into()), Some("c2".into())]);
        assert_eq!(ids(&b), vec![Some("c2".into()), Some("c1".into())]);
        assert!(wa.is_empty() && wb.is_empty());
    }

    #[test]
    fn the_run_carries_the_warning_and_both_calls_settle() {
        let facts = vec![
            model(
                "m1",
                100,
                &[
                    ("c1", "add", json!({"a": 1})),
                    ("c2", "add", json!({"a": 1})),
                ],
            ),
            tool("t1", 120, "add", json!({"a": 1})),
            tool("t2", 121, "add", json!({"a": 1})),
        ];
        let d = crate::interpreter::derive("r", &facts, &Default::default());
        // Only the first pick is a guess: the second is the one call left.
        assert_eq!(d.run.warnings.len(), 1, "{:?}", d.run.warnings);
        let settled: Vec<(&str, Option<&str>)> = d
            .effects
            .iter()
            .map(|e| (e.tool_call_id.as_str(), e.span_id.as_deref()))
            .collect();
        assert_eq!(settled, vec![("c1", Some("t1")), ("c2", Some("t2"))]);
    }

    /// Joins a small and a 64 times larger set of tool spans (best of seven, alternately):
    /// the last span gets the last call, with `warnings` warnings, and the time per tool span
    /// grows less than 16 times (a scan of the open calls per span would make it 64).
    fn assert_joins_in_n_log_n(
        small_facts: Vec<SpanFact>,
        large_facts: Vec<SpanFact>,
        warnings: usize,
    ) {
        let per_tool = |facts: &[SpanFact]| {
            let n = facts.len() - 1;
            let start = std::time::Instant::now();
            let (joined, warned) = join(facts);
            let elapsed = start.elapsed().as_secs_f64();
            assert_eq!(warned.len(), warnings);
            let last = format!("c{}", n - 1);
            assert_eq!(joined[1].tool_call_id.as_deref(), Some(last.as_str()));
            elapsed / n as f64
        };
        let (mut small, mut large) = (f64::MAX, f64::MAX);
        for _ in 0..7 {
            small = small.min(per_tool(&small_facts));
            large = large.min(per_tool(&large_facts));
        }
        assert!(
            large < small * 16.0,
            "{small} s/tool at {}, {large} s/tool at {}",
            small_facts.len() - 1,
            large_facts.len() - 1
        );
    }

    #[test]
    fn many_parallel_calls_join_in_n_log_n() {
        // Time per tool span at n and at 64n parallel calls of one name (best of seven, taken
        // alternately): about the same; a scan of the open calls per tool span would make it 64
        // times more (16 allowed, for noise and caches).
        let facts = |n: usize| {
            let ids: Vec<String> = (0..n).map(|i| format!("c{i}")).collect();
            let calls: Vec<(&str, &str, Value)> = ids
                .iter()
                .enumerate()
                .map(|(i, id)| (id.as_str(), "f", json!({ "i": i })))
                .collect();
            let mut facts = vec![model("m1", 100, &calls)];
            facts.extend(
                (0..n)
                    .rev()
                    .map(|i| tool(&format!("t{i:08}"), 200 + i as u64, "f", json!({ "i": i }))),
            );
            facts
        };
        assert_joins_in_n_log_n(facts(250), facts(16_000), 0);
    }

    fn with_id(mut f: SpanFact, id: &str) -> SpanFact {
        f.tool_call_id = Some(id.into());
        f
    }

    #[test]
    fn ids_that_match_no_call_are_joined_by_name_and_arguments_with_one_warning() {
        // Google ADK: the spans run under invented ids, the messages call them `name_index`;
        // the same tool twice with different arguments, started in the opposite order.
        let facts = vec![
            model(
                "m1",
                100,
                &[
                    ("get_weather_0", "get_weather", json!({"city": "Paris"})),
                    ("get_weather_1", "get_weather", json!({"city": "Rome"})),
                    ("add_2", "add", json!({"a": 2, "b": 3})),
                ],
            ),
            with_id(
                tool("t1", 120, "get_weather", json!("{\"city\": \"Rome\"}")),
                "adk-1",
            ),
            with_id(
                tool("t2", 121, "get_weather", json!({"city": "Paris"})),
                "adk-2",
            ),
            with_id(tool("t3", 122, "add", json!({"b": 3, "a": 2})), "adk-3"),
        ];
        assert!(needs_join(&facts));
        let (joined, warnings) = join(&facts);
        assert_eq!(
            ids(&joined),
            vec![
                Some("get_weather_1".into()),
                Some("get_weather_0".into()),
                Some("add_2".into())
            ]
        );
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].starts_with("3 tool span(s)"), "{warnings:?}");
        assert!(warnings[0].contains("adk-1"), "{warnings:?}");
        // The same facts in any order give the same join.
        let mut reversed = facts.clone();
        reversed.reverse();
        let (b, _) = join(&reversed);
        let mut a: Vec<_> = ids(&joined);
        let mut b: Vec<_> = ids(&b);
        a.sort();
        b.sort();
        assert_eq!(a, b);
    }

    #[test]
    fn a_missing_and_a_mismatched_id_share_the_calls_and_matched_ones_are_kept() {
        let facts = vec![
            model(
                "m1",
                100,
                &[
                    ("c1", "f", json!({"i": 1})),
                    ("c2", "f", json!({"i": 2})),
                    ("c3", "f", json!({"i": 3})),
                ],
            ),
            with_id(tool("t1", 120, "f", json!({"i": 2})), "c2"),
            tool("t2", 121, "f", json!({"i": 3})),
            with_id(tool("t3", 122, "f", json!({"i": 1})), "zzz"),
        ];
        let (joined, warnings) = join(&facts);
        assert_eq!(
            ids(&joined),
            vec![Some("c2".into()), Some("c3".into()), Some("c1".into())]
        );
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        let d = crate::interpreter::derive("r", &facts, &Default::default());
        assert!(d.state.is_none(), "a joined run is not appendable");
        assert_eq!(d.effects.len(), 3);
    }

    #[test]
    fn an_id_with_no_call_of_its_name_is_kept_without_a_warning() {
        // The model request may not have arrived yet: nothing to join to, nothing to say.
        let facts = vec![
            model("m1", 100, &[("c1", "other", json!({}))]),
            with_id(tool("t1", 120, "f", json!({})), "own"),
        ];
        let (joined, warnings) = join(&facts);
        assert_eq!(ids(&joined), vec![Some("own".into())]);
        assert!(warnings.is_empty(), "{warnings:?}");
        // Matching ids need no join at all.
        let matching = vec![
            model("m1", 100, &[("c1", "f", json!({}))]),
            with_id(tool("t1", 120, "f", json!({})), "c1"),
        ];
        assert!(!needs_join(&matching));
    }

    #[test]
    fn many_mismatched_ids_over_many_names_join_in_n_log_n() {
        // n calls over n/4 names in one request, n tool spans with ids of their own, started in
        // reverse; per-span time at n and 64n stays about the same (16x allowed for noise).
        let facts = |n: usize| {
            let calls: Vec<(String, String, Value)> = (0..n)
                .map(|i| {
                    (
                        format!("c{i}"),
                        format!("f{}", i % (n / 4)),
                        json!({ "i": i }),
                    )
                })
                .collect();
            let refs: Vec<(&str, &str, Value)> = calls
                .iter()
                .map(|(id, name, a)| (id.as_str(), name.as_str(), a.clone()))
                .collect();
            let mut facts = vec![model("m1", 100, &refs)];
            facts.extend((0..n).rev().map(|i| {
                let t = tool(
                    &format!("t{i:08}"),
                    200 + (n - i) as u64,
                    &format!("f{}", i % (n / 4)),
                    json!({ "i": i }),
                );
                with_id(t, &format!("adk-{i}"))
            }));
            facts
        };
        assert_joins_in_n_log_n(facts(256), facts(16_384), 1);
    }

    #[test]
    fn tools_with_ids_are_left_alone() {
        let mut t = tool("t1", 120, "add", json!({}));
        t.tool_call_id = Some("x".into());
        let facts = vec![model("m1", 100, &[("x", "add", json!({}))]), t];
        assert!(matches!(join(&facts).0, Cow::Borrowed(_)));
    }
}
