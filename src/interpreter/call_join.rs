//! Joining tool spans that carry no tool-call id (OpenInference TOOL spans, OpenLLMetry `tool`
//! spans) to the calls the model asked for: by name, then arguments, then order.
//!
//! A tool span is matched among the unclaimed calls of the latest model request that ended
//! before it started (any earlier request when that one has none). Among calls of that name, one
//! with equal arguments (compared as JSON, since tool spans re-serialise them) wins; when several
//! are equal, or none is, the first in response order is taken and a warning says the join was
//! by order. Tool spans are taken in start order, so parallel calls pair up in the order the
//! model listed them. A pure function of the facts: arrival order cannot change the join.

use std::borrow::Cow;

use serde_json::Value;

use super::fact::{FactKind, SpanFact};

/// The facts with call ids filled in on id-less tool spans, and warnings for ambiguous joins.
pub fn join(facts: &[SpanFact]) -> (Cow<'_, [SpanFact]>, Vec<String>) {
    if !facts.iter().any(missing) {
        return (Cow::Borrowed(facts), Vec::new());
    }
    let mut models: Vec<&SpanFact> = facts
        .iter()
        .filter(|f| f.kind == FactKind::ModelRequest && f.error.is_none())
        .collect();
    models.sort_by_key(|f| (f.start_ns, f.span_id.as_str()));
    let claimed: Vec<&str> = facts
        .iter()
        .filter(|f| f.kind == FactKind::ToolCall)
        .filter_map(|f| f.tool_call_id.as_deref())
        .filter(|id| !id.is_empty())
        .collect();
    // (model index, call) for every call not already claimed by a tool span with an id.
    let mut slots: Vec<(usize, &str, &str, Option<Value>, bool)> = Vec::new();
    for (m, model) in models.iter().enumerate() {
        for call in &model.requested_calls {
            if call.id.is_empty() || claimed.contains(&call.id.as_str()) {
                continue;
            }
            let args = call.arguments.as_ref().map(normalise);
            slots.push((m, call.id.as_str(), call.name.as_str(), args, false));
        }
    }

    let mut order: Vec<usize> = (0..facts.len()).filter(|&i| missing(&facts[i])).collect();
    order.sort_by_key(|&i| (facts[i].start_ns, facts[i].span_id.as_str()));
    let mut out = facts.to_vec();
    let mut warnings = Vec::new();
    for i in order {
        let tool = &facts[i];
        let name = tool.tool_name.as_deref().unwrap_or("");
        let open = |s: &(usize, &str, &str, Option<Value>, bool)| !s.4 && s.2 == name;
        // The latest request that ended before the tool started and has an open call of it.
        let model = slots
            .iter()
            .filter(|s| open(s) && models[s.0].end_ns <= tool.start_ns)
            .map(|s| s.0)
            .max()
            .or_else(|| slots.iter().filter(|s| open(s)).map(|s| s.0).min());
        let Some(model) = model else {
            warnings.push(format!(
                "tool span {} ({name}) matches no tool call the model asked for",
                tool.span_id
            ));
            continue;
        };
        let candidates: Vec<usize> = (0..slots.len())
            .filter(|&k| open(&slots[k]) && slots[k].0 == model)
            .collect();
        let args = tool.arguments.as_ref().map(normalise);
        let equal: Vec<usize> = candidates
            .iter()
            .copied()
            .filter(|&k| args.is_some() && slots[k].3 == args)
            .collect();
        let pick = match (equal.as_slice(), candidates.as_slice()) {
            ([only], _) => *only,
            ([first, ..], _) => {
                warnings.push(format!(
                    "tool span {} ({name}) joined to call {} by order: {} calls have the same name and arguments",
                    tool.span_id,
                    slots[*first].1,
                    equal.len()
                ));
                *first
            }
            ([], [only]) if args.is_none() => *only,
            ([], [first, ..]) => {
                warnings.push(format!(
                    "tool span {} ({name}) joined to call {} by name and order: no call has its arguments",
                    tool.span_id, slots[*first].1
                ));
                *first
            }
            ([], []) => continue,
        };
        slots[pick].4 = true;
        out[i].tool_call_id = Some(slots[pick].1.to_string());
    }
    (Cow::Owned(out), warnings)
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

    #[test]
    fn tools_with_ids_are_left_alone() {
        let mut t = tool("t1", 120, "add", json!({}));
        t.tool_call_id = Some("x".into());
        let facts = vec![model("m1", 100, &[("x", "add", json!({}))]), t];
        assert!(matches!(join(&facts).0, Cow::Borrowed(_)));
    }
}
