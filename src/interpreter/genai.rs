//! The OTel GenAI convention, as Pydantic AI 2.x (instrumentation versions 2 to 6) and other
//! GenAI-instrumented producers emit it: which spans are agent runs, model requests and tool
//! calls, and where their ids, messages and results live.
//!
//! Google ADK (schema v2): `invoke_workflow` groups one invocation and is not interpreted (it
//! has no parent run to group under, and its `invoke_agent` child is the run); `invoke_agent` is
//! the run, `generate_content` a model request, `execute_tool` a tool call. An agent whose span
//! is nested in another agent's span (a sub-agent, an `AgentTool`) is a delegate run of it, as
//! for every producer. The `execute_tool (merged)` span ADK adds for parallel calls is not a
//! tool call and is passed by. Microsoft Agent Framework writes the convention as it is; AG2
//! writes OpenAI Chat message dicts in the message attributes, which [`super::chat_shape`] maps.

use std::sync::Arc;

use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::trace::v1::{status::StatusCode, Span};
use serde_json::{Map, Value};

use super::adk;
use super::attributes::{any_to_json, hex_id, Attributes};
use super::budget::{within_depth, Cut};
use super::chat_shape;
use super::events::{is_legacy_event, map_details, map_event, Slot};
use super::fact::{FactKind, Interpreted, RequestedCall, SpanFact};
use super::prefix_memo::{MemoRead, PrefixMemo, SharedMessages};
use crate::domain::{MessageHash, MessageRef};

const MODEL_OPERATIONS: &[&str] = &["chat", "generate_content", "text_completion"];

/// Operations of spans that group a run's model requests and tool calls without being a run
/// (Strands' event-loop cycle; the Vercel AI SDK v7 `@ai-sdk/otel` `step {n}` span).
const GROUP_OPERATIONS: &[&str] = &["execute_event_loop_cycle", "agent_step"];

use super::events::DETAILS_EVENT;

/// The tool name of Google ADK's `execute_tool (merged)` span, which stands for parallel calls
/// that have spans of their own.
const ADK_MERGED_TOOLS: &str = "(merged tools)";

/// Interprets one span. Spans that are not agent runs, model requests or tool calls give `None`.
/// With a memo, a model request's input history reuses what the last input of its run left
/// there (see [`PrefixMemo`]); the result is the same with or without it. Message bodies are
/// cut to `cut`'s depth before they are hashed.
pub fn interpret_span(
    span: &Span,
    memo: Option<&PrefixMemo>,
    cut: &mut Cut,
) -> Option<Interpreted> {
    // Content written as `gen_ai.client.inference.operation.details` events reads like attributes.
    let merged: Vec<KeyValue>;
    let attrs = if span.events.iter().any(|e| e.name == DETAILS_EVENT) {
        let mut all = span.attributes.clone();
        // Keys already present: the span's own first, then the events' in order.
        let mut present: std::collections::HashSet<&str> =
            span.attributes.iter().map(|a| a.key.as_str()).collect();
        for event in span.events.iter().filter(|e| e.name == DETAILS_EVENT) {
            for kv in &event.attributes {
                if present.insert(kv.key.as_str()) {
                    all.push(kv.clone());
                }
            }
        }
        merged = all;
        Attributes(&merged)
    } else {
        Attributes(&span.attributes)
    };
    let kind = classify(span, &attrs)?;
    let trace_id = hex_id(&span.trace_id);
    let mut span_id = hex_id(&span.span_id);
    if trace_id.len() != 32 || span_id.len() != 16 {
        return None;
    }
    let mut parent_span_id = (span.parent_span_id.len() == 8).then(|| hex_id(&span.parent_span_id));
    // A Logfire pending span stands for the real span (its parent) from the moment it started.
    let pending = attrs.text("logfire.span_type") == Some("pending_span");
    if pending {
        if !matches!(kind, FactKind::AgentRun | FactKind::ToolCall) {
            return None;
        }
        span_id = parent_span_id?;
        parent_span_id = attrs
            .str(&["logfire.pending_parent_id"])
            .filter(|p| p.len() == 16 && p.bytes().all(|b| b.is_ascii_hexdigit()))
            .map(|p| p.to_ascii_lowercase())
            .filter(|p| p != "0000000000000000");
    }

    let mut fact = SpanFact::new(kind, trace_id, span_id, span.name.clone());
    fact.parent_span_id = parent_span_id;
    fact.start_ns = span.start_time_unix_nano;
    fact.end_ns = if pending {
        span.start_time_unix_nano
    } else {
        span.end_time_unix_nano.max(span.start_time_unix_nano)
    };
    fact.pending = pending;
    fact.error = error_text(span, &attrs);
    fact.agent_name = attrs.str(&["gen_ai.agent.name", "agent_name"]);
    fact.agent_call_id = attrs.str(&["gen_ai.agent.call.id"]);
    fact.conversation_id = attrs.str(&[
        "gen_ai.conversation.id",
        "session.id",
        "traceloop.association.properties.session_id",
    ]);

    let mut messages = Vec::new();
    let mut shared = SharedMessages::default();
    match kind {
        FactKind::Group => {}
        _ if pending => {
            fact.tool_name = attrs.str(&["gen_ai.tool.name", "tool_name"]);
            fact.tool_call_id = attrs.str(&["gen_ai.tool.call.id", "tool_call_id"]);
            fact.arguments = attrs.loose_json(&["gen_ai.tool.call.arguments", "tool_arguments"]);
        }
        FactKind::AgentRun => {
            let key = "pydantic_ai.all_messages";
            // The whole conversation: the last model request's input (memoised under this
            // run's key) and its output. Read through the memo when it extends that input; its
            // bodies stay shared with the model requests' (never copied), and the memo forgets
            // the finished run.
            let memo_key = history_key(&fact.trace_id, &fact.span_id);
            let depth = cut.max_depth();
            let read = memo.and_then(|memo| {
                let Some(Any::StringValue(raw)) = attrs.get(key)?.value.as_ref() else {
                    return None;
                };
                memo.read_last(&memo_key, raw, |item| {
                    is_message(item) && within_depth(item, depth)
                })
            });
            fact.all_messages = match read {
                Some(read) => {
                    shared = read.messages;
                    Some(Arc::unwrap_or_clone(read.references))
                }
                None => read_messages(&attrs, key, &mut fact, &mut messages, cut),
            };
            fact.system_instructions = read_instructions(&attrs);
        }
        FactKind::ModelRequest => {
            let key = "gen_ai.input.messages";
            let memo_key = history_key(
                &fact.trace_id,
                fact.parent_span_id.as_deref().unwrap_or(&fact.span_id),
            );
            let depth = cut.max_depth();
            // ADK's response ids are repaired against the calls before them (see `adk`), which
            // needs the whole history: its inputs do not go through the memo.
            let adk = adk::is_adk(span.attributes.iter().map(|kv| kv.key.as_str()));
            let memo = memo.filter(|_| !adk);
            match memo.and_then(|memo| read_memoised(memo, &memo_key, &attrs, key, depth)) {
                Some(read) => {
                    fact.input = Some(read.references);
                    shared = read.messages;
                }
                None if adk => {
                    fact.input = read_messages_with(
                        &attrs,
                        key,
                        &mut fact,
                        &mut messages,
                        cut,
                        adk::repair_response_ids,
                    )
                    .map(Arc::new);
                }
                None => {
                    fact.input =
                        read_messages(&attrs, key, &mut fact, &mut messages, cut).map(Arc::new);
                }
            }
            fact.output = read_messages(
                &attrs,
                "gen_ai.output.messages",
                &mut fact,
                &mut messages,
                cut,
            );
            if fact.input.is_none() && fact.output.is_none() {
                read_legacy_events(span, &mut fact, &mut messages, cut);
            }
            if fact.output.is_some() {
                let first_output = messages.len() - fact.output.as_ref().map_or(0, Vec::len);
                fact.requested_calls = messages[first_output..]
                    .iter()
                    .flat_map(|(_, m)| requested_calls(m))
                    .collect();
            }
            super::mastra::note_missing_input(&attrs, &mut fact);
            if fact.input.is_none() && fact.content_problem.is_none() && fact.error.is_none() {
                fact.content_problem = Some(
                    "model request spans carry no message content (content capture is off)".into(),
                );
            }
            if fact.system_instructions.is_none() {
                fact.system_instructions = read_instructions(&attrs);
            }
            fact.model = attrs.str(&["gen_ai.response.model", "gen_ai.request.model"]);
            fact.provider = attrs.str(&["gen_ai.provider.name", "gen_ai.system"]);
            (fact.input_tokens, fact.output_tokens) = usage_tokens(&attrs);
        }
        FactKind::ToolCall => {
            fact.tool_name = attrs.str(&["gen_ai.tool.name", "tool_name"]);
            fact.tool_call_id = attrs.str(&["gen_ai.tool.call.id", "tool_call_id"]);
            fact.arguments = attrs.loose_json(&["gen_ai.tool.call.arguments", "tool_arguments"]);
            fact.result = attrs.loose_json(&["gen_ai.tool.call.result", "tool_response"]);
            super::langchain::unwrap_genai_tool(&mut fact);
            if fact.arguments.is_none() || fact.result.is_none() {
                read_legacy_events(span, &mut fact, &mut messages, cut);
            }
            fact.idempotency_key =
                attrs.str(&["gen_ai.tool.call.idempotency_key", "idempotency_key"]);
            if let Some(cause) = attrs.str(&["pydantic_ai.tool.retry.cause"]) {
                let mut retry = serde_json::Map::new();
                retry.insert("cause".into(), Value::String(cause));
                for (key, name) in [
                    ("pydantic_ai.tool.retry.attempt", "attempt"),
                    ("pydantic_ai.tool.retry.max_retries", "max_retries"),
                ] {
                    if let Some(v) = attrs.int(&[key]) {
                        retry.insert(name.into(), Value::from(v));
                    }
                }
                fact.retry = Some(Value::Object(retry));
            }
            fact.deferral = attrs
                .str(&["pydantic_ai.tool.deferral.name"])
                .and_then(|n| crate::domain::InteractionKind::of_deferral(&n));
        }
    }

    // Model requests and tool calls are children of the agent-run span.
    let mut interpreted = Interpreted::keyed(fact, messages);
    interpreted.shared = shared;
    Some(interpreted)
}

/// The memo key of the input histories of the model requests under `run_span_id` (and of the
/// whole conversation of that agent run).
fn history_key(trace_id: &str, run_span_id: &str) -> String {
    format!("{trace_id}-{run_span_id}\0gen_ai.input.messages")
}

/// A message-list attribute given as a JSON string, read through the memo; `None` when it is
/// not a string or not a non-empty array of messages, or when a message is nested deeper than
/// `depth` (the caller reads it in full, which gives the same messages, cut, or the reason they
/// are unusable).
fn read_memoised(
    memo: &PrefixMemo,
    memo_key: &str,
    attrs: &Attributes<'_>,
    key: &str,
    depth: usize,
) -> Option<MemoRead> {
    let Some(Any::StringValue(raw)) = attrs.get(key)?.value.as_ref() else {
        return None;
    };
    memo.read(memo_key, raw, |item| {
        is_message(item) && within_depth(item, depth)
    })
}

/// Whether a JSON value is a message in the canonical shape (a role string and a parts array).
fn is_message(item: &Value) -> bool {
    item.get("role").map(Value::is_string).unwrap_or(false)
        && item.get("parts").map(Value::is_array).unwrap_or(false)
}

/// Fills a fact's content from legacy GenAI span events (Strands' default mode, older
/// instrumentations). Only slots the attributes left empty are filled.
fn read_legacy_events(
    span: &Span,
    fact: &mut SpanFact,
    bodies: &mut Vec<(MessageHash, Value)>,
    cut: &mut Cut,
) {
    let from_span_events = span
        .events
        .iter()
        .filter(|e| is_legacy_event(&e.name))
        .map(|event| {
            let body: Map<String, Value> = event
                .attributes
                .iter()
                .map(|kv| {
                    let v = kv.value.as_ref().map(any_to_json).unwrap_or(Value::Null);
                    (kv.key.clone(), v)
                })
                .collect();
            (event.name.clone(), body)
        });
    // Pydantic AI 1.x, instrumentation version 1: the events as a JSON list in `events`.
    let attrs = Attributes(&span.attributes);
    let from_attribute: Vec<(String, Map<String, Value>)> = match attrs.json("events") {
        None => Vec::new(),
        Some(Err(reason)) => {
            fact.content_problem.get_or_insert(reason);
            return;
        }
        Some(Ok(Value::Array(items))) => items
            .into_iter()
            .filter_map(|item| match item {
                Value::Object(mut body) => {
                    let name = body.remove("event.name")?;
                    Some((name.as_str()?.to_string(), body))
                }
                _ => None,
            })
            .collect(),
        Some(Ok(_)) => Vec::new(),
    };
    let events: Vec<(String, Map<String, Value>)> =
        from_span_events.chain(from_attribute).collect();
    apply_legacy_events(&events, fact, bodies, cut);
}

/// Fills a fact's content from legacy events, given in their order (name, body). Message
/// bodies are cut to `cut`'s depth.
pub(crate) fn apply_legacy_events(
    events: &[(String, Map<String, Value>)],
    fact: &mut SpanFact,
    bodies: &mut Vec<(MessageHash, Value)>,
    cut: &mut Cut,
) {
    let on_tool = fact.kind == FactKind::ToolCall;
    let (mut input, mut output, mut system) = (Vec::new(), Vec::new(), Vec::new());
    let mut details_seen = false;
    for (name, body) in events {
        if name == DETAILS_EVENT {
            details_seen = true;
            if on_tool {
                continue;
            }
            match map_details(body) {
                Ok(mut details) => {
                    if adk::is_adk(body.keys()) {
                        adk::repair_response_ids(&mut details.input);
                    }
                    input.extend(details.input);
                    output.extend(details.output);
                    if let Some(Value::Array(p)) = details.system {
                        system.extend(p);
                    }
                }
                Err(reason) => {
                    fact.content_problem.get_or_insert(reason);
                    return;
                }
            }
            continue;
        }
        match map_event(name, body, on_tool) {
            Ok(Some(Slot::Input(m))) => input.push(m),
            Ok(Some(Slot::Output(m))) => output.push(m),
            Ok(Some(Slot::System(parts))) => {
                if let Value::Array(p) = parts {
                    system.extend(p);
                }
            }
            Ok(Some(Slot::ToolArguments(args, id))) => {
                fact.arguments.get_or_insert(args);
                if fact.tool_call_id.is_none() {
                    fact.tool_call_id = id;
                }
            }
            Ok(Some(Slot::ToolResult(result))) => {
                fact.result.get_or_insert(result);
            }
            Ok(None) => {}
            Err(reason) => {
                fact.content_problem.get_or_insert(reason);
                return;
            }
        }
    }
    if on_tool {
        return;
    }
    if !system.is_empty() && fact.system_instructions.is_none() {
        fact.system_instructions = Some(Value::Array(system));
    }
    let no_messages = input.is_empty() && output.is_empty();
    if !input.is_empty() {
        fact.input = Some(Arc::new(store_bodies(input, bodies, cut)));
    }
    if !output.is_empty() {
        fact.output = Some(store_bodies(output, bodies, cut));
    }
    if details_seen && no_messages && fact.input.is_none() {
        fact.content_problem.get_or_insert_with(|| {
            format!(
                "{DETAILS_EVENT} carries no messages, only tool definitions (content capture is \
                 off: OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT)"
            )
        });
    }
}

/// Cuts message bodies to `cut`'s depth, then hashes and collects them; their references.
pub(crate) fn store_bodies(
    items: Vec<Value>,
    bodies: &mut Vec<(MessageHash, Value)>,
    cut: &mut Cut,
) -> Vec<MessageRef> {
    items
        .into_iter()
        .map(|mut item| {
            cut.apply("message content", &mut item);
            let reference = MessageRef::of(&item);
            bodies.push((reference.hash, item));
            reference
        })
        .collect()
}

/// The tool calls of one output message.
pub(crate) fn requested_calls(message: &Value) -> Vec<RequestedCall> {
    message
        .get("parts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|p| p.get("type").and_then(Value::as_str) == Some("tool_call"))
        .map(|p| RequestedCall {
            id: p
                .get("id")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            name: p
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            arguments: p.get("arguments").cloned(),
        })
        .collect()
}

fn classify(span: &Span, attrs: &Attributes<'_>) -> Option<FactKind> {
    if let Some(kind) = super::langchain::genai_kind(span, attrs) {
        return kind;
    }
    // Only string values name an operation (an integer never matches one).
    let op = attrs.text("gen_ai.operation.name");
    if attrs.text("gen_ai.tool.name") == Some(ADK_MERGED_TOOLS) {
        return None;
    }
    match op {
        Some("invoke_agent") => return Some(FactKind::AgentRun),
        Some("execute_tool") => return Some(FactKind::ToolCall),
        Some(op) if MODEL_OPERATIONS.contains(&op) => return Some(FactKind::ModelRequest),
        Some(op) if GROUP_OPERATIONS.contains(&op) => return Some(FactKind::Group),
        Some(op) if super::mastra::is_group_operation(op) => return Some(FactKind::Group),
        _ => {}
    }
    // Pydantic AI instrumentation version 2 names.
    let name = span.name.as_str();
    if name == "agent run" || name.starts_with("invoke_agent ") {
        Some(FactKind::AgentRun)
    } else if name == "running tool" || name.starts_with("execute_tool ") {
        Some(FactKind::ToolCall)
    } else if name.starts_with("chat ") && attrs.get("gen_ai.input.messages").is_some() {
        Some(FactKind::ModelRequest)
    } else {
        None
    }
}

pub(crate) fn error_text(span: &Span, attrs: &Attributes<'_>) -> Option<String> {
    let status = span.status.as_ref()?;
    if status.code != StatusCode::Error as i32 {
        return None;
    }
    let from_event = span
        .events
        .iter()
        .filter(|e| e.name == "exception")
        .find_map(|e| {
            let a = Attributes(&e.attributes);
            let message = a.str(&["exception.message"]);
            let kind = a.str(&["exception.type"]);
            match (kind, message) {
                (Some(k), Some(m)) => Some(format!("{k}: {m}")),
                (None, Some(m)) => Some(m),
                (Some(k), None) => Some(k),
                (None, None) => None,
            }
        });
    Some(
        from_event
            .or_else(|| (!status.message.is_empty()).then(|| status.message.clone()))
            .or_else(|| attrs.str(&["error.type"]))
            .unwrap_or_else(|| "error".into()),
    )
}

/// `gen_ai.system_instructions`: an array of parts, or plain text (Mastra, OpenLLMetry's
/// `create_agent`) given as a JSON string or as the attribute's own string.
fn read_instructions(attrs: &Attributes<'_>) -> Option<Value> {
    let text = |s: &str| serde_json::json!([{"type": "text", "content": s}]);
    match attrs.json("gen_ai.system_instructions")? {
        Ok(Value::String(s)) => Some(text(&s)),
        Ok(v @ (Value::Array(_) | Value::Object(_))) => Some(v),
        Ok(Value::Null) => None,
        Ok(_) | Err(_) => {
            let raw = attrs.str(&["gen_ai.system_instructions"])?;
            // Damaged JSON is not taken for text.
            let t = raw.trim_start();
            (!t.starts_with('[') && !t.starts_with('{') && !raw.is_empty()).then(|| text(&raw))
        }
    }
}

/// Reads a message-list attribute, collecting bodies (cut to `cut`'s depth) into `bodies`.
/// Damaged or malformed content is recorded as the fact's content problem and yields `None`.
fn read_messages(
    attrs: &Attributes<'_>,
    key: &str,
    fact: &mut SpanFact,
    bodies: &mut Vec<(MessageHash, Value)>,
    cut: &mut Cut,
) -> Option<Vec<MessageRef>> {
    read_messages_with(attrs, key, fact, bodies, cut, |_| {})
}

/// [`read_messages`], with `fix` applied to the messages (mapped to the GenAI shape) before
/// they are cut and hashed.
fn read_messages_with(
    attrs: &Attributes<'_>,
    key: &str,
    fact: &mut SpanFact,
    bodies: &mut Vec<(MessageHash, Value)>,
    cut: &mut Cut,
    fix: impl FnOnce(&mut [Value]),
) -> Option<Vec<MessageRef>> {
    let parsed = match attrs.json(key)? {
        Ok(v) => v,
        Err(reason) => {
            fact.content_problem.get_or_insert(reason);
            return None;
        }
    };
    let Value::Array(items) = parsed else {
        fact.content_problem
            .get_or_insert(format!("{key} is not an array of messages"));
        return None;
    };
    let mut items: Vec<Value> = items
        .into_iter()
        .map(|item| {
            if chat_shape::is_chat_message(&item) {
                chat_shape::to_genai(&item)
            } else {
                item
            }
        })
        .collect();
    if !items.iter().all(is_message) {
        fact.content_problem
            .get_or_insert(format!("{key} holds a message without role and parts"));
        return None;
    }
    fix(&mut items);
    let mut refs = Vec::with_capacity(items.len());
    for mut item in items {
        cut.apply("message content", &mut item);
        let reference = MessageRef::of(&item);
        bodies.push((reference.hash, item));
        refs.push(reference);
    }
    Some(refs)
}

/// The GenAI token counts of a model request: `gen_ai.usage.input_tokens` (or the older
/// `prompt_tokens`) and `gen_ai.usage.output_tokens` (or `completion_tokens`).
pub(super) fn usage_tokens(attrs: &Attributes<'_>) -> (Option<u64>, Option<u64>) {
    let count = |keys: &[&str]| attrs.int(keys).and_then(|v| u64::try_from(v).ok());
    (
        count(&["gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens"]),
        count(&[
            "gen_ai.usage.output_tokens",
            "gen_ai.usage.completion_tokens",
        ]),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_fixtures::kv;
    use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
    use opentelemetry_proto::tonic::trace::v1::Status;

    fn test_cut() -> Cut {
        Cut::new(&crate::limits::Limits::default())
    }

    /// A span 2 under span 3 of the fixture trace.
    fn span(name: &str, attrs: Vec<KeyValue>) -> Span {
        crate::test_fixtures::span(2, 3, name, 10, attrs)
    }

    #[test]
    fn model_request_children_key_the_run_by_their_parent() {
        let s = span(
            "chat m",
            vec![
                kv("gen_ai.operation.name", "chat"),
                kv(
                    "gen_ai.input.messages",
                    r#"[{"role":"user","parts":[{"type":"text","content":"hi"}]}]"#,
                ),
                kv(
                    "gen_ai.output.messages",
                    r#"[{"role":"assistant","parts":[{"type":"tool_call","id":"c1","name":"f","arguments":{}}]}]"#,
                ),
            ],
        );
        let i = interpret_span(&s, None, &mut test_cut()).unwrap();
        assert_eq!(i.run_span_id, "0303030303030303");
        assert_eq!(i.fact.kind, FactKind::ModelRequest);
        assert_eq!(i.fact.output.as_ref().unwrap()[0].shape.opens, vec!["c1"]);
        assert_eq!(i.messages.len(), 2);
    }

    #[test]
    fn the_memo_gives_what_a_full_parse_gives() {
        use crate::interpreter::{ResultKey, ToolReturnForm, ToolReturnRole};
        let memo = PrefixMemo::default();
        let mut history =
            vec![serde_json::json!({"role":"user","parts":[{"type":"text","content":"go"}]})];
        let mut shown = None;
        // Tool returns in two forms; the last two requests add no tool return, so the last one
        // is in the memoised prefix (its body shared, not parsed again).
        for k in 0..8 {
            let output = serde_json::json!([{"role":"assistant","parts":[
                {"type":"tool_call","id":format!("c{k}"),"name":"f","arguments":{"k":k}}]}]);
            let s = span(
                "chat m",
                vec![
                    kv("gen_ai.operation.name", "chat"),
                    kv(
                        "gen_ai.input.messages",
                        &Value::Array(history.clone()).to_string(),
                    ),
                    kv("gen_ai.output.messages", &output.to_string()),
                ],
            );
            // Through the interpreter's entry points, which note the tool-return form.
            let plain = crate::interpreter::interpret_span(&s).unwrap();
            let memoised =
                crate::interpreter::interpret_span_with(&s, &memo, &Default::default()).unwrap();
            assert_eq!(plain.fact, memoised.fact);
            assert_eq!(plain.fact.tool_return_form, shown, "step {k}");
            assert_eq!(plain.run_span_id, memoised.run_span_id);
            let bodies = |i: &Interpreted| -> Vec<(MessageHash, Value)> {
                i.bodies().map(|(h, v)| (*h, v.clone())).collect()
            };
            assert_eq!(bodies(&plain), bodies(&memoised));
            assert_eq!(memoised.shared.len(), history.len());
            history.push(output[0].clone());
            let (role, key) = match k {
                0..=2 => ("user", "result"),
                3..=5 => ("tool", "response"),
                _ => {
                    history.push(serde_json::json!({"role":"user","parts":[
                        {"type":"text","content":format!("more {k}")}]}));
                    continue;
                }
            };
            history.push(serde_json::json!({"role":role,"parts":[
                {"type":"tool_call_response","id":format!("c{k}"),key:"ok"}]}));
            shown = Some(if role == "user" {
                ToolReturnForm {
                    role: ToolReturnRole::User,
                    result_key: ResultKey::Result,
                }
            } else {
                ToolReturnForm::default()
            });
        }
        // A damaged history is the same content problem with or without the memo.
        let s = span(
            "chat m",
            vec![
                kv("gen_ai.operation.name", "chat"),
                kv(
                    "gen_ai.input.messages",
                    r#"[{"role":"user","parts":[]}, {"role":"user"}]"#,
                ),
            ],
        );
        assert_eq!(
            interpret_span(&s, None, &mut test_cut()).unwrap(),
            interpret_span(&s, Some(&memo), &mut test_cut()).unwrap()
        );
    }

    #[test]
    fn an_agent_runs_conversation_reuses_its_last_inputs_memo_and_gives_a_full_parse() {
        let memo = PrefixMemo::default();
        let limits = crate::limits::Limits::default();
        let text = |role: &str, content: &str| serde_json::json!({"role": role, "parts": [{"type": "text", "content": content}]});
        let mut history = vec![text("user", "go")];
        let mut last_request = None;
        for k in 0..3 {
            let output = serde_json::json!([{"role":"assistant","parts":[
                {"type":"tool_call","id":format!("c{k}"),"name":"f","arguments":{"k":k}}]}]);
            let request = span(
                "chat m",
                vec![
                    kv("gen_ai.operation.name", "chat"),
                    kv(
                        "gen_ai.input.messages",
                        &Value::Array(history.clone()).to_string(),
                    ),
                    kv("gen_ai.output.messages", &output.to_string()),
                ],
            );
            crate::interpreter::interpret_span_with(&request, &memo, &limits).unwrap();
            last_request = Some(request);
            history.push(output[0].clone());
            history.push(serde_json::json!({"role":"user","parts":[
                {"type":"tool_call_response","id":format!("c{k}"),"result":"ok"}]}));
        }
        history.pop();
        history.push(text("assistant", "done"));
        // The agent-run span (3) above the requests, in the Pydantic AI shape.
        let agent = |all: &str| {
            crate::test_fixtures::span(
                3,
                0,
                "invoke_agent a",
                0,
                vec![
                    kv("gen_ai.operation.name", "invoke_agent"),
                    kv("pydantic_ai.all_messages", all),
                ],
            )
        };
        let key = history_key(
            &hex::encode(crate::test_fixtures::TRACE),
            "0303030303030303",
        );
        let whole = Value::Array(history.clone()).to_string();
        let cases = [
            // Extends the last input.
            whole.clone(),
            // Extends it with something that is not a message: a content problem.
            format!("{}, {{\"role\":\"user\"}}]", &whole[..whole.len() - 1]),
            // Differs from it in an early message.
            whole.replacen("\"go\"", "\"went\"", 1),
            // Not JSON.
            "[{\"role\"".to_string(),
        ];
        for all in cases.iter().map(String::as_str).chain([whole.as_str()]) {
            let plain = crate::interpreter::interpret_span(&agent(all)).unwrap();
            let memoised =
                crate::interpreter::interpret_span_with(&agent(all), &memo, &limits).unwrap();
            // The same fact and bodies; through the memo the bodies stay shared, not copied.
            assert_eq!(
                (&plain.run_span_id, &plain.fact),
                (&memoised.run_span_id, &memoised.fact),
                "{all}"
            );
            let bodies = |i: &Interpreted| -> Vec<(MessageHash, Value)> {
                i.bodies().map(|(h, v)| (*h, v.clone())).collect()
            };
            assert_eq!(bodies(&plain), bodies(&memoised), "{all}");
            assert!(!memo.holds(&key), "the finished run is forgotten");
            // The last request again (a retried delivery) puts its input back in the memo.
            if let Some(request) = &last_request {
                crate::interpreter::interpret_span_with(request, &memo, &limits).unwrap();
                assert!(memo.holds(&key));
            }
            // The final round reads the conversation with nothing memoised.
            if all == cases[3] {
                last_request = None;
                memo.read_last(&key, "", |_| true);
            }
        }
        let plain = crate::interpreter::interpret_span(&agent(&whole)).unwrap();
        assert_eq!(
            plain.fact.all_messages.as_ref().map(Vec::len),
            Some(history.len())
        );
        assert_eq!(plain.messages.len(), history.len());
    }

    #[test]
    fn truncated_json_is_a_content_problem_not_a_failure() {
        let s = span(
            "chat m",
            vec![
                kv("gen_ai.operation.name", "chat"),
                kv(
                    "gen_ai.input.messages",
                    r#"[{"role":"user","parts":[{"type":"te"#,
                ),
            ],
        );
        let i = interpret_span(&s, None, &mut test_cut()).unwrap();
        assert!(i.fact.input.is_none());
        assert!(i.fact.content_problem.unwrap().contains("not valid JSON"));
    }

    #[test]
    fn structured_any_value_messages_are_accepted() {
        use any_value::Value as V;
        let part = AnyValue {
            value: Some(V::KvlistValue(
                opentelemetry_proto::tonic::common::v1::KeyValueList {
                    values: vec![kv("type", "text"), kv("content", "hi")],
                },
            )),
        };
        let message = AnyValue {
            value: Some(V::KvlistValue(
                opentelemetry_proto::tonic::common::v1::KeyValueList {
                    values: vec![
                        kv("role", "user"),
                        KeyValue {
                            key_strindex: 0,
                            key: "parts".into(),
                            value: Some(AnyValue {
                                value: Some(V::ArrayValue(
                                    opentelemetry_proto::tonic::common::v1::ArrayValue {
                                        values: vec![part],
                                    },
                                )),
                            }),
                        },
                    ],
                },
            )),
        };
        let attrs = vec![
            kv("gen_ai.operation.name", "chat"),
            KeyValue {
                key_strindex: 0,
                key: "gen_ai.input.messages".into(),
                value: Some(AnyValue {
                    value: Some(V::ArrayValue(
                        opentelemetry_proto::tonic::common::v1::ArrayValue {
                            values: vec![message],
                        },
                    )),
                }),
            },
        ];
        let i = interpret_span(&span("chat m", attrs), None, &mut test_cut()).unwrap();
        assert_eq!(i.messages[0].1["parts"][0]["content"], "hi");
    }

    #[test]
    fn adk_merged_tool_span_is_passed_by_and_plain_text_instructions_are_read() {
        let merged = span(
            "execute_tool (merged)",
            vec![
                kv("gen_ai.operation.name", "execute_tool"),
                kv("gen_ai.tool.name", "(merged tools)"),
                kv("gen_ai.tool.call.id", "ev-1"),
            ],
        );
        assert!(interpret_span(&merged, None, &mut test_cut()).is_none());
        let workflow = span(
            "invoke_workflow trip",
            vec![kv("gen_ai.operation.name", "invoke_workflow")],
        );
        assert!(interpret_span(&workflow, None, &mut test_cut()).is_none());
        for (raw, want) in [
            ("You add numbers.", Some("You add numbers.")),
            ("\"You add.\"", Some("You add.")),
            ("[{\"type\":\"te", None),
        ] {
            let agent = span(
                "invoke_agent a",
                vec![
                    kv("gen_ai.operation.name", "invoke_agent"),
                    kv("gen_ai.system_instructions", raw),
                ],
            );
            let i = interpret_span(&agent, None, &mut test_cut()).unwrap();
            let got = i.fact.system_instructions.map(|v| v[0]["content"].clone());
            assert_eq!(got, want.map(|w| Value::String(w.into())), "{raw}");
        }
    }

    #[test]
    fn ag2_chat_shaped_messages_are_mapped() {
        let s = span(
            "chat m",
            vec![
                kv("gen_ai.operation.name", "chat"),
                kv(
                    "gen_ai.input.messages",
                    r#"[{"content": "hi", "role": "user"}, {"content": null, "role": "assistant", "tool_calls": [{"id": "call_1", "type": "function", "function": {"arguments": "{\"a\": 1}", "name": "f"}}]}, {"role": "tool", "tool_call_id": "call_1", "content": "2"}]"#,
                ),
                kv(
                    "gen_ai.output.messages",
                    r#"[{"content": "done", "role": "assistant"}]"#,
                ),
            ],
        );
        let i = interpret_span(&s, None, &mut test_cut()).unwrap();
        assert!(
            i.fact.content_problem.is_none(),
            "{:?}",
            i.fact.content_problem
        );
        assert_eq!(i.fact.input.as_ref().unwrap().len(), 3);
        assert_eq!(i.messages[1].1["parts"][0]["arguments"]["a"], 1);
        assert_eq!(i.messages[2].1["parts"][0]["id"], "call_1");
        assert_eq!(i.messages[3].1["parts"][0]["content"], "done");
    }

    #[test]
    fn operation_details_log_records_fill_a_model_request() {
        use serde_json::json;
        let fact = |s: &Span| interpret_span(s, None, &mut test_cut()).unwrap().fact;
        let bare = span(
            "generate_content m",
            vec![kv("gen_ai.operation.name", "generate_content")],
        );
        let body = |v: Value| v.as_object().cloned().unwrap_or_default();
        let details = body(json!({
            "gen_ai.input.messages": [{"role": "user", "parts": [{"type": "text", "content": "go"}]}],
            "gen_ai.output.messages": [{"role": "assistant", "parts": [
                {"type": "tool_call", "id": "f_0", "name": "f", "arguments": {"x": 1}}]}],
            "gen_ai.system_instructions": [{"type": "text", "content": "be brief"}],
        }));
        let mut f = fact(&bare);
        let mut bodies = Vec::new();
        apply_legacy_events(
            &[(DETAILS_EVENT.into(), details)],
            &mut f,
            &mut bodies,
            &mut test_cut(),
        );
        assert_eq!(f.input.as_ref().map(|i| i.len()), Some(1));
        assert_eq!(f.output.as_ref().map(|o| o.len()), Some(1));
        assert_eq!(f.system_instructions.unwrap()[0]["content"], "be brief");
        // Content capture off: only the tool definitions; the reason says so.
        let off = body(json!({"gen_ai.tool.definitions": [{"name": "f", "type": "function"}]}));
        let mut f = fact(&bare);
        f.content_problem = None;
        apply_legacy_events(
            &[(DETAILS_EVENT.into(), off)],
            &mut f,
            &mut Vec::new(),
            &mut test_cut(),
        );
        assert!(f.input.is_none());
        assert!(f.content_problem.unwrap().contains("only tool definitions"));
        // Messages without parts are refused with a reason, not taken.
        let bad = body(json!({"gen_ai.input.messages": [{"role": "user"}]}));
        let mut f = fact(&bare);
        f.content_problem = None;
        apply_legacy_events(
            &[(DETAILS_EVENT.into(), bad)],
            &mut f,
            &mut Vec::new(),
            &mut test_cut(),
        );
        assert!(f.input.is_none());
        assert!(f
            .content_problem
            .unwrap()
            .contains("without role and parts"));
    }

    #[test]
    fn failing_tool_keeps_retry_details_and_error() {
        let mut s = span(
            "execute_tool book",
            vec![
                kv("gen_ai.operation.name", "execute_tool"),
                kv("gen_ai.tool.name", "book"),
                kv("gen_ai.tool.call.id", "c1"),
                kv("gen_ai.tool.call.arguments", r#"{"city":"Paris"}"#),
                kv("gen_ai.tool.call.result", "busy, try again"),
                kv("pydantic_ai.tool.retry.cause", "model_retry"),
            ],
        );
        s.status = Some(Status {
            code: StatusCode::Error as i32,
            message: "busy".into(),
        });
        let i = interpret_span(&s, None, &mut test_cut()).unwrap();
        assert_eq!(i.fact.error.as_deref(), Some("busy"));
        assert_eq!(i.fact.arguments.unwrap()["city"], "Paris");
        assert_eq!(i.fact.result.unwrap(), "busy, try again");
        assert_eq!(i.fact.retry.unwrap()["cause"], "model_retry");
    }
}
