//! LangChain / LangGraph content, as the three routes LangChain users have carry it
//! (OpenInference, OpenLLMetry, LangSmith's OTel mode): LangChain's serialised messages (`lc`
//! constructor objects, `message_to_dict` / `model_dump` dicts) read as Chat Completions messages,
//! the `LLMResult` of a model call, the `ToolMessage` a tool returns (its content, call id and
//! status), OpenLLMetry's wrapper around tool arguments, and which spans are the run.
//!
//! **Which span is the run.** One graph invocation is one run. Its span is an agent span (AGENT in
//! OpenInference when the name contains "agent") or a chain span that is either parent-less (the
//! root of the trace: `LangGraph`, or a named `create_agent` graph) or named like the agent its
//! metadata names (`lc_agent_name`, which `create_agent` sets on its own invocation and
//! everything under it). A chain under a tool or under another graph that meets the second rule
//! is therefore a delegate run (an agent used as a tool, or a `create_agent` graph used as a
//! subgraph); every other chain (`model`, `tools`, plain nodes) only groups its children under the
//! run above it. A nested `StateGraph` that is not a `create_agent` graph stays a group of the run
//! above it: nothing on its span tells it apart from a plain node.
//!
//! Everything here walks only the top levels of values the attribute parser already bounded, so
//! the work is linear in the size of the attribute.

use opentelemetry_proto::tonic::trace::v1::Span;
use serde_json::{json, Map, Value};

use super::attributes::Attributes;
use super::fact::{FactKind, SpanFact};

/// Whether a chain span is a run (see the module docs): parent-less, or named like the agent
/// its metadata names.
pub fn chain_is_run(has_parent: bool, name: &str, lc_agent_name: Option<&str>) -> bool {
    !has_parent || lc_agent_name == Some(name)
}

/// `lc_agent_name` of an OpenInference span's `metadata` attribute (a JSON object).
pub fn metadata_agent_name(attrs: &Attributes<'_>) -> Option<String> {
    match attrs.json("metadata")? {
        Ok(Value::Object(m)) => m.get("lc_agent_name")?.as_str().map(str::to_string),
        _ => None,
    }
}

/// Whether an OpenInference span's `metadata` attribute is LangChain's (it names an agent, a
/// LangGraph node or thread, or a LangChain integration).
pub fn is_langchain_metadata(attrs: &Attributes<'_>) -> bool {
    match attrs.json("metadata") {
        Some(Ok(Value::Object(m))) => m.keys().any(|k| {
            k == "lc_agent_name"
                || k == "thread_id"
                || k.starts_with("langgraph_")
                || k.starts_with("ls_")
        }),
        _ => false,
    }
}

/// The kind of an OpenLLMetry LangChain span that the GenAI reading would get wrong:
/// `Some(Some(Group))` for the inner `{graph}.workflow` `invoke_agent` span and the
/// `execute_task {node}` spans (they group the run's model and tool spans under the outer
/// `invoke_agent`, which is the run), `Some(None)` for the build-time `create_agent` span (not
/// part of any run), `None` for every other span.
pub fn genai_kind(span: &Span, attrs: &Attributes<'_>) -> Option<Option<FactKind>> {
    match attrs.text("gen_ai.operation.name") {
        Some("execute_task") => Some(Some(FactKind::Group)),
        Some("create_agent") => Some(None),
        Some("invoke_agent")
            if attrs.text("traceloop.span.kind") == Some("workflow")
                || span.name.ends_with(".workflow") =>
        {
            // The outermost span has nothing to group under: it stays the run.
            (span.parent_span_id.len() == 8).then_some(Some(FactKind::Group))
        }
        _ => None,
    }
}

/// OpenLLMetry's LangChain tool span: arguments wrapped as `{input_str, tags, metadata, inputs,
/// kwargs: {tool_call_id}}` and the result as `{output: ToolMessage, kwargs}`. Takes the
/// arguments from `inputs`, the call id from `kwargs.tool_call_id` (else the `ToolMessage`), and
/// the result from the message's content (an `error` status fails the call). Other tool spans
/// are left as they are.
pub fn unwrap_genai_tool(fact: &mut SpanFact) {
    if let Some(Value::Object(wrapper)) = &fact.arguments {
        if wrapper.contains_key("inputs")
            && (wrapper.contains_key("input_str") || wrapper.contains_key("kwargs"))
        {
            if fact.tool_call_id.is_none() {
                fact.tool_call_id = wrapper
                    .get("kwargs")
                    .and_then(|k| k.get("tool_call_id"))
                    .and_then(Value::as_str)
                    .map(str::to_string);
            }
            fact.arguments = wrapper.get("inputs").cloned();
        }
    }
    apply_tool_output(fact);
}

/// Replaces a tool fact's result by the content of the `ToolMessage` it holds (OpenInference
/// `{type: "tool", data}`, OpenLLMetry `{output: lc ToolMessage}`, LangSmith `{output: {..}}`),
/// fills the call id from it when the span had none, and fails the call when the message's
/// status is `error` (a tool error LangChain handed back to the model). Any other result is left
/// as it is.
pub fn apply_tool_output(fact: &mut SpanFact) {
    let Some(output) = fact.result.as_ref().and_then(tool_message) else {
        return;
    };
    if fact.tool_call_id.is_none() {
        fact.tool_call_id = output
            .get("tool_call_id")
            .and_then(Value::as_str)
            .filter(|id| !id.is_empty())
            .map(str::to_string);
    }
    let content = output.get("content").cloned().unwrap_or(Value::Null);
    if output.get("status").and_then(Value::as_str) == Some("error") {
        if fact.error.is_none() {
            fact.error = Some(match &content {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            });
        }
        fact.result = None;
    } else {
        fact.result = Some(content);
    }
}

/// The fields of a `ToolMessage` a tool result holds, in any of the three routes' wrappings.
fn tool_message(result: &Value) -> Option<&Map<String, Value>> {
    let inner = result.get("output").unwrap_or(result);
    let fields = message_fields(inner)?;
    (message_type(inner, fields) == Some("tool") && fields.contains_key("content"))
        .then_some(fields)
}

/// The fields of a serialised LangChain message: `kwargs` of an `lc` constructor, `data` of a
/// `message_to_dict` item, else the object itself.
fn message_fields(item: &Value) -> Option<&Map<String, Value>> {
    let obj = item.as_object()?;
    if obj.get("lc").is_some() {
        return obj.get("kwargs")?.as_object();
    }
    if let Some(Value::Object(data)) = obj.get("data") {
        if obj.get("type").is_some_and(Value::is_string) {
            return Some(data);
        }
    }
    Some(obj)
}

/// A serialised message's LangChain type (`human`, `ai`, `system`, `tool`, `chat`, ...).
fn message_type<'a>(item: &'a Value, fields: &'a Map<String, Value>) -> Option<&'a str> {
    if let Some(t) = fields.get("type").and_then(Value::as_str) {
        return Some(t);
    }
    if let Some(t) = item.get("type").and_then(Value::as_str) {
        if t != "constructor" {
            return Some(t);
        }
    }
    // `lc` constructor without `kwargs.type`: the class name.
    let class = item.get("id")?.as_array()?.last()?.as_str()?;
    Some(match class.trim_end_matches("Chunk") {
        "HumanMessage" => "human",
        "AIMessage" => "ai",
        "SystemMessage" => "system",
        "ToolMessage" => "tool",
        "FunctionMessage" => "function",
        "ChatMessage" => "chat",
        _ => return None,
    })
}

/// One serialised LangChain message as a Chat Completions message (`{role, content,
/// tool_calls, tool_call_id, name}`); a message already in that shape is kept. `None` for
/// anything that is not a message.
pub fn chat_message(item: &Value) -> Option<Value> {
    let fields = message_fields(item)?;
    if fields.contains_key("role") && !fields.contains_key("lc") {
        return Some(Value::Object(fields.clone()));
    }
    let role = match message_type(item, fields)? {
        "human" | "user" => "user",
        "ai" | "assistant" => "assistant",
        "system" => "system",
        "developer" => "developer",
        "tool" | "function" => "tool",
        "chat" => fields.get("role").and_then(Value::as_str).unwrap_or("user"),
        _ => return None,
    };
    let mut out = Map::new();
    out.insert("role".into(), json!(role));
    out.insert(
        "content".into(),
        fields.get("content").cloned().unwrap_or(json!("")),
    );
    let calls: Vec<Value> = fields
        .get("tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|c| {
            json!({
                "id": c.get("id").cloned().unwrap_or(json!("")),
                "type": "function",
                "function": {
                    "name": c.get("name").cloned().unwrap_or(json!("")),
                    "arguments": c.get("args").cloned().unwrap_or(json!({})),
                },
            })
        })
        .collect();
    if !calls.is_empty() {
        out.insert("tool_calls".into(), Value::Array(calls));
    }
    for key in ["tool_call_id", "name"] {
        if let Some(v @ Value::String(_)) = fields.get(key) {
            out.insert(key.into(), v.clone());
        }
    }
    Some(Value::Object(out))
}

/// Whether a list holds LangChain's serialised messages (batches of them, or `lc` objects)
/// rather than Chat Completions messages or Responses items.
pub fn holds_lc_messages(items: &[Value]) -> bool {
    items
        .first()
        .is_some_and(|first| first.is_array() || first.get("lc").is_some())
}

/// A model call's input (`{"messages": [[message, ...], ...]}`, a batch per prompt, or one flat
/// list) as Chat Completions messages of the first batch; `None` when it holds none.
pub fn model_input(input: &Value) -> Option<Vec<Value>> {
    let items = input.get("messages")?.as_array()?;
    let batch = match items.first() {
        Some(Value::Array(first)) => first,
        _ => items,
    };
    let messages: Vec<Value> = batch.iter().filter_map(chat_message).collect();
    (!messages.is_empty()).then_some(messages)
}

/// A model call's output (an `LLMResult`: `{generations: [[{message | text}]]}`) as the Chat
/// Completions message of its first generation.
pub fn model_output(output: &Value) -> Option<Value> {
    let first = output
        .get("generations")?
        .as_array()?
        .first()?
        .as_array()?
        .first()?;
    match first.get("message") {
        Some(message) => chat_message(message),
        None => Some(json!({"role": "assistant", "content": first.get("text")?.clone()})),
    }
}

#[cfg(test)]
#[path = "langchain_tests.rs"]
mod tests;
