//! LangChain / LangGraph spans recorded from the real packages (fixtures/langgraph_*.json, made
//! by `tests/python/langgraph_scenario.py --record`; the package versions are in each file),
//! interpreted and derived: the same two-turn `create_agent` run through each of the three routes.

use std::collections::BTreeMap;

use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, ArrayValue, KeyValue};
use opentelemetry_proto::tonic::trace::v1::{Span, Status};
use serde_json::json;

use super::*;
use crate::domain::{EffectStatus, EventKind, RunStatus};
use crate::interpreter::{derive, interpret_span, Interpreted, RunMeta};

/// The recorded spans of one route (`openinference`, `openllmetry`, `langsmith`) as OTLP spans.
pub(crate) fn fixture_spans(route: &str) -> Vec<Span> {
    let text = match route {
        "openinference" => include_str!("fixtures/langgraph_openinference.json"),
        "openllmetry" => include_str!("fixtures/langgraph_openllmetry.json"),
        "langsmith" => include_str!("fixtures/langgraph_langsmith.json"),
        _ => panic!("no fixture for {route}"),
    };
    let doc: Value = serde_json::from_str(text).unwrap();
    assert_eq!(doc["packages"]["langgraph"], "1.2.22");
    doc["spans"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let id = |key: &str| hex::decode(s[key].as_str().unwrap_or("")).unwrap();
            Span {
                trace_id: id("trace_id"),
                span_id: id("span_id"),
                parent_span_id: id("parent_span_id"),
                name: s["name"].as_str().unwrap().into(),
                kind: s["kind"].as_i64().unwrap() as i32 + 1,
                start_time_unix_nano: s["start_ns"].as_u64().unwrap(),
                end_time_unix_nano: s["end_ns"].as_u64().unwrap(),
                attributes: s["attributes"]
                    .as_object()
                    .unwrap()
                    .iter()
                    .map(|(k, v)| KeyValue {
                        key: k.clone(),
                        value: Some(any(v)),
                        key_strindex: 0,
                    })
                    .collect(),
                status: Some(Status {
                    code: s["status"]["code"].as_i64().unwrap() as i32,
                    message: s["status"]["message"].as_str().unwrap_or("").into(),
                }),
                ..Default::default()
            }
        })
        .collect()
}

fn any(v: &Value) -> AnyValue {
    use any_value::Value as V;
    let value = match v {
        Value::String(s) => V::StringValue(s.clone()),
        Value::Bool(b) => V::BoolValue(*b),
        Value::Number(n) if n.is_i64() => V::IntValue(n.as_i64().unwrap()),
        Value::Number(n) => V::DoubleValue(n.as_f64().unwrap()),
        Value::Array(items) => V::ArrayValue(ArrayValue {
            values: items.iter().map(any).collect(),
        }),
        other => V::StringValue(other.to_string()),
    };
    AnyValue { value: Some(value) }
}

/// The facts of every run, by run id: each span keyed to its run, through the grouping spans
/// above it (as the writer resolves them).
fn runs_of(spans: &[Span]) -> BTreeMap<String, Vec<SpanFact>> {
    let interpreted: Vec<Interpreted> = spans.iter().filter_map(interpret_span).collect();
    let groups: BTreeMap<(String, String), String> = interpreted
        .iter()
        .filter(|i| i.fact.kind == FactKind::Group)
        .map(|i| {
            let key = (i.fact.trace_id.clone(), i.fact.span_id.clone());
            (key, i.run_span_id.clone())
        })
        .collect();
    let mut runs: BTreeMap<String, Vec<SpanFact>> = BTreeMap::new();
    for i in interpreted {
        let trace = i.fact.trace_id.clone();
        let mut key = i.run_span_id.clone();
        while let Some(up) = groups.get(&(trace.clone(), key.clone())) {
            if *up == key {
                break;
            }
            key = up.clone();
        }
        runs.entry(format!("{trace}-{key}"))
            .or_default()
            .push(i.fact);
    }
    runs
}

/// The two-turn scenario, derived: two runs of `weather_agent` on thread `thread-1`, every tool
/// call in the ledger with its id, arguments and result, the failing one `failed`.
fn check_route(route: &str) {
    let spans = fixture_spans(route);
    let runs = runs_of(&spans);
    let mut derived: Vec<_> = runs
        .iter()
        .filter(|(_, facts)| facts.iter().any(|f| f.kind != FactKind::Group))
        .map(|(id, facts)| derive(id, facts, &RunMeta::default()))
        .collect();
    derived.sort_by_key(|d| d.run.started_ns);
    assert_eq!(derived.len(), 2, "{route}: one run per invocation");
    let expected = [
        vec![
            (
                "call_w1",
                "get_weather",
                json!({"city": "Paris"}),
                Some(json!("sunny in Paris")),
            ),
            ("call_a1", "add", json!({"a": 2, "b": 3}), Some(json!("5"))),
            (
                "call_b1",
                "book_table",
                json!({"restaurant": "Chez Nous", "people": 4}),
                None,
            ),
        ],
        vec![(
            "call_w2",
            "get_weather",
            json!({"city": "Rome"}),
            Some(json!("sunny in Rome")),
        )],
    ];
    for ((d, expected), requests) in derived.iter().zip(expected).zip([3, 2]) {
        let run = &d.run;
        assert_eq!(run.agent_name.as_deref(), Some("weather_agent"), "{route}");
        assert_eq!(run.conversation_id.as_deref(), Some("thread-1"), "{route}");
        assert_eq!(run.status, RunStatus::Completed, "{route}");
        assert!(run.warnings.is_empty(), "{route}: {:?}", run.warnings);
        assert_eq!(run.model_request_count, requests, "{route}");
        assert!(run.continuation_unavailable.is_none(), "{route}");
        assert_eq!(d.effects.len(), expected.len(), "{route}");
        for (effect, (id, name, args, result)) in d.effects.iter().zip(&expected) {
            assert_eq!(effect.tool_call_id, *id, "{route}");
            assert_eq!(effect.tool_name, *name, "{route}");
            assert_eq!(effect.arguments.as_ref(), Some(args), "{route} {id}");
            assert_eq!(effect.result, *result, "{route} {id}");
            if *name == "book_table" {
                assert_eq!(effect.status, EffectStatus::Failed, "{route}");
                assert_eq!(effect.error.as_deref(), Some("no table for 4 at Chez Nous"));
            } else {
                assert_eq!(effect.status, EffectStatus::Completed, "{route} {id}");
            }
        }
        // Events in order: the run starts, each request is followed by the calls it asked for.
        let kinds: Vec<EventKind> = d.events.iter().map(|e| e.kind).collect();
        assert_eq!(kinds.first(), Some(&EventKind::RunStarted), "{route}");
        assert_eq!(kinds.last(), Some(&EventKind::RunCompleted), "{route}");
        assert!(d.events.windows(2).all(|w| w[0].time_ns <= w[1].time_ns));
        let requested: Vec<&str> = d
            .events
            .iter()
            .filter(|e| e.kind == EventKind::ToolCallRequested)
            .filter_map(|e| e.tool_call_id.as_deref())
            .collect();
        let ids: Vec<&str> = expected.iter().map(|e| e.0).collect();
        assert_eq!(requested, ids, "{route}");
        assert!(!d.snapshots.is_empty(), "{route}");
    }
}

#[test]
fn openinference_langgraph_fixture_gives_two_runs_with_their_ledgers() {
    check_route("openinference");
}

#[test]
fn openllmetry_langgraph_fixture_gives_two_runs_with_their_ledgers() {
    check_route("openllmetry");
}

#[test]
fn langsmith_langgraph_fixture_gives_two_runs_with_their_ledgers() {
    check_route("langsmith");
}

#[test]
fn openinference_model_calls_read_the_flattened_history_not_the_lc_batches() {
    let spans = fixture_spans("openinference");
    let llm = spans
        .iter()
        .filter(|s| {
            s.attributes
                .iter()
                .any(|kv| kv.key == "openinference.span.kind" && format!("{kv:?}").contains("LLM"))
        })
        .max_by_key(|s| s.start_time_unix_nano)
        .unwrap();
    let i = interpret_span(llm).unwrap();
    // system prompt out; human, ai(2 calls), tools(2, merged), ai, tool, ai, human, ai, tool.
    assert_eq!(
        i.fact.system_instructions.as_ref().unwrap()[0]["content"],
        "You are a weather and booking assistant."
    );
    assert_eq!(i.fact.input.as_ref().unwrap().len(), 9);
    assert!(i.fact.content_problem.is_none());
}

#[test]
fn lc_messages_in_every_serialised_form_read_as_chat_messages() {
    let constructor = json!({"lc": 1, "type": "constructor",
        "id": ["langchain", "schema", "messages", "AIMessage"],
        "kwargs": {"content": "", "tool_calls": [{"name": "f", "args": {"x": 1}, "id": "c1"}]}});
    let m = chat_message(&constructor).unwrap();
    assert_eq!(m["role"], "assistant");
    assert_eq!(m["tool_calls"][0]["function"]["arguments"]["x"], 1);
    let dict =
        json!({"type": "tool", "data": {"content": "ok", "tool_call_id": "c1", "type": "tool"}});
    let m = chat_message(&dict).unwrap();
    assert_eq!(
        (m["role"].as_str(), m["tool_call_id"].as_str()),
        (Some("tool"), Some("c1"))
    );
    let dumped = json!({"type": "human", "content": [{"type": "text", "text": "hi"}]});
    assert_eq!(chat_message(&dumped).unwrap()["role"], "user");
    let chat = json!({"role": "user", "content": "hi"});
    assert_eq!(chat_message(&chat).unwrap(), chat);
    assert!(chat_message(&json!({"lc": 1, "id": ["x", "Unknown"], "kwargs": {}})).is_none());
    assert!(chat_message(&json!("text")).is_none());
}

#[test]
fn tool_outputs_of_each_route_give_id_content_and_status() {
    let mut fact = SpanFact::new(FactKind::ToolCall, "t".into(), "s".into(), "f".into());
    // OpenLLMetry's wrapper, failed.
    fact.arguments = Some(json!({"input_str": "{'a': 1}", "inputs": {"a": 1},
        "kwargs": {"tool_call_id": "c9"}}));
    fact.result = Some(json!({"output": {"lc": 1, "type": "constructor",
        "id": ["langchain", "schema", "messages", "ToolMessage"],
        "kwargs": {"content": "boom", "tool_call_id": "c9", "status": "error"}}}));
    unwrap_genai_tool(&mut fact);
    assert_eq!(fact.arguments, Some(json!({"a": 1})));
    assert_eq!(fact.tool_call_id.as_deref(), Some("c9"));
    assert_eq!(
        (fact.error.as_deref(), fact.result.as_ref()),
        (Some("boom"), None)
    );
    // A result that is not a ToolMessage stays as it is; arguments without the wrapper too.
    let mut plain = SpanFact::new(FactKind::ToolCall, "t".into(), "s".into(), "f".into());
    plain.arguments = Some(json!({"inputs": 1}));
    plain.result = Some(json!({"output": "5"}));
    unwrap_genai_tool(&mut plain);
    assert_eq!(plain.arguments, Some(json!({"inputs": 1})));
    assert_eq!(plain.result, Some(json!({"output": "5"})));
    assert!(plain.tool_call_id.is_none() && plain.error.is_none());
}

#[test]
fn which_chain_is_the_run() {
    assert!(chain_is_run(false, "LangGraph", None));
    assert!(chain_is_run(true, "researcher", Some("researcher")));
    assert!(!chain_is_run(true, "model", Some("researcher")));
    assert!(!chain_is_run(true, "tools", None));
}
