//! The interpreter against crafted input (issue 13): no crash on deep or long structure, every
//! record it produces reads back, and its work grows linearly with the counts a sender picks.

use std::collections::BTreeMap;
use std::time::Instant;

use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::common::v1::{AnyValue, ArrayValue, KeyValue, KeyValueList};
use opentelemetry_proto::tonic::logs::v1::LogRecord;
use opentelemetry_proto::tonic::trace::v1::span::Event;
use opentelemetry_proto::tonic::trace::v1::Span;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};

use super::budget::depth;
use super::*;
use crate::limits::Limits;
use crate::test_fixtures::{kv, span};

/// Alternating objects and arrays, `levels` deep, around a string.
fn nested(levels: usize) -> Value {
    let mut v = json!("leaf");
    for i in 0..levels {
        v = if i % 2 == 0 {
            json!({ "k": v })
        } else {
            json!([v])
        };
    }
    v
}

/// The same nesting as an OTLP value (kvlists and arrays).
fn nested_any(levels: usize) -> AnyValue {
    let mut v = AnyValue {
        value: Some(Any::StringValue("leaf".into())),
    };
    for i in 0..levels {
        v = AnyValue {
            value: Some(if i % 2 == 0 {
                Any::KvlistValue(KeyValueList {
                    values: vec![KeyValue {
                        key: "k".into(),
                        value: Some(v),
                        key_strindex: 0,
                    }],
                })
            } else {
                Any::ArrayValue(ArrayValue { values: vec![v] })
            }),
        };
    }
    v
}

fn any_kv(key: &str, value: AnyValue) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(value),
        key_strindex: 0,
    }
}

/// Every span shape that carries sender JSON, in every convention, with values `d` levels
/// deep: tool arguments and results, system instructions, message parts, kvlist attributes,
/// flattened message paths, legacy events.
fn crafted_spans(d: usize) -> Vec<Span> {
    let deep = nested(d);
    let text = deep.to_string();
    let deep_message = json!([{"role": "user", "parts": [{"type": "text", "content": deep}]}]);
    let deep_call = json!([{"role": "assistant", "parts": [
        {"type": "tool_call", "id": "c1", "name": "f", "arguments": deep}]}]);
    let path = vec!["a"; d.max(1)].join(".");
    let mut spans = vec![
        // Pydantic AI / OTel GenAI: run, model request, tool call (run 1).
        span(
            1,
            0,
            "invoke_agent a",
            10,
            vec![
                kv("gen_ai.operation.name", "invoke_agent"),
                kv("gen_ai.system_instructions", &text),
                kv("pydantic_ai.all_messages", &deep_message.to_string()),
            ],
        ),
        span(
            2,
            1,
            "chat m",
            20,
            vec![
                kv("gen_ai.operation.name", "chat"),
                kv("gen_ai.input.messages", &deep_message.to_string()),
                kv("gen_ai.output.messages", &deep_call.to_string()),
                kv("gen_ai.system_instructions", &text),
            ],
        ),
        span(
            3,
            1,
            "execute_tool f",
            40,
            vec![
                kv("gen_ai.operation.name", "execute_tool"),
                kv("gen_ai.tool.call.id", "c1"),
                kv("gen_ai.tool.name", "f"),
                kv("gen_ai.tool.call.arguments", &text),
                any_kv("gen_ai.tool.call.result", nested_any(d)),
            ],
        ),
        // OpenInference: agent, LLM with Responses bodies and flattened messages, tool (run 4).
        span(
            4,
            0,
            "calc",
            10,
            vec![
                kv("openinference.span.kind", "AGENT"),
                kv("agent.name", "calc"),
            ],
        ),
        span(
            5,
            4,
            "response",
            20,
            vec![
                kv("openinference.span.kind", "LLM"),
                kv(
                    "input.value",
                    &json!({"input": [{"role": "user", "content": [deep]}],
                            "instructions": [{"role": "system", "content": [deep]}]})
                    .to_string(),
                ),
                kv(
                    "output.value",
                    &json!({"output": [{"type": "function_call", "call_id": "c2", "name": "f",
                        "arguments": text}]})
                    .to_string(),
                ),
            ],
        ),
        span(
            6,
            4,
            "generation",
            30,
            vec![
                kv("openinference.span.kind", "LLM"),
                kv(&format!("llm.input_messages.0.message.{path}"), "x"),
                any_kv("llm.input_messages.1.message.content", nested_any(d)),
                kv("llm.output_messages.0.message.role", "assistant"),
                kv(
                    "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments",
                    &text,
                ),
            ],
        ),
        span(
            7,
            4,
            "f",
            50,
            vec![
                kv("openinference.span.kind", "TOOL"),
                kv("tool.name", "f"),
                kv("input.value", &text),
                any_kv("output.value", nested_any(d)),
            ],
        ),
        // OpenLLMetry: workflow, legacy flattened model request, tool (run 8).
        span(
            8,
            0,
            "wf",
            10,
            vec![
                kv("traceloop.span.kind", "workflow"),
                kv("traceloop.entity.name", "wf"),
            ],
        ),
        span(
            9,
            8,
            "openai.chat",
            20,
            vec![
                kv("llm.request.type", "chat"),
                kv("gen_ai.prompt.0.role", "system"),
                kv("gen_ai.prompt.0.content", &json!([deep]).to_string()),
                kv("gen_ai.prompt.1.role", "user"),
                kv(&format!("gen_ai.prompt.1.{path}"), "x"),
                kv("gen_ai.completion.0.role", "assistant"),
                kv("gen_ai.completion.0.tool_calls.0.id", "c3"),
                kv("gen_ai.completion.0.tool_calls.0.name", "f"),
                kv("gen_ai.completion.0.tool_calls.0.arguments", &text),
            ],
        ),
        span(
            10,
            8,
            "f.tool",
            40,
            vec![
                kv("traceloop.span.kind", "tool"),
                kv("traceloop.entity.name", "f"),
                kv("traceloop.entity.input", &text),
                any_kv("traceloop.entity.output", nested_any(d)),
            ],
        ),
    ];
    // Legacy GenAI span events (Strands' default mode): model request and tool (run 1).
    let mut legacy = span(
        11,
        1,
        "chat legacy",
        60,
        vec![kv("gen_ai.operation.name", "chat")],
    );
    legacy.events = vec![
        Event {
            name: "gen_ai.user.message".into(),
            attributes: vec![kv("content", &json!([{"text": deep}]).to_string())],
            ..Default::default()
        },
        Event {
            name: "gen_ai.choice".into(),
            attributes: vec![any_kv("message", nested_any(d))],
            ..Default::default()
        },
    ];
    spans.push(legacy);
    let mut details = span(
        12,
        1,
        "chat details",
        70,
        vec![kv("gen_ai.operation.name", "chat")],
    );
    details.events = vec![Event {
        name: "gen_ai.client.inference.operation.details".into(),
        attributes: vec![
            kv("gen_ai.input.messages", &deep_message.to_string()),
            any_kv("gen_ai.system_instructions", nested_any(d)),
        ],
        ..Default::default()
    }];
    spans.push(details);
    spans
}

/// A legacy GenAI event sent as a log record, with a deep body, for span 11.
fn crafted_log(d: usize) -> LogRecord {
    LogRecord {
        trace_id: crate::test_fixtures::TRACE.to_vec(),
        span_id: vec![11; 8],
        time_unix_nano: 65,
        event_name: "gen_ai.assistant.message".into(),
        body: Some(nested_any(d)),
        attributes: vec![kv("content", &nested(d).to_string())],
        ..Default::default()
    }
}

/// `value` serialises, reads back with serde_json (whose read limit is 128 levels), and what
/// was read serialises to the same text (fields kept only in memory are not compared).
fn reads_back<T: Serialize + DeserializeOwned>(what: &str, value: &T) {
    let text = serde_json::to_string(value).unwrap_or_else(|e| panic!("{what}: {e}"));
    let back: T = serde_json::from_str(&text).unwrap_or_else(|e| {
        let start: String = text.chars().take(200).collect();
        panic!("{what} does not read back ({e}): {start}")
    });
    let again = serde_json::to_string(&back).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(again == text, "{what} reads back different");
}

/// Interprets the crafted spans and log at depth `d` and checks every record the interpreter
/// and the derivation produce reads back and keeps the depth budget.
fn check_depth(d: usize) {
    let limits = Limits::default();
    let max = limits.max_nesting_depth;
    let mut by_run: BTreeMap<String, Vec<SpanFact>> = BTreeMap::new();
    for s in crafted_spans(d) {
        let i = interpret_span_within(&s, &limits)
            .unwrap_or_else(|e| panic!("span {} at depth {d}: {e}", s.name));
        let fact = &i.fact;
        reads_back("span fact", fact);
        reads_back("stored fact", &StoredFact::of(fact));
        for value in [&fact.arguments, &fact.result, &fact.system_instructions]
            .into_iter()
            .flatten()
            .chain(
                fact.requested_calls
                    .iter()
                    .filter_map(|c| c.arguments.as_ref()),
            )
        {
            assert!(depth(value) <= max, "span {} at depth {d}", s.name);
        }
        for (hash, body) in i.bodies() {
            assert!(
                depth(body) <= max,
                "message of span {} at depth {d}",
                s.name
            );
            assert_eq!(*hash, crate::domain::MessageHash::of(body));
            reads_back("message body", body);
        }
        if d > max + 4 && matches!(fact.kind, FactKind::ToolCall) {
            assert!(!fact.warnings.is_empty(), "span {} at depth {d}", s.name);
        }
        by_run
            .entry(crate::ingest::run_id_of(&i))
            .or_default()
            .push(i.fact);
    }
    let event = interpret_log(&crafted_log(d), &limits).expect("a legacy event");
    reads_back("log event", &event);
    let facts = by_run.values_mut().next().expect("run 1");
    let logged = facts
        .iter()
        .position(|f| f.span_id == hex::encode([11u8; 8]))
        .expect("the legacy span");
    let (fact, bodies) = with_log_content(&facts[logged], std::slice::from_ref(&event));
    for (_, body) in &bodies {
        assert!(depth(body) <= max);
        reads_back("message body from logs", body);
    }
    facts[logged] = fact;
    for (run_id, facts) in &by_run {
        for meta in [
            RunMeta::default(),
            RunMeta {
                abandoned: Some(Abandonment {
                    at_ns: 100,
                    reason: "test".into(),
                }),
                ..RunMeta::default()
            },
        ] {
            reads_back("run meta", &meta);
            let mut running = facts.clone();
            running.retain(|f| f.kind != FactKind::AgentRun);
            for facts in [facts, &running] {
                let derived = derive(run_id, facts, &meta);
                reads_back("run", &derived.run);
                for e in &derived.events {
                    reads_back("event", e);
                }
                for e in &derived.effects {
                    reads_back("effect", e);
                }
                for s in &derived.snapshots {
                    reads_back("snapshot", s);
                }
                for m in &derived.new_messages {
                    reads_back("derived message", m);
                }
                if let Some(state) = &derived.state {
                    reads_back("run state", state);
                }
            }
        }
    }
}

#[test]
fn every_record_reads_back_at_every_depth() {
    for d in [
        0, 1, 2, 10, 60, 63, 64, 65, 66, 100, 120, 126, 127, 128, 129, 200, 1_000,
    ] {
        check_depth(d);
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]
    #[test]
    fn records_read_back_for_any_depth(d in 0usize..300) {
        check_depth(d);
    }
}

#[test]
fn a_deep_value_is_cut_and_noted_on_the_run() {
    let text = nested(127).to_string();
    let tool = span(
        3,
        1,
        "execute_tool f",
        40,
        vec![
            kv("gen_ai.operation.name", "execute_tool"),
            kv("gen_ai.tool.call.id", "c1"),
            kv("gen_ai.tool.name", "f"),
            kv("gen_ai.tool.call.arguments", &text),
            kv("gen_ai.tool.call.result", &text),
        ],
    );
    let i = interpret_span_within(&tool, &Limits::default()).unwrap();
    let args = i.fact.arguments.as_ref().unwrap();
    assert_eq!(depth(args), 64);
    assert!(i.fact.warnings.iter().any(|w| w.contains("tool arguments")));
    assert!(i.fact.warnings.iter().any(|w| w.contains("tool result")));
    let d = derive("r", std::slice::from_ref(&i.fact), &RunMeta::default());
    assert!(d.run.warnings.iter().any(|w| w.contains("nested deeper")));
}

#[test]
fn spans_over_a_cap_say_which() {
    let limits = Limits::default();
    let over = |s: &Span| match interpret_span_within(s, &limits) {
        Err(NotInterpreted::OverLimit(o)) => o,
        other => panic!("{other:?}"),
    };
    let mut event_attrs = span(
        2,
        1,
        "chat m",
        10,
        vec![kv("gen_ai.operation.name", "chat")],
    );
    event_attrs.events = vec![Event {
        name: "gen_ai.client.inference.operation.details".into(),
        attributes: (0..150_000).map(|i| kv(&format!("k{i}"), "v")).collect(),
        ..Default::default()
    }];
    assert!(matches!(
        over(&event_attrs),
        OverLimit::Attributes {
            place: "span event",
            count: 150_000,
            ..
        }
    ));
    let key = format!("gen_ai.prompt.0.{}", vec!["a"; 10_000].join("."));
    let long_key = span(2, 1, "openai.chat", 10, vec![kv(&key, "x")]);
    assert!(matches!(over(&long_key), OverLimit::KeyBytes { .. }));
    let mut events = span(
        2,
        1,
        "chat m",
        10,
        vec![kv("gen_ai.operation.name", "chat")],
    );
    events.events = vec![Event::default(); limits.max_events_per_span + 1];
    assert!(matches!(over(&events), OverLimit::Events { .. }));
    let calls = tool_call_span(limits.max_tool_calls_per_response + 1);
    assert!(matches!(over(&calls), OverLimit::ToolCalls { .. }));
    let plain = span(2, 1, "GET /", 10, vec![kv("http.method", "GET")]);
    assert_eq!(
        interpret_span_within(&plain, &limits).unwrap_err(),
        NotInterpreted::NotAgentSpan
    );
    // Within the caps, the same shapes are interpreted.
    assert!(
        interpret_span_within(&tool_call_span(limits.max_tool_calls_per_response), &limits).is_ok()
    );
}

/// A model request whose response asks for `n` tool calls.
fn tool_call_span(n: usize) -> Span {
    let parts: Vec<Value> = (0..n)
        .map(|i| json!({"type": "tool_call", "id": format!("c{i}"), "name": "f", "arguments": {"i": i}}))
        .collect();
    span(
        2,
        1,
        "chat m",
        10,
        vec![
            kv("gen_ai.operation.name", "chat"),
            kv(
                "gen_ai.input.messages",
                r#"[{"role":"user","parts":[{"type":"text","content":"go"}]}]"#,
            ),
            kv(
                "gen_ai.output.messages",
                &json!([{"role": "assistant", "parts": parts}]).to_string(),
            ),
        ],
    )
}

/// Limits that let everything through, to time the interpreter itself.
fn unlimited() -> Limits {
    Limits {
        max_attributes_per_span: usize::MAX,
        max_events_per_span: usize::MAX,
        max_tool_calls_per_response: usize::MAX,
        ..Limits::default()
    }
}

/// How much larger the large input of a timing check is than the small one.
const GROWTH: usize = 64;

/// Timing checks run one at a time, so they do not measure each other.
static TIMING: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Seconds per item of `work` on the input `setup(n)` built beforehand.
fn per_item<T>(n: usize, input: &T, work: &impl Fn(&T)) -> f64 {
    let start = Instant::now();
    work(input);
    start.elapsed().as_secs_f64() / n as f64
}

/// Time per item at `n` and at `64n` (inputs built outside the timing, best of seven runs
/// taken alternately): linear or n log n work keeps it about the same, a quadratic step makes
/// it 64 times more. The factor allowed (16) leaves room for noise and for the larger input
/// no longer fitting in the caches.
fn assert_scales_linearly<T>(what: &str, n: usize, setup: impl Fn(usize) -> T, work: impl Fn(&T)) {
    let _one_at_a_time = TIMING.lock().unwrap_or_else(|e| e.into_inner());
    let (small_input, large_input) = (setup(n), setup(GROWTH * n));
    let (mut small, mut large) = (f64::MAX, f64::MAX);
    for _ in 0..7 {
        small = small.min(per_item(n, &small_input, &work));
        large = large.min(per_item(GROWTH * n, &large_input, &work));
    }
    eprintln!(
        "{what}: {:.3} ms at {n}, {:.3} ms at {}",
        small * n as f64 * 1e3,
        large * (GROWTH * n) as f64 * 1e3,
        GROWTH * n
    );
    assert!(
        large < small * 16.0,
        "{what}: {small:e} s per item at {n}, {large:e} s per item at {}",
        GROWTH * n
    );
}

#[test]
fn many_attributes_on_a_details_event_cost_linear_time() {
    let limits = unlimited();
    assert_scales_linearly(
        "details event attributes",
        2_500,
        |n| {
            let mut s = span(
                2,
                1,
                "chat m",
                10,
                vec![kv("gen_ai.operation.name", "chat")],
            );
            s.events = vec![Event {
                name: "gen_ai.client.inference.operation.details".into(),
                attributes: (0..n).map(|i| kv(&format!("k{i}"), "v")).collect(),
                ..Default::default()
            }];
            s
        },
        |s| {
            interpret_span_within(s, &limits).unwrap();
        },
    );
}

#[test]
fn many_tool_calls_in_one_response_cost_linear_time() {
    let limits = unlimited();
    assert_scales_linearly(
        "tool calls in one response",
        625,
        |n| (n, tool_call_span(n)),
        |(n, s)| {
            let i = interpret_span_within(s, &limits).unwrap();
            assert_eq!(i.fact.requested_calls.len(), *n);
            let d = derive("r", std::slice::from_ref(&i.fact), &RunMeta::default());
            assert_eq!(d.effects.len(), *n);
        },
    );
}

#[test]
fn many_tool_spans_settling_calls_cost_linear_time() {
    let limits = unlimited();
    assert_scales_linearly(
        "tool spans of one response",
        250,
        |n| {
            let mut facts = vec![
                interpret_span_within(&tool_call_span(n), &limits)
                    .unwrap()
                    .fact,
            ];
            for i in 0..n {
                let mut t =
                    SpanFact::new(FactKind::ToolCall, "t".into(), format!("t{i}"), "f".into());
                t.parent_span_id = Some("0101010101010101".into());
                t.start_ns = 100 + i as u64;
                t.end_ns = t.start_ns + 1;
                t.tool_call_id = Some(format!("c{}", n - 1 - i));
                t.tool_name = Some("f".into());
                facts.push(t);
            }
            facts
        },
        |facts| {
            let d = derive("r", facts, &RunMeta::default());
            assert!(d.effects.iter().all(|e| e.span_id.is_some()));
        },
    );
}

#[test]
fn many_tool_results_in_one_responses_history_cost_linear_time() {
    let limits = unlimited();
    assert_scales_linearly(
        "tool results in a Responses history",
        500,
        |n| {
            let mut items = vec![json!({"role": "user", "content": "go"})];
            items.extend((0..n).map(|i| json!({"type": "function_call", "call_id": format!("c{i}"), "name": "f", "arguments": "{}"})));
            items.extend((0..n).map(|i| json!({"type": "function_call_output", "call_id": format!("c{i}"), "output": "ok"})));
            span(
                5,
                4,
                "response",
                20,
                vec![
                    kv("openinference.span.kind", "LLM"),
                    kv("input.value", &Value::Array(items).to_string()),
                ],
            )
        },
        |s| {
            let i = interpret_span_within(s, &limits).unwrap();
            assert_eq!(i.fact.input.as_ref().unwrap().len(), 3);
        },
    );
}

#[test]
fn many_log_events_of_one_span_cost_n_log_n_time() {
    let limits = Limits::default();
    assert_scales_linearly(
        "log events of one span",
        200,
        |n| {
            (0..n)
                .map(|i| {
                    let record = LogRecord {
                        trace_id: crate::test_fixtures::TRACE.to_vec(),
                        span_id: vec![2; 8],
                        time_unix_nano: 1_000 + i as u64,
                        event_name: "gen_ai.user.message".into(),
                        attributes: vec![kv("content", &format!("message {i}"))],
                        ..Default::default()
                    };
                    interpret_log(&record, &limits).unwrap()
                })
                .collect::<Vec<LogEvent>>()
        },
        |events| {
            let mut fact =
                SpanFact::new(FactKind::ModelRequest, "t".into(), "s".into(), "m".into());
            fact.content_from_logs = true;
            let (fact, bodies) = with_log_content(&fact, events);
            assert_eq!(fact.input.as_ref().map(|i| i.len()), Some(events.len()));
            assert_eq!(bodies.len(), events.len());
        },
    );
}

/// The sizes reported in issue 13, interpreted with the caps lifted (so the interpreter does the
/// whole work) and timed; run with `--ignored --nocapture` to see the figures.
#[test]
#[ignore = "a measurement, not a check"]
fn reported_sizes_with_the_caps_lifted() {
    let limits = unlimited();
    let mut s = span(
        2,
        1,
        "chat m",
        10,
        vec![kv("gen_ai.operation.name", "chat")],
    );
    s.events = vec![Event {
        name: "gen_ai.client.inference.operation.details".into(),
        attributes: (0..150_000).map(|i| kv(&format!("k{i}"), "v")).collect(),
        ..Default::default()
    }];
    let start = Instant::now();
    interpret_span_within(&s, &limits).unwrap();
    eprintln!("150,000 details-event attributes: {:?}", start.elapsed());
    let s = tool_call_span(160_000);
    let start = Instant::now();
    let i = interpret_span_within(&s, &limits).unwrap();
    let interpreted = start.elapsed();
    let d = derive("r", std::slice::from_ref(&i.fact), &RunMeta::default());
    eprintln!(
        "160,000 tool calls in one response: interpreted in {interpreted:?}, derived in {:?} ({} effects)",
        start.elapsed() - interpreted,
        d.effects.len()
    );
}
