//! Builders of OTLP spans shaped like Pydantic AI's, shared by the unit tests.

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};

/// The trace every fixture span belongs to.
pub const TRACE: [u8; 16] = [7; 16];

/// A string attribute.
pub fn kv(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.into())),
        }),
        key_strindex: 0,
    }
}

/// A span of [`TRACE`] with id `[id; 8]`, parent `[parent; 8]` (0: none), lasting 10 ns.
pub fn span(id: u8, parent: u8, name: &str, start: u64, attrs: Vec<KeyValue>) -> Span {
    Span {
        trace_id: TRACE.to_vec(),
        span_id: vec![id; 8],
        parent_span_id: if parent == 0 { vec![] } else { vec![parent; 8] },
        name: name.into(),
        start_time_unix_nano: start,
        end_time_unix_nano: start + 10,
        attributes: attrs,
        ..Default::default()
    }
}

/// The run id stepline gives the run whose agent span is `[id; 8]`.
pub fn run_id(id: u8) -> String {
    format!("{}-{}", hex::encode(TRACE), hex::encode([id; 8]))
}

/// An outer run (span 1, alias `outer-call`) whose model (span 2) calls tool `ask` (span 3),
/// in which a delegate run (span 4) makes one model request (span 5).
pub fn delegate_scenario() -> Vec<Span> {
    let op = |v: &str| kv("gen_ai.operation.name", v);
    vec![
        span(
            2,
            1,
            "chat m",
            100,
            vec![
                op("chat"),
                kv("gen_ai.agent.call.id", "outer-call"),
                kv(
                    "gen_ai.input.messages",
                    r#"[{"role":"user","parts":[{"type":"text","content":"go"}]}]"#,
                ),
                kv(
                    "gen_ai.output.messages",
                    r#"[{"role":"assistant","parts":[{"type":"tool_call","id":"c1","name":"ask","arguments":{}}]}]"#,
                ),
            ],
        ),
        span(
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
            4,
            3,
            "invoke_agent delegate",
            125,
            vec![op("invoke_agent"), kv("gen_ai.agent.name", "delegate")],
        ),
        span(
            3,
            1,
            "execute_tool ask",
            120,
            vec![
                op("execute_tool"),
                kv("gen_ai.tool.call.id", "c1"),
                kv("gen_ai.tool.name", "ask"),
                kv("gen_ai.tool.call.result", "a"),
            ],
        ),
        span(
            1,
            0,
            "invoke_agent outer",
            50,
            vec![
                op("invoke_agent"),
                kv("gen_ai.agent.name", "outer"),
                kv("gen_ai.agent.call.id", "outer-call"),
                kv("gen_ai.conversation.id", "conv-f"),
            ],
        ),
    ]
}

/// Logfire pending spans (span ids 0x21, 0x23) for the outer run (span 1) and its tool (span 3)
/// of [`delegate_scenario`], as Logfire sends them when the spans start.
pub fn pending_spans() -> Vec<Span> {
    let op = |v: &str| kv("gen_ai.operation.name", v);
    let pending = || kv("logfire.span_type", "pending_span");
    vec![
        span(
            0x21,
            1,
            "invoke_agent outer",
            50,
            vec![
                op("invoke_agent"),
                pending(),
                kv("logfire.pending_parent_id", "0000000000000000"),
                kv("gen_ai.agent.name", "outer"),
                kv("gen_ai.agent.call.id", "outer-call"),
            ],
        ),
        span(
            0x23,
            3,
            "execute_tool ask",
            120,
            vec![
                op("execute_tool"),
                pending(),
                kv("logfire.pending_parent_id", &hex::encode([1u8; 8])),
                kv("gen_ai.tool.call.id", "c1"),
                kv("gen_ai.tool.name", "ask"),
            ],
        ),
    ]
}

/// A span event with string attributes.
pub fn event(
    name: &str,
    attrs: Vec<KeyValue>,
) -> opentelemetry_proto::tonic::trace::v1::span::Event {
    opentelemetry_proto::tonic::trace::v1::span::Event {
        name: name.into(),
        attributes: attrs,
        ..Default::default()
    }
}

/// A Strands Agents run in its default mode (content in span events, Converse blocks): agent
/// (span 1, `session.id` s-1) → cycle 2 → chat 3 (asks for tool `add`) + tool 4; → cycle 5 →
/// chat 6 (final text).
pub fn strands_scenario() -> Vec<Span> {
    let op = |v: &str| kv("gen_ai.operation.name", v);
    let session = || kv("session.id", "s-1");
    let user = || {
        event(
            "gen_ai.user.message",
            vec![kv("content", r#"[{"text":"add 2 and 3"}]"#)],
        )
    };
    let system = || {
        event(
            "gen_ai.system.message",
            vec![kv("content", r#"[{"text":"be brief"}]"#)],
        )
    };
    let tool_use = r#"[{"toolUse":{"toolUseId":"t-1","name":"add","input":{"a":2,"b":3}}}]"#;
    let tool_result =
        r#"[{"toolResult":{"toolUseId":"t-1","status":"success","content":[{"text":"5"}]}}]"#;
    let mut chat1 = span(3, 2, "chat", 110, vec![op("chat"), session()]);
    chat1.events = vec![
        system(),
        user(),
        event(
            "gen_ai.choice",
            vec![kv("message", tool_use), kv("finish_reason", "tool_use")],
        ),
    ];
    let mut tool = span(
        4,
        2,
        "execute_tool add",
        125,
        vec![
            op("execute_tool"),
            session(),
            kv("gen_ai.tool.name", "add"),
            kv("gen_ai.tool.call.id", "t-1"),
            kv("gen_ai.tool.status", "success"),
        ],
    );
    tool.events = vec![
        event(
            "gen_ai.tool.message",
            vec![
                kv("role", "tool"),
                kv("content", r#"{"a": 2, "b": 3}"#),
                kv("id", "t-1"),
            ],
        ),
        event(
            "gen_ai.choice",
            vec![kv("message", r#"[{"text": "5"}]"#), kv("id", "t-1")],
        ),
    ];
    let mut chat2 = span(6, 5, "chat", 140, vec![op("chat"), session()]);
    chat2.events = vec![
        system(),
        user(),
        event("gen_ai.assistant.message", vec![kv("content", tool_use)]),
        event("gen_ai.tool.message", vec![kv("content", tool_result)]),
        event(
            "gen_ai.choice",
            vec![
                kv("message", r#"[{"text":"5"}]"#),
                kv("finish_reason", "end_turn"),
            ],
        ),
    ];
    vec![
        chat1,
        tool,
        span(
            2,
            1,
            "execute_event_loop_cycle",
            105,
            vec![op("execute_event_loop_cycle"), session()],
        ),
        chat2,
        span(
            5,
            1,
            "execute_event_loop_cycle",
            135,
            vec![op("execute_event_loop_cycle"), session()],
        ),
        span(
            1,
            0,
            "invoke_agent calc",
            100,
            vec![
                op("invoke_agent"),
                session(),
                kv("gen_ai.agent.name", "calc"),
            ],
        ),
    ]
}

/// A Strands delegate agent run called from the tool (span 4) of [`strands_scenario`]:
/// `invoke_agent helper` (span 7) → cycle (span 9) → chat (span 8).
pub fn strands_delegate() -> Vec<Span> {
    let op = |v: &str| kv("gen_ai.operation.name", v);
    let mut chat = span(8, 9, "chat", 128, vec![op("chat")]);
    chat.events = vec![
        event(
            "gen_ai.user.message",
            vec![kv("content", r#"[{"text":"help"}]"#)],
        ),
        event("gen_ai.choice", vec![kv("message", r#"[{"text":"ok"}]"#)]),
    ];
    vec![
        chat,
        span(
            9,
            7,
            "execute_event_loop_cycle",
            127,
            vec![op("execute_event_loop_cycle")],
        ),
        span(
            7,
            4,
            "invoke_agent helper",
            126,
            vec![op("invoke_agent"), kv("gen_ai.agent.name", "helper")],
        ),
    ]
}

/// `span` with its own timing (start, end) on trace `trace`.
fn timed(trace: u8, id: u8, parent: u8, name: &str, at: (u64, u64), attrs: Vec<KeyValue>) -> Span {
    let mut s = span(id, parent, name, at.0, attrs);
    s.trace_id = vec![trace; 16];
    s.end_time_unix_nano = at.1;
    s
}

/// The OpenAI Agents SDK as OpenInference exports it (trace `[9; 16]`): `Agent workflow` (AGENT,
/// span 1) → task (CHAIN, 2) → `calc` (AGENT, 3) → turn (CHAIN, 4) → response (LLM, 5) asking for
/// `add` and `helper` in parallel, TOOL spans `add` (6) and `helper` (7), the helper agent used as a
/// tool: task (CHAIN, 8) → `helper` (AGENT, 9) → turn (10) → response (11); then turn (12) →
/// response (13) with the whole history. No TOOL span carries a call id.
pub fn openinference_scenario() -> Vec<Span> {
    let kind = |k: &str| kv("openinference.span.kind", k);
    let session = || kv("session.id", "oi-session");
    let chain =
        |id, parent, name: &str, at| timed(9, id, parent, name, at, vec![kind("CHAIN"), session()]);
    let llm = |id, parent, at, input: &str, output: &str| {
        timed(
            9,
            id,
            parent,
            "response",
            at,
            vec![
                kind("LLM"),
                session(),
                kv("llm.model_name", "gpt-test"),
                kv("llm.token_count.prompt", "10"),
                kv("input.value", input),
                kv("output.value", output),
            ],
        )
    };
    let tool = |id, name: &str, at, input: &str, output: &str| {
        timed(
            9,
            id,
            4,
            name,
            at,
            vec![
                kind("TOOL"),
                session(),
                kv("tool.name", name),
                kv("input.value", input),
                kv("output.value", output),
            ],
        )
    };
    let calls = r#"[{"type":"function_call","call_id":"c_add","name":"add","arguments":"{\"a\":1}"},{"type":"function_call","call_id":"c_help","name":"helper","arguments":"{\"input\":\"hi\"}"}]"#;
    let history = r#"[{"role":"user","content":"go"},{"type":"function_call","call_id":"c_add","name":"add","arguments":"{\"a\":1}"},{"type":"function_call","call_id":"c_help","name":"helper","arguments":"{\"input\":\"hi\"}"},{"type":"function_call_output","call_id":"c_add","output":"1"},{"type":"function_call_output","call_id":"c_help","output":"done"}]"#;
    vec![
        timed(
            9,
            1,
            0,
            "Agent workflow",
            (100, 400),
            vec![kind("AGENT"), session()],
        ),
        chain(2, 1, "Agent workflow", (101, 399)),
        timed(
            9,
            3,
            2,
            "calc",
            (102, 398),
            vec![kind("AGENT"), session(), kv("agent.name", "calc")],
        ),
        chain(4, 3, "turn", (103, 300)),
        llm(
            5,
            4,
            (104, 150),
            r#"[{"role":"user","content":"go"}]"#,
            &format!(r#"{{"instructions":"Add.","output":{calls}}}"#),
        ),
        tool(6, "add", (160, 170), r#"{"a":1}"#, "1"),
        tool(7, "helper", (161, 250), r#"{"input":"hi"}"#, "done"),
        chain(8, 7, "Agent workflow", (162, 249)),
        timed(
            9,
            9,
            8,
            "helper",
            (163, 248),
            vec![kind("AGENT"), session(), kv("agent.name", "helper")],
        ),
        chain(10, 9, "turn", (164, 247)),
        llm(
            11,
            10,
            (165, 246),
            r#"[{"role":"user","content":"hi"}]"#,
            r#"{"output":[{"type":"message","role":"assistant","content":[{"type":"output_text","text":"done"}]}]}"#,
        ),
        chain(12, 3, "turn", (301, 397)),
        llm(
            13,
            12,
            (302, 396),
            history,
            r#"{"instructions":"Add.","output":[{"type":"message","role":"assistant","content":[{"type":"output_text","text":"1 and done"}]}]}"#,
        ),
    ]
}

/// OpenLLMetry (trace `[10; 16]`): `calc.agent` (span 1) → legacy `openai.chat` (2) asking for
/// `add`, `add.tool` (3, no call id), and a `step.task` (4) holding the second `openai.chat` (5).
pub fn openllmetry_scenario() -> Vec<Span> {
    let session = || kv("traceloop.association.properties.session_id", "tl-session");
    let chat = |id, parent, at, extra: Vec<KeyValue>| {
        let mut attrs = vec![
            session(),
            kv("llm.request.type", "chat"),
            kv("gen_ai.system", "openai"),
            kv("gen_ai.prompt.0.role", "user"),
            kv("gen_ai.prompt.0.content", "2?"),
        ];
        attrs.extend(extra);
        timed(10, id, parent, "openai.chat", at, attrs)
    };
    vec![
        timed(
            10,
            1,
            0,
            "calc.agent",
            (100, 400),
            vec![
                session(),
                kv("traceloop.span.kind", "agent"),
                kv("traceloop.entity.name", "calc"),
            ],
        ),
        chat(
            2,
            1,
            (110, 150),
            vec![
                kv("gen_ai.completion.0.role", "assistant"),
                kv("gen_ai.completion.0.tool_calls.0.id", "t1"),
                kv("gen_ai.completion.0.tool_calls.0.name", "add"),
                kv("gen_ai.completion.0.tool_calls.0.arguments", r#"{"a":2}"#),
            ],
        ),
        timed(
            10,
            3,
            1,
            "add.tool",
            (160, 170),
            vec![
                session(),
                kv("traceloop.span.kind", "tool"),
                kv("traceloop.entity.name", "add"),
                kv("traceloop.entity.input", r#"{"args":[],"kwargs":{"a":2}}"#),
                kv("traceloop.entity.output", "2"),
            ],
        ),
        timed(
            10,
            4,
            1,
            "step.task",
            (180, 390),
            vec![session(), kv("traceloop.span.kind", "task")],
        ),
        chat(
            5,
            4,
            (190, 380),
            vec![
                kv("gen_ai.prompt.1.role", "assistant"),
                kv("gen_ai.prompt.1.tool_calls.0.id", "t1"),
                kv("gen_ai.prompt.1.tool_calls.0.name", "add"),
                kv("gen_ai.prompt.1.tool_calls.0.arguments", r#"{"a":2}"#),
                kv("gen_ai.prompt.2.role", "tool"),
                kv("gen_ai.prompt.2.tool_call_id", "t1"),
                kv("gen_ai.prompt.2.content", "2"),
                kv("gen_ai.completion.0.role", "assistant"),
                kv("gen_ai.completion.0.content", "It is 2."),
            ],
        ),
    ]
}

/// An export request holding `spans`.
pub fn request(spans: Vec<Span>) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}
