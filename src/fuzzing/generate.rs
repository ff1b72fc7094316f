//! Structure-aware generators: OTLP spans, log records and attribute values whose keys, values,
//! counts and nesting come from fuzz bytes, shaped like what agent instrumentations send (GenAI
//! messages, OpenInference and OpenLLMetry flattened lists, tool calls), so mutations reach the
//! interpreter's rules instead of stopping at "not an agent span".

use opentelemetry_proto::tonic::common::v1::{
    any_value, AnyValue, ArrayValue, KeyValue, KeyValueList,
};
use opentelemetry_proto::tonic::logs::v1::LogRecord;
use opentelemetry_proto::tonic::trace::v1::{span, Span, Status};
use serde_json::{json, Map, Value};

use super::source::Source;

/// Dictionary tokens for byte-level mutation: attribute keys, prefixes and JSON punctuation.
pub const DICTIONARY: &[&str] = &[
    "gen_ai.prompt.",
    "gen_ai.completion.",
    "llm.input_messages.",
    "llm.output_messages.",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
    "gen_ai.tool.call.id",
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.system_instructions",
    "gen_ai.operation.name",
    "gen_ai.agent.call.id",
    "openinference.span.kind",
    "traceloop.span.kind",
    "invoke_agent",
    "execute_tool",
    "chat",
    ".message.tool_calls.",
    ".tool_call.function.arguments",
    "tool_call",
    "tool_call_response",
    "media+sha256://",
    "${env:",
    ":-",
    "$$",
    "}",
    "{",
    "[",
    "]",
    "\"",
    "\\u0000",
    "%",
    "%2F",
    "/v1/runs/",
    "?format=",
    "&at=",
    "\n  ",
    ": ",
    "- ",
    "*a",
    "&a ",
    "<<: ",
    "0.",
    ".0",
    "1e999",
];

/// Attribute keys the conventions read, whole.
const KEYS: &[&str] = &[
    "gen_ai.operation.name",
    "gen_ai.agent.name",
    "gen_ai.agent.call.id",
    "gen_ai.conversation.id",
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.system_instructions",
    "gen_ai.tool.call.id",
    "gen_ai.tool.name",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
    "gen_ai.tool.call.idempotency_key",
    "gen_ai.request.model",
    "gen_ai.response.model",
    "gen_ai.provider.name",
    "gen_ai.system",
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.output_tokens",
    "gen_ai.prompt",
    "gen_ai.completion",
    "pydantic_ai.all_messages",
    "pydantic_ai.tool.retry.attempt",
    "pydantic_ai.tool.retry.cause",
    "logfire.span_type",
    "logfire.pending_parent_id",
    "openinference.span.kind",
    "input.value",
    "output.value",
    "llm.model_name",
    "llm.provider",
    "llm.system",
    "llm.token_count.prompt",
    "llm.token_count.completion",
    "tool.name",
    "tool.call_id",
    "tool.parameters_value",
    "tool_call.id",
    "session.id",
    "graph.node.id",
    "agent.name",
    "traceloop.span.kind",
    "traceloop.entity.input",
    "traceloop.entity.output",
    "traceloop.entity.name",
    "traceloop.workflow.name",
    "traceloop.association.properties.conversation_id",
    "llm.request.type",
    "llm.usage.prompt_tokens",
    "error.type",
    "event.name",
    "gen_ai.message.index",
    "exception.message",
];

/// Prefixes of flattened lists (`{prefix}.{i}.…`).
const PREFIXES: &[&str] = &[
    "gen_ai.prompt",
    "gen_ai.completion",
    "llm.input_messages",
    "llm.output_messages",
    "llm.tools",
];

/// Path segments of flattened lists.
const SEGMENTS: &[&str] = &[
    "message",
    "role",
    "content",
    "contents",
    "message_content",
    "type",
    "text",
    "tool_calls",
    "tool_call",
    "function",
    "name",
    "arguments",
    "id",
    "tool_call_id",
    "image",
    "url",
    "finish_reason",
    "0",
    "1",
    "2",
    "10",
    "4294967296",
    "",
];

/// Values of the attributes that select a span's kind, and other short strings.
const WORDS: &[&str] = &[
    "invoke_agent",
    "chat",
    "execute_tool",
    "text_completion",
    "generate_content",
    "create_agent",
    "AGENT",
    "LLM",
    "TOOL",
    "CHAIN",
    "workflow",
    "task",
    "agent",
    "tool",
    "pending_span",
    "span",
    "user",
    "assistant",
    "system",
    "tool",
    "model",
    "c1",
    "c2",
    "call_1",
    "",
    "{}",
    "[]",
    "null",
    "0",
    "-1",
    "media+sha256://",
];

/// Span names as the frameworks write them.
const NAMES: &[&str] = &[
    "invoke_agent outer",
    "agent run",
    "chat m",
    "chat gpt-4o",
    "execute_tool ask",
    "running tool",
    "running tools",
    "execute_event_loop_cycle",
    "Agent workflow",
    "openai.chat",
    "add.tool",
    "calc.agent",
    "",
];

const ROLES: &[&str] = &[
    "user",
    "assistant",
    "system",
    "tool",
    "developer",
    "model",
    "",
];
const PART_TYPES: &[&str] = &[
    "text",
    "tool_call",
    "tool_call_response",
    "thinking",
    "reasoning",
    "blob",
    "binary",
    "uri",
    "file",
    "image_url",
    "input_text",
    "output_text",
    "function_call",
    "function_call_output",
    "refusal",
    "x",
];
const CALL_IDS: &[&str] = &["c1", "c2", "c3", "dup", ""];
const TOOL_NAMES: &[&str] = &["ask", "work", "final_result", ""];

/// Trace ids generated spans use (a few, so spans meet in runs).
pub const TRACES: [[u8; 16]; 3] = [[7; 16], [8; 16], [9; 16]];

/// A string attribute value.
pub fn string(value: impl Into<String>) -> AnyValue {
    AnyValue {
        value: Some(any_value::Value::StringValue(value.into())),
    }
}

/// A string attribute.
pub fn kv(key: impl Into<String>, value: impl Into<String>) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(string(value)),
        key_strindex: 0,
    }
}

/// A short string: a dictionary word, input text, or a word repeated.
fn word(src: &mut Source) -> String {
    match src.below(8) {
        0..=4 => src.pick(WORDS).to_string(),
        5 | 6 => src.text(),
        _ => {
            let unit = src.pick(WORDS);
            let times = src.count(100_000);
            src.repeat(unit, times)
        }
    }
}

/// An attribute key: a known key, a flattened-list key (possibly with very many segments), or
/// free text.
pub fn key(src: &mut Source) -> String {
    match src.below(10) {
        0..=3 => src.pick(KEYS).to_string(),
        4..=7 => {
            let mut k = src.pick(PREFIXES).to_string();
            let segments = 1 + src.count(64);
            for _ in 0..segments {
                k.push('.');
                k.push_str(src.pick(SEGMENTS));
            }
            if src.below(16) == 0 {
                // Long keys: many repeated segments (the flattened-key rebuild recurses on them).
                let unit = src.pick(&[".0", ".a", ".message", "."]);
                let times = src.count(100_000);
                k.push_str(&src.repeat(unit, times));
            }
            k
        }
        8 => src.text(),
        _ => format!("{}{}", src.pick(KEYS), src.text()),
    }
}

/// A JSON value up to `depth` levels (sometimes a deep run of nested arrays/objects).
pub fn json_value(src: &mut Source, depth: usize) -> Value {
    let choice = if depth == 0 {
        src.below(5)
    } else {
        src.below(9)
    };
    match choice {
        0 => Value::Null,
        1 => Value::Bool(src.flag()),
        2 => json!(src.u64() as i64),
        3 => Value::String(word(src)),
        4 => json!(f64::from_bits(src.u64())),
        5 | 6 => {
            let n = src.count(64);
            Value::Array((0..n).map(|_| json_value(src, depth - 1)).collect())
        }
        7 => {
            let n = src.count(64);
            let mut map = Map::new();
            for _ in 0..n {
                let k = src.pick(&["type", "content", "id", "name", "arguments", "role", "x"]);
                map.insert(format!("{k}{}", src.below(3)), json_value(src, depth - 1));
            }
            Value::Object(map)
        }
        _ => {
            // Deep nesting of a chosen depth (serde_json reads 128 levels at most).
            let levels = src.count(200);
            let mut v = json_value(src, 0);
            for i in 0..levels {
                v = if i % 2 == 0 {
                    json!([v])
                } else {
                    json!({ "a": v })
                };
            }
            v
        }
    }
}

/// A message part in the GenAI (`parts`) shape.
fn part(src: &mut Source) -> Value {
    let kind = src.pick(PART_TYPES);
    let mut part = Map::new();
    part.insert("type".into(), json!(kind));
    match kind {
        "tool_call" | "function_call" => {
            part.insert("id".into(), json!(src.pick(CALL_IDS)));
            part.insert("name".into(), json!(src.pick(TOOL_NAMES)));
            part.insert("arguments".into(), json_value(src, 4));
        }
        "tool_call_response" | "function_call_output" => {
            part.insert("id".into(), json!(src.pick(CALL_IDS)));
            part.insert("name".into(), json!(src.pick(TOOL_NAMES)));
            part.insert("response".into(), json_value(src, 4));
        }
        "blob" | "binary" | "file" | "uri" => {
            part.insert("modality".into(), json!("image"));
            part.insert("mime_type".into(), json!("image/png"));
            let n = src.count(100_000);
            let data = src.repeat("QUJD", n);
            part.insert(
                if kind == "uri" { "uri" } else { "content" }.into(),
                if src.flag() {
                    json!(data)
                } else {
                    json!(format!("media+sha256://{}", "ab".repeat(32)))
                },
            );
            if src.flag() {
                part.insert("size".into(), json!(src.u64()));
            }
        }
        _ => {
            part.insert("content".into(), json!(word(src)));
        }
    }
    if src.below(8) == 0 {
        part.insert(src.text(), json_value(src, 3));
    }
    Value::Object(part)
}

/// A message list in one of the shapes the conventions read.
pub fn messages(src: &mut Source) -> Value {
    let n = src.count(4096);
    let mut out = Vec::with_capacity(n.min(64));
    for _ in 0..n {
        let role = src.pick(ROLES);
        let message = match src.below(4) {
            // OTel GenAI / Pydantic AI 2.x.
            0 | 1 => {
                let parts = src.count(2048);
                json!({"role": role, "parts": (0..parts).map(|_| part(src)).collect::<Vec<_>>()})
            }
            // OpenAI chat (OpenLLMetry's input, older conventions).
            2 => {
                let calls = src.count(2048);
                json!({
                    "role": role,
                    "content": word(src),
                    "tool_call_id": src.pick(CALL_IDS),
                    "tool_calls": (0..calls).map(|_| json!({
                        "id": src.pick(CALL_IDS),
                        "type": "function",
                        "function": {"name": src.pick(TOOL_NAMES), "arguments": json_value(src, 3).to_string()},
                    })).collect::<Vec<_>>(),
                })
            }
            // Anything.
            _ => json_value(src, 6),
        };
        out.push(message);
    }
    Value::Array(out)
}

/// A JSON document held in a string attribute, sometimes cut or broken.
fn json_text(src: &mut Source) -> String {
    let value = match src.below(3) {
        0 | 1 => messages(src),
        _ => json_value(src, 8),
    };
    let mut text = value.to_string();
    match src.below(8) {
        0 => {
            let cut = src.below(text.len() + 1);
            let mut cut = cut.min(text.len());
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
        }
        1 => {
            // A nesting run written as text (deeper than a Value could be built cheaply).
            let levels = src.count(100_000);
            let open = src.repeat("[", levels);
            let close = "]".repeat(open.len());
            text = format!("{open}{text}{close}");
        }
        _ => {}
    }
    text
}

/// An OTLP attribute value up to `depth` levels of arrays and kvlists.
pub fn any_value(src: &mut Source, depth: usize) -> AnyValue {
    use any_value::Value as V;
    let choice = if depth == 0 {
        src.below(7)
    } else {
        src.below(10)
    };
    let value = match choice {
        0 => None,
        1 | 2 => Some(V::StringValue(word(src))),
        3 => Some(V::StringValue(json_text(src))),
        4 => Some(V::IntValue(src.u64() as i64)),
        5 => Some(V::DoubleValue(f64::from_bits(src.u64()))),
        6 => Some(match src.below(3) {
            0 => V::BoolValue(src.flag()),
            1 => V::BytesValue(src.bytes(256)),
            _ => V::StringValueStrindex(src.byte().into()),
        }),
        7 | 8 => {
            let n = src.count(256);
            Some(V::ArrayValue(ArrayValue {
                values: (0..n).map(|_| any_value(src, depth - 1)).collect(),
            }))
        }
        _ => {
            let n = src.count(256);
            Some(V::KvlistValue(KeyValueList {
                values: (0..n)
                    .map(|_| KeyValue {
                        key: src
                            .pick(&["role", "content", "parts", "id", "name", "x"])
                            .into(),
                        value: Some(any_value(src, depth - 1)),
                        key_strindex: 0,
                    })
                    .collect(),
            }))
        }
    };
    AnyValue { value }
}

/// One attribute.
pub fn attribute(src: &mut Source) -> KeyValue {
    let key = key(src);
    let value = if key.starts_with("gen_ai.operation.name") || key.ends_with("span.kind") {
        Some(string(src.pick(WORDS)))
    } else if src.below(6) == 0 {
        None
    } else {
        // OTLP decoders stop nesting at about 40 levels of AnyValue; stay within that.
        Some(any_value(src, 6))
    };
    KeyValue {
        key,
        value,
        key_strindex: 0,
    }
}

/// A list of attributes, the first one chosen among the kind selectors so most spans are
/// recognised.
pub fn attributes(src: &mut Source, max: usize) -> Vec<KeyValue> {
    let mut attrs = Vec::new();
    match src.below(5) {
        0 => attrs.push(kv(
            "gen_ai.operation.name",
            src.pick(&["invoke_agent", "chat", "execute_tool"]),
        )),
        1 => attrs.push(kv(
            "openinference.span.kind",
            src.pick(&["AGENT", "LLM", "TOOL", "CHAIN"]),
        )),
        2 => attrs.push(kv(
            "traceloop.span.kind",
            src.pick(&["workflow", "agent", "task", "tool"]),
        )),
        3 => attrs.push(kv("gen_ai.prompt.0.role", "user")),
        _ => {}
    }
    let n = src.count(max);
    for _ in 0..n {
        attrs.push(attribute(src));
    }
    attrs
}

/// A span of one of [`TRACES`] with a small span id, so spans of one input link up.
pub fn span(src: &mut Source) -> Span {
    let trace = TRACES[src.below(TRACES.len())].to_vec();
    let id = 1 + src.below(16) as u8;
    let parent = src.below(17) as u8;
    let start = 1_000 + src.below(256) as u64 * 10;
    let mut s = Span {
        trace_id: trace,
        span_id: vec![id; 8],
        parent_span_id: if parent == 0 {
            Vec::new()
        } else {
            vec![parent; 8]
        },
        name: if src.below(8) == 0 {
            src.text()
        } else {
            src.pick(NAMES).to_string()
        },
        start_time_unix_nano: if src.below(16) == 0 { src.u64() } else { start },
        end_time_unix_nano: if src.below(16) == 0 {
            src.u64()
        } else {
            start + src.below(256) as u64
        },
        attributes: attributes(src, 4096),
        ..Default::default()
    };
    let events = src.count(1024);
    for _ in 0..events {
        let name = match src.below(4) {
            0 => "gen_ai.client.inference.operation.details".to_string(),
            1 => src
                .pick(&[
                    "gen_ai.user.message",
                    "gen_ai.choice",
                    "gen_ai.tool.message",
                ])
                .to_string(),
            2 => "exception".to_string(),
            _ => src.text(),
        };
        s.events.push(span::Event {
            time_unix_nano: start + src.below(256) as u64,
            name,
            attributes: attributes(src, 1024),
            ..Default::default()
        });
    }
    if src.below(4) == 0 {
        s.status = Some(Status {
            code: src.below(4) as i32,
            message: word(src),
        });
    }
    s
}

/// A legacy GenAI event as an OTLP log record, for a span of [`TRACES`].
pub fn log_record(src: &mut Source) -> LogRecord {
    let trace = TRACES[src.below(TRACES.len())].to_vec();
    let id = 1 + src.below(16) as u8;
    let name = src
        .pick(&[
            "gen_ai.user.message",
            "gen_ai.system.message",
            "gen_ai.assistant.message",
            "gen_ai.tool.message",
            "gen_ai.choice",
            "other",
        ])
        .to_string();
    let mut attributes = vec![kv("event.name", name.clone())];
    if src.flag() {
        attributes.push(KeyValue {
            key: "gen_ai.message.index".into(),
            value: Some(AnyValue {
                value: Some(any_value::Value::IntValue(src.u64() as i64 % 64)),
            }),
            key_strindex: 0,
        });
    }
    attributes.extend(attributes_plain(src, 16));
    let body = if src.below(4) == 0 {
        Some(any_value(src, 4))
    } else {
        let content = json_value(src, 3);
        let mut fields = vec![
            KeyValue {
                key: "content".into(),
                value: Some(json_to_any(&content, 20)),
                key_strindex: 0,
            },
            kv("role", src.pick(ROLES)),
            kv("id", src.pick(CALL_IDS)),
        ];
        if src.flag() {
            let calls = json!([{"id": src.pick(CALL_IDS), "type": "function",
                "function": {"name": src.pick(TOOL_NAMES), "arguments": json_value(src, 3)}}]);
            fields.push(KeyValue {
                key: if name == "gen_ai.choice" {
                    "message"
                } else {
                    "tool_calls"
                }
                .into(),
                value: Some(json_to_any(&calls, 20)),
                key_strindex: 0,
            });
        }
        Some(AnyValue {
            value: Some(any_value::Value::KvlistValue(KeyValueList {
                values: fields,
            })),
        })
    };
    LogRecord {
        time_unix_nano: 1_000 + src.below(4096) as u64,
        observed_time_unix_nano: src.u64(),
        trace_id: trace,
        span_id: vec![id; 8],
        body,
        attributes,
        event_name: if src.flag() { name } else { String::new() },
        ..Default::default()
    }
}

/// Attributes without the kind selector.
fn attributes_plain(src: &mut Source, max: usize) -> Vec<KeyValue> {
    let n = src.count(max);
    (0..n).map(|_| attribute(src)).collect()
}

/// A JSON value as an OTLP value (arrays and objects as array and kvlist values), at most
/// `depth` levels (deeper parts become strings).
pub fn json_to_any(value: &Value, depth: usize) -> AnyValue {
    use any_value::Value as V;
    let v = match value {
        Value::Null => None,
        Value::Bool(b) => Some(V::BoolValue(*b)),
        Value::Number(n) => Some(match n.as_i64() {
            Some(i) => V::IntValue(i),
            None => V::DoubleValue(n.as_f64().unwrap_or_default()),
        }),
        Value::String(s) => Some(V::StringValue(s.clone())),
        _ if depth == 0 => Some(V::StringValue(value.to_string())),
        Value::Array(items) => Some(V::ArrayValue(ArrayValue {
            values: items.iter().map(|v| json_to_any(v, depth - 1)).collect(),
        })),
        Value::Object(map) => Some(V::KvlistValue(KeyValueList {
            values: map
                .iter()
                .map(|(k, v)| KeyValue {
                    key: k.clone(),
                    value: Some(json_to_any(v, depth - 1)),
                    key_strindex: 0,
                })
                .collect(),
        })),
    };
    AnyValue { value: v }
}

/// Spans of one input: a few, most of them agent-shaped.
pub fn spans(src: &mut Source, max: usize) -> Vec<Span> {
    let n = 1 + src.count(max.saturating_sub(1));
    (0..n).map(|_| span(src)).collect()
}
