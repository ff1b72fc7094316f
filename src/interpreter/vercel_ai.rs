//! The Vercel AI SDK's built-in `ai.*` spans (npm `ai` v3–v6 with `experimental_telemetry`, and
//! v7 through `LegacyOpenTelemetry`); v7's `@ai-sdk/otel` GenAI spans are read as said below.
//!
//! - `ai.generateText` / `ai.streamText` (and the `generateObject` / `streamObject` roots) are
//!   the run. Its agent name is `ai.telemetry.functionId`; its conversation id the first of the
//!   configured `ai.telemetry.metadata.*` keys that is set ([`set_conversation_keys`]; by
//!   default `sessionId`, `session_id`, `conversationId`, `threadId`).
//! - `ai.generateText.doGenerate` / `ai.streamText.doStream` are model requests. Their input is
//!   `ai.prompt.messages`, the provider prompt (system / user / assistant / tool messages with
//!   `text`, `reasoning`, `file`, `tool-call` and `tool-result` parts; v4's `args` / `result`
//!   too), which holds the full history each step; their output is rebuilt from
//!   `ai.response.reasoning`, `ai.response.text` and `ai.response.toolCalls`.
//! - `ai.toolCall` is a tool call (`ai.toolCall.id/name/args/result`; a failure is the span's
//!   error status and exception event). Whether it is a sibling of the model request under the
//!   root or nested in it depends on the version; both land in the same run: a nested call is
//!   keyed by its model request, which apply resolves to the run above ([`nests_tool_calls`]).
//!
//! v7's `@ai-sdk/otel` spans follow the GenAI conventions and go through the GenAI interpreter,
//! whose group operations include the `step {n}` span's `agent_step`: it only groups a step's
//! `chat` and `execute_tool` spans under `invoke_agent`. The root's `gen_ai.output.messages`
//! merges every step into one message and is not read (history comes from the `chat` spans).

use std::sync::{Arc, OnceLock};

use opentelemetry_proto::tonic::trace::v1::Span;
use serde_json::{json, Map, Value};

use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;

use super::attributes::Attributes;
use super::budget::{within_depth, Cut};
use super::fact::{FactKind, Interpreted, SpanFact};
use super::genai::{error_text, requested_calls, store_bodies};
use super::prefix_memo::{MemoRead, PrefixMemo, SharedMessages};

/// The `ai.telemetry.metadata.*` keys read for the conversation id when none are configured,
/// in order: `sessionId` (what Langfuse reads), then `session_id`, `conversationId`, `threadId`.
pub const DEFAULT_CONVERSATION_KEYS: &[&str] =
    &["sessionId", "session_id", "conversationId", "threadId"];

/// The provider prompt of a model request: the full history of each step.
const PROMPT: &str = "ai.prompt.messages";

/// The attribute every `ai.*` span carries (and v7 `@ai-sdk/otel` spans do not).
const OPERATION_ID: &str = "ai.operationId";

/// Root operations: one call of the SDK, which is one run.
const RUN_OPERATIONS: &[&str] = &[
    "ai.generateText",
    "ai.streamText",
    "ai.generateObject",
    "ai.streamObject",
];

static CONVERSATION_KEYS: OnceLock<Vec<String>> = OnceLock::new();

/// Sets, once per process (at start, from `processors.stepline.vercel_ai.conversation_keys`),
/// the `ai.telemetry.metadata.*` keys read for the conversation id, in order. Later calls are
/// ignored; until the first, [`DEFAULT_CONVERSATION_KEYS`] apply. An empty list keeps the
/// defaults.
pub fn set_conversation_keys(keys: Vec<String>) {
    if !keys.is_empty() {
        let _ = CONVERSATION_KEYS.set(keys);
    }
}

/// The full attribute names read for the conversation id, in order.
fn conversation_attributes() -> Vec<String> {
    match CONVERSATION_KEYS.get() {
        Some(keys) => keys
            .iter()
            .map(|k| format!("ai.telemetry.metadata.{k}"))
            .collect(),
        None => DEFAULT_CONVERSATION_KEYS
            .iter()
            .map(|k| format!("ai.telemetry.metadata.{k}"))
            .collect(),
    }
}

/// True when a span is one of the SDK's `ai.*` spans.
pub fn is_vercel_span(attrs: &Attributes<'_>) -> bool {
    attrs.get(OPERATION_ID).is_some()
}

/// True for a model-request fact of an `ai.*` span (`ai.generateText.doGenerate`,
/// `ai.streamText.doStream`): v7's `LegacyOpenTelemetry` (and `streamText` in some versions)
/// nests the step's `ai.toolCall` spans in it, so they belong to the run above it.
pub fn nests_tool_calls(fact: &SpanFact) -> bool {
    fact.kind == FactKind::ModelRequest
        && fact.name.starts_with("ai.")
        && (fact.name.ends_with(".doGenerate") || fact.name.ends_with(".doStream"))
}

/// The kind of an `ai.*` span, from its operation id (or, without one, its name).
fn classify(span: &Span, attrs: &Attributes<'_>) -> Option<FactKind> {
    let op = attrs
        .str(&[OPERATION_ID])
        .unwrap_or_else(|| span.name.clone());
    if RUN_OPERATIONS.contains(&op.as_str()) {
        Some(FactKind::AgentRun)
    } else if op == "ai.toolCall" {
        Some(FactKind::ToolCall)
    } else if op.ends_with(".doGenerate") || op.ends_with(".doStream") {
        Some(FactKind::ModelRequest)
    } else {
        None
    }
}

/// Interprets one `ai.*` span; message bodies are cut to `cut`'s depth. Spans that are not a
/// run, a model request or a tool call (embeddings, for one) give `None`.
///
/// With a memo, a model request's `ai.prompt.messages` that extends the last prompt of its run
/// maps, hashes and parses only the new messages (see [`PrefixMemo`]); the result is the same
/// with or without it.
pub fn interpret_span(
    span: &Span,
    memo: Option<&PrefixMemo>,
    cut: &mut Cut,
) -> Option<Interpreted> {
    let attrs = Attributes(&span.attributes);
    let kind = classify(span, &attrs)?;
    let mut fact = SpanFact::of_finished_span(kind, span, error_text(span, &attrs))?;
    let keys = conversation_attributes();
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    fact.conversation_id = attrs.str(&keys);
    fact.agent_name = attrs.str(&["ai.telemetry.functionId"]);

    let mut messages = Vec::new();
    let mut shared = SharedMessages::default();
    match kind {
        FactKind::AgentRun | FactKind::Group => {}
        FactKind::ToolCall => {
            fact.tool_name = attrs.str(&["ai.toolCall.name"]);
            fact.tool_call_id = attrs.str(&["ai.toolCall.id"]);
            fact.arguments = json_or_text(&attrs, &["ai.toolCall.args", "ai.toolCall.input"]);
            fact.result = json_or_text(&attrs, &["ai.toolCall.result", "ai.toolCall.output"]);
        }
        FactKind::ModelRequest => {
            let memoised = memo.and_then(|memo| read_prompt_memoised(memo, &attrs, &fact, cut));
            if let Some(read) = memoised {
                shared = use_memoised_prompt(read, &mut fact, &mut messages);
            }
            read_model_request(&attrs, &mut fact, &mut messages, cut);
        }
    }
    let mut interpreted = Interpreted::keyed(fact, messages);
    interpreted.shared = shared;
    Some(interpreted)
}

/// `ai.prompt.messages` given as a JSON string, read through the memo (keyed by the run above
/// the model request), each element mapped to a canonical message; `None` when it is not a
/// string, not a non-empty array, holds an element without a role, or maps to a message nested
/// deeper than `cut`'s depth (the caller reads it in full, which gives the same result or the
/// reason it is unusable).
fn read_prompt_memoised(
    memo: &PrefixMemo,
    attrs: &Attributes<'_>,
    fact: &SpanFact,
    cut: &Cut,
) -> Option<MemoRead> {
    let Some(Any::StringValue(raw)) = attrs.get(PROMPT).and_then(|v| v.value.as_ref()) else {
        return None;
    };
    let run_span = fact.parent_span_id.as_deref().unwrap_or(&fact.span_id);
    let key = format!("{}-{run_span}\0{PROMPT}", fact.trace_id);
    let depth = cut.max_depth();
    memo.read_mapped(&key, raw, |item| {
        let message = prompt_message(&item)?;
        within_depth(&message, depth).then_some(message)
    })
}

/// Puts a prompt read through the memo on `fact` as [`prompt_history`] would: the parts of its
/// leading system messages are the system instructions, the other messages the input. Without
/// leading system messages the bodies stay shared with the memo (returned, by position of the
/// input); otherwise the input's bodies are copied into `bodies`.
fn use_memoised_prompt(
    read: MemoRead,
    fact: &mut SpanFact,
    bodies: &mut Vec<(crate::domain::MessageHash, Value)>,
) -> SharedMessages {
    let leading = read
        .messages
        .iter()
        .take_while(|m| m.body.get("role").and_then(Value::as_str) == Some("system"))
        .count();
    if leading == 0 {
        fact.input = Some(read.references);
        return read.messages;
    }
    let system: Vec<Value> = read
        .messages
        .iter()
        .take(leading)
        .filter_map(|m| m.body.get("parts").and_then(Value::as_array))
        .flatten()
        .cloned()
        .collect();
    if !system.is_empty() {
        fact.system_instructions = Some(Value::Array(system));
    }
    bodies.extend(
        read.messages
            .iter()
            .skip(leading)
            .map(|m| (m.reference.hash, m.body.clone())),
    );
    fact.input = Some(Arc::new(read.references[leading..].to_vec()));
    SharedMessages::default()
}

/// A model request's history, response, model and usage.
fn read_model_request(
    attrs: &Attributes<'_>,
    fact: &mut SpanFact,
    bodies: &mut Vec<(crate::domain::MessageHash, Value)>,
    cut: &mut Cut,
) {
    // Read through the memo already when the input is set.
    let prompt = match fact.input {
        Some(_) => None,
        None => attrs.json(PROMPT),
    };
    match prompt {
        None => {}
        Some(Err(reason)) => fact.content_problem = Some(reason),
        Some(Ok(Value::Array(items))) => match prompt_history(&items) {
            Ok((system, history)) => {
                if !system.is_empty() {
                    fact.system_instructions = Some(Value::Array(system));
                }
                fact.input = Some(Arc::new(store_bodies(history, bodies, cut)));
            }
            Err(reason) => fact.content_problem = Some(reason),
        },
        Some(Ok(_)) => {
            fact.content_problem = Some("ai.prompt.messages is not an array of messages".into())
        }
    }
    if let Some(message) = response_message(attrs) {
        let first = bodies.len();
        fact.output = Some(store_bodies(vec![message], bodies, cut));
        fact.requested_calls = bodies[first..]
            .iter()
            .flat_map(|(_, m)| requested_calls(m))
            .collect();
    }
    if fact.input.is_none() && fact.content_problem.is_none() && fact.error.is_none() {
        fact.content_problem = Some(
            "model request spans carry no prompt (experimental_telemetry.recordInputs is off)"
                .into(),
        );
    }
    fact.model = attrs.str(&["ai.response.model", "ai.model.id", "gen_ai.request.model"]);
    fact.provider = attrs.str(&["ai.model.provider", "gen_ai.system"]);
    fact.input_tokens = attrs
        .int(&[
            "ai.usage.inputTokens",
            "ai.usage.promptTokens",
            "gen_ai.usage.input_tokens",
        ])
        .and_then(|v| u64::try_from(v).ok());
    fact.output_tokens = attrs
        .int(&[
            "ai.usage.outputTokens",
            "ai.usage.completionTokens",
            "gen_ai.usage.output_tokens",
        ])
        .and_then(|v| u64::try_from(v).ok());
}

/// A JSON attribute, or its text when it is not JSON (a plain string result).
fn json_or_text(attrs: &Attributes<'_>, keys: &[&str]) -> Option<Value> {
    keys.iter().find_map(|k| {
        Some(match attrs.json(k)? {
            Ok(v) => v,
            Err(_) => Value::String(attrs.str(&[k])?),
        })
    })
}

/// The provider prompt as (system instruction parts, canonical messages): the system messages
/// before the first other message become instructions; a later system message stays in place.
fn prompt_history(items: &[Value]) -> Result<(Vec<Value>, Vec<Value>), String> {
    let mut system = Vec::new();
    let mut history = Vec::with_capacity(items.len());
    for item in items {
        let role = item
            .get("role")
            .and_then(Value::as_str)
            .ok_or("ai.prompt.messages holds a message without a role")?;
        let parts = content_parts(role, item.get("content"));
        if role == "system" && history.is_empty() {
            system.extend(parts);
            continue;
        }
        history.push(json!({"role": role, "parts": parts}));
    }
    Ok((system, history))
}

/// One provider prompt message as a canonical message (what [`prompt_history`] makes of it);
/// `None` without a role.
fn prompt_message(item: &Value) -> Option<Value> {
    let role = item.get("role")?.as_str()?;
    Some(json!({"role": role, "parts": content_parts(role, item.get("content"))}))
}

/// The canonical parts of one message's content (a string is one text part).
fn content_parts(role: &str, content: Option<&Value>) -> Vec<Value> {
    match content {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => vec![json!({"type": "text", "content": s})],
        Some(Value::Array(parts)) => parts.iter().map(|p| part(role, p)).collect(),
        Some(other) => vec![json!({"type": "text", "content": other.to_string()})],
    }
}

/// One provider prompt part as a canonical part. Parts of a type stepline does not know are
/// kept as they are.
fn part(role: &str, p: &Value) -> Value {
    let field = |k: &str| p.get(k).cloned().unwrap_or(Value::Null);
    match p.get("type").and_then(Value::as_str).unwrap_or("") {
        "text" => json!({"type": "text", "content": field("text")}),
        "reasoning" => json!({"type": "reasoning", "content": field("text")}),
        "tool-call" => json!({
            "type": "tool_call",
            "id": field("toolCallId"),
            "name": field("toolName"),
            "arguments": arguments(p.get("input").or_else(|| p.get("args"))),
        }),
        "tool-result" => tool_result(p),
        "file" | "image" => media(p),
        _ if role == "tool" && p.get("toolCallId").is_some() => tool_result(p),
        _ => p.clone(),
    }
}

/// Tool-call arguments: JSON text is parsed; an object stays as it is.
fn arguments(value: Option<&Value>) -> Value {
    match value {
        None | Some(Value::Null) => json!({}),
        Some(Value::String(s)) => serde_json::from_str(s).unwrap_or_else(|_| json!(s)),
        Some(v) => v.clone(),
    }
}

/// A `tool-result` part: v5+'s `output: {type, value}` (an `error-*` output marks the call
/// failed) or v4's `result`.
fn tool_result(p: &Value) -> Value {
    let mut out = Map::new();
    out.insert("type".into(), json!("tool_call_response"));
    out.insert(
        "id".into(),
        p.get("toolCallId").cloned().unwrap_or(json!("")),
    );
    if let Some(name) = p.get("toolName") {
        out.insert("name".into(), name.clone());
    }
    let (response, failed) = match p.get("output") {
        Some(Value::Object(o)) if o.contains_key("type") => {
            let kind = o.get("type").and_then(Value::as_str).unwrap_or("");
            let value = o.get("value").cloned().unwrap_or(Value::Null);
            let value = match kind {
                "execution-denied" => o.get("reason").cloned().unwrap_or(json!("denied")),
                _ => value,
            };
            (
                value,
                kind.starts_with("error-") || kind == "execution-denied",
            )
        }
        Some(other) => (other.clone(), false),
        None => (
            p.get("result").cloned().unwrap_or(Value::Null),
            p.get("isError").and_then(Value::as_bool).unwrap_or(false),
        ),
    };
    out.insert("response".into(), response);
    if failed {
        out.insert("outcome".into(), json!("failed"));
    }
    Value::Object(out)
}

/// A `file` (or v4 `image`) part: base64 data as a `blob`, a URL as a `uri`.
fn media(p: &Value) -> Value {
    let data = p.get("data").or_else(|| p.get("image"));
    let mime = p
        .get("mediaType")
        .or_else(|| p.get("mimeType"))
        .and_then(Value::as_str);
    let modality = match mime {
        Some(m) if m.starts_with("image/") => "image",
        Some(m) if m.starts_with("audio/") => "audio",
        Some(m) if m.starts_with("video/") => "video",
        _ if p.get("image").is_some() => "image",
        _ => "document",
    };
    let mut out = Map::new();
    match data.and_then(Value::as_str) {
        Some(s) if s.starts_with("http://") || s.starts_with("https://") => {
            out.insert("type".into(), json!("uri"));
            out.insert("modality".into(), json!(modality));
            out.insert("uri".into(), json!(s));
        }
        Some(s) => {
            out.insert("type".into(), json!("blob"));
            out.insert("modality".into(), json!(modality));
            out.insert("content".into(), json!(s));
        }
        None => return p.clone(),
    }
    if let Some(m) = mime {
        out.insert("mime_type".into(), json!(m));
    }
    if let Some(name) = p.get("filename") {
        out.insert("filename".into(), name.clone());
    }
    Value::Object(out)
}

/// The assistant message a model request produced: reasoning, text, then tool calls. `None`
/// when the span carries no response content.
fn response_message(attrs: &Attributes<'_>) -> Option<Value> {
    let mut parts = Vec::new();
    if let Some(r) = attrs
        .str(&["ai.response.reasoning"])
        .filter(|r| !r.is_empty())
    {
        parts.push(json!({"type": "reasoning", "content": r}));
    }
    if let Some(t) = attrs.str(&["ai.response.text"]).filter(|t| !t.is_empty()) {
        parts.push(json!({"type": "text", "content": t}));
    }
    if let Some(Ok(Value::Array(calls))) = attrs.json("ai.response.toolCalls") {
        for call in &calls {
            parts.push(json!({
                "type": "tool_call",
                "id": call.get("toolCallId").cloned().unwrap_or(json!("")),
                "name": call.get("toolName").cloned().unwrap_or(json!("")),
                "arguments": arguments(call.get("input").or_else(|| call.get("args"))),
            }));
        }
    }
    if let Some(o) = attrs.str(&["ai.response.object"]) {
        parts.push(json!({"type": "text", "content": o}));
    }
    let said = attrs.get("ai.response.text").is_some();
    (said || !parts.is_empty()).then(|| json!({"role": "assistant", "parts": parts}))
}

/// Spans recorded from the real packages (tests/fixtures/vercel-ai; see record-v7.mjs and
/// tests/node/vercel-ai/scenario.mjs for how).
#[cfg(test)]
pub(crate) mod fixtures {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::trace::v1::Span;
    use prost::Message;

    /// `ai` 6.0.325: one generateText and one streamText call (two traces), each two parallel
    /// tool calls, a failing tool, then text; tool spans are siblings of the model requests.
    pub const V6: &[u8] =
        include_bytes!("../../tests/fixtures/vercel-ai/ai-6.0.325-generate-stream.pb");
    /// `ai` 7.0.173 with `@ai-sdk/otel` 1.0.173 `LegacyOpenTelemetry`: the same generateText
    /// call; tool spans nest in the model requests.
    pub const V7_LEGACY: &[u8] =
        include_bytes!("../../tests/fixtures/vercel-ai/ai-7.0.173-otel-1.0.173-legacy.pb");
    /// `ai` 7.0.173 with `@ai-sdk/otel` 1.0.173 `OpenTelemetry`: GenAI spans `invoke_agent` →
    /// `step {n}` → `chat` / `execute_tool`.
    pub const V7_GENAI: &[u8] =
        include_bytes!("../../tests/fixtures/vercel-ai/ai-7.0.173-otel-1.0.173-genai.pb");

    /// The spans of a recorded export request, in export order.
    pub fn spans(recorded: &[u8]) -> Vec<Span> {
        let request = ExportTraceServiceRequest::decode(recorded).unwrap();
        request
            .resource_spans
            .into_iter()
            .flat_map(|r| r.scope_spans)
            .flat_map(|s| s.spans)
            .collect()
    }
}

#[cfg(test)]
#[path = "vercel_ai_tests.rs"]
mod tests;
