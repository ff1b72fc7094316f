//! Hand-written seed telemetry, shaped like what the supported frameworks send: a Pydantic AI
//! run with a tool call and a delegate, an OpenInference (OpenAI Agents) LLM and tool span, an
//! OpenLLMetry request with legacy flattened prompt/completion, a Strands event-loop cycle, and
//! legacy GenAI events as log records.

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue, KeyValueList};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};

use crate::fuzzing::generate::{kv, TRACES};

/// A trace export request holding `spans`.
pub fn request(spans: Vec<Span>) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: None,
            scope_spans: vec![ScopeSpans {
                spans,
                ..Default::default()
            }],
            schema_url: String::new(),
        }],
    }
}

/// A logs export request holding `records`.
pub fn logs_request(records: Vec<LogRecord>) -> ExportLogsServiceRequest {
    ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            resource: None,
            scope_logs: vec![ScopeLogs {
                log_records: records,
                ..Default::default()
            }],
            schema_url: String::new(),
        }],
    }
}

/// A span of `trace` with id `[id; 8]`, parent `[parent; 8]` (0: none), lasting 10 ns.
pub fn span(
    trace: usize,
    id: u8,
    parent: u8,
    name: &str,
    start: u64,
    attrs: Vec<KeyValue>,
) -> Span {
    Span {
        trace_id: TRACES[trace % TRACES.len()].to_vec(),
        span_id: vec![id; 8],
        parent_span_id: if parent == 0 { vec![] } else { vec![parent; 8] },
        name: name.into(),
        start_time_unix_nano: start,
        end_time_unix_nano: start + 10,
        attributes: attrs,
        ..Default::default()
    }
}

fn op(v: &str) -> KeyValue {
    kv("gen_ai.operation.name", v)
}

/// A Pydantic-AI-shaped run (span 1, alias `outer-call`): a model request (2) calls tool `ask`
/// (3), in which a delegate run (4) makes one request (5); a second request (6) answers.
pub fn pydantic_ai() -> Vec<Span> {
    vec![
        span(
            0,
            2,
            1,
            "chat m",
            100,
            vec![
                op("chat"),
                kv("gen_ai.agent.call.id", "outer-call"),
                kv("gen_ai.request.model", "gpt-4o"),
                kv(
                    "gen_ai.system_instructions",
                    r#"[{"type":"text","content":"be brief"}]"#,
                ),
                kv(
                    "gen_ai.input.messages",
                    r#"[{"role":"user","parts":[{"type":"text","content":"go"}]}]"#,
                ),
                kv(
                    "gen_ai.output.messages",
                    r#"[{"role":"assistant","parts":[{"type":"tool_call","id":"c1","name":"ask","arguments":{"q":"x"}}]}]"#,
                ),
                kv("gen_ai.usage.input_tokens", "12"),
            ],
        ),
        span(
            0,
            5,
            4,
            "chat d",
            130,
            vec![
                op("chat"),
                kv(
                    "gen_ai.input.messages",
                    r#"[{"role":"user","parts":[{"type":"text","content":"q"}]}]"#,
                ),
                kv(
                    "gen_ai.output.messages",
                    r#"[{"role":"assistant","parts":[{"type":"text","content":"a"}]}]"#,
                ),
            ],
        ),
        span(
            0,
            4,
            3,
            "invoke_agent delegate",
            125,
            vec![op("invoke_agent"), kv("gen_ai.agent.name", "delegate")],
        ),
        span(
            0,
            3,
            1,
            "execute_tool ask",
            120,
            vec![
                op("execute_tool"),
                kv("gen_ai.tool.call.id", "c1"),
                kv("gen_ai.tool.name", "ask"),
                kv("gen_ai.tool.call.arguments", r#"{"q":"x"}"#),
                kv("gen_ai.tool.call.result", "a"),
            ],
        ),
        span(
            0,
            6,
            1,
            "chat m",
            140,
            vec![
                op("chat"),
                kv("gen_ai.agent.call.id", "outer-call"),
                kv(
                    "gen_ai.input.messages",
                    r#"[{"role":"user","parts":[{"type":"text","content":"go"}]},{"role":"assistant","parts":[{"type":"tool_call","id":"c1","name":"ask","arguments":{"q":"x"}}]},{"role":"user","parts":[{"type":"tool_call_response","id":"c1","name":"ask","result":"a"},{"type":"blob","modality":"image","mime_type":"image/png","content":"iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="}]}]"#,
                ),
                kv(
                    "gen_ai.output.messages",
                    r#"[{"role":"assistant","parts":[{"type":"text","content":"done"}],"finish_reason":"stop"}]"#,
                ),
            ],
        ),
        span(
            0,
            1,
            0,
            "invoke_agent outer",
            50,
            vec![
                op("invoke_agent"),
                kv("gen_ai.agent.name", "outer"),
                kv("gen_ai.agent.call.id", "outer-call"),
                kv("gen_ai.conversation.id", "conv-f"),
                kv(
                    "pydantic_ai.all_messages",
                    r#"[{"role":"user","parts":[{"type":"text","content":"go"}]}]"#,
                ),
            ],
        ),
    ]
}

/// OpenInference (OpenAI Agents SDK) spans: an agent, an LLM span with flattened messages and
/// a tool call, and the tool span.
pub fn openinference() -> Vec<Span> {
    let oi = |v: &str| kv("openinference.span.kind", v);
    vec![
        span(
            1,
            1,
            0,
            "Agent workflow",
            10,
            vec![
                oi("AGENT"),
                kv("agent.name", "assistant"),
                kv("session.id", "s-1"),
            ],
        ),
        span(
            1,
            2,
            1,
            "response",
            20,
            vec![
                oi("LLM"),
                kv("llm.model_name", "gpt-4o"),
                kv("llm.input_messages.0.message.role", "system"),
                kv("llm.input_messages.0.message.content", "be brief"),
                kv("llm.input_messages.1.message.role", "user"),
                kv("llm.input_messages.1.message.content", "weather?"),
                kv("llm.output_messages.0.message.role", "assistant"),
                kv(
                    "llm.output_messages.0.message.tool_calls.0.tool_call.id",
                    "call_1",
                ),
                kv(
                    "llm.output_messages.0.message.tool_calls.0.tool_call.function.name",
                    "weather",
                ),
                kv(
                    "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments",
                    r#"{"city":"Paris"}"#,
                ),
                kv("llm.token_count.prompt", "20"),
                kv("input.value", r#"[{"role":"user","content":"weather?"}]"#),
            ],
        ),
        span(
            1,
            3,
            1,
            "weather",
            30,
            vec![
                oi("TOOL"),
                kv("tool.name", "weather"),
                kv("tool_call.id", "call_1"),
                kv("input.value", r#"{"city":"Paris"}"#),
                kv("output.value", "sunny"),
            ],
        ),
    ]
}

/// OpenLLMetry spans: a workflow and a chat request with the legacy flattened prompt and
/// completion attributes.
pub fn openllmetry() -> Vec<Span> {
    vec![
        span(
            2,
            1,
            0,
            "calc.agent",
            10,
            vec![
                kv("traceloop.span.kind", "agent"),
                kv("traceloop.entity.name", "calc"),
                kv("traceloop.association.properties.conversation_id", "conv-t"),
            ],
        ),
        span(
            2,
            2,
            1,
            "openai.chat",
            20,
            vec![
                kv("llm.request.type", "chat"),
                kv("gen_ai.system", "openai"),
                kv("gen_ai.request.model", "gpt-4o"),
                kv("gen_ai.prompt.0.role", "user"),
                kv("gen_ai.prompt.0.content", "2+2?"),
                kv("gen_ai.completion.0.role", "assistant"),
                kv("gen_ai.completion.0.tool_calls.0.id", "c1"),
                kv("gen_ai.completion.0.tool_calls.0.name", "add"),
                kv(
                    "gen_ai.completion.0.tool_calls.0.arguments",
                    r#"{"a":2,"b":2}"#,
                ),
                kv("llm.usage.prompt_tokens", "7"),
            ],
        ),
        span(
            2,
            3,
            1,
            "add.tool",
            30,
            vec![
                kv("traceloop.span.kind", "tool"),
                kv("traceloop.entity.name", "add"),
                kv("traceloop.entity.input", r#"{"inputs":{"a":2,"b":2}}"#),
                kv("traceloop.entity.output", r#"{"output":4}"#),
            ],
        ),
    ]
}

/// A Strands run: agent span 1, event-loop cycle 2 (a grouping span), model request 3 and tool
/// 4 under the cycle.
pub fn strands() -> Vec<Span> {
    vec![
        span(
            0,
            1,
            0,
            "invoke_agent Strands Agents",
            10,
            vec![
                op("invoke_agent"),
                kv("gen_ai.agent.name", "Strands Agents"),
            ],
        ),
        span(
            0,
            2,
            1,
            "execute_event_loop_cycle",
            20,
            vec![kv("event_loop.cycle_id", "cy-1")],
        ),
        span(
            0,
            3,
            2,
            "chat",
            25,
            vec![
                op("chat"),
                kv(
                    "gen_ai.input.messages",
                    r#"[{"role":"user","parts":[{"type":"text","content":"hi"}]}]"#,
                ),
                kv(
                    "gen_ai.output.messages",
                    r#"[{"role":"assistant","parts":[{"type":"tool_call","id":"t1","name":"work","arguments":{}}]}]"#,
                ),
            ],
        ),
        span(
            0,
            4,
            2,
            "execute_tool work",
            30,
            vec![
                op("execute_tool"),
                kv("gen_ai.tool.name", "work"),
                kv("gen_ai.tool.call.id", "t1"),
                kv("gen_ai.tool.call.result", r#"[{"text":"ok"}]"#),
            ],
        ),
    ]
}

/// A model-request span carrying no content (it comes in log records) and its legacy events.
pub fn legacy_events() -> (Vec<Span>, Vec<LogRecord>) {
    let spans = vec![span(
        0,
        9,
        0,
        "chat m",
        10,
        vec![op("chat"), kv("gen_ai.system", "openai")],
    )];
    let record = |name: &str, index: Option<i64>, fields: Vec<KeyValue>| {
        let mut attributes = vec![kv("event.name", name)];
        if let Some(i) = index {
            attributes.push(KeyValue {
                key: "gen_ai.message.index".into(),
                value: Some(AnyValue {
                    value: Some(any_value::Value::IntValue(i)),
                }),
                key_strindex: 0,
            });
        }
        LogRecord {
            time_unix_nano: 12,
            trace_id: TRACES[0].to_vec(),
            span_id: vec![9; 8],
            attributes,
            body: Some(AnyValue {
                value: Some(any_value::Value::KvlistValue(KeyValueList {
                    values: fields,
                })),
            }),
            ..Default::default()
        }
    };
    let logs = vec![
        record(
            "gen_ai.system.message",
            Some(0),
            vec![kv("content", "be brief")],
        ),
        record("gen_ai.user.message", Some(1), vec![kv("content", "hello")]),
        record(
            "gen_ai.choice",
            None,
            vec![
                kv("finish_reason", "stop"),
                KeyValue {
                    key: "message".into(),
                    value: Some(AnyValue {
                        value: Some(any_value::Value::KvlistValue(KeyValueList {
                            values: vec![kv("role", "assistant"), kv("content", "hi there")],
                        })),
                    }),
                    key_strindex: 0,
                },
            ],
        ),
    ];
    (spans, logs)
}

/// Every seed span set.
pub fn span_sets() -> Vec<Vec<Span>> {
    vec![
        pydantic_ai(),
        openinference(),
        openllmetry(),
        strands(),
        legacy_events().0,
    ]
}
