//! OpenLLMetry (Traceloop): `traceloop.span.kind` decorator spans (`workflow`, `agent`, `task`,
//! `tool`) and the legacy flattened model-request attributes `gen_ai.prompt.{i}.*` /
//! `gen_ai.completion.{i}.*` of the instrumentations before they moved to
//! `gen_ai.input.messages` (model spans with `gen_ai.operation.name` go to the GenAI module).
//!
//! A `workflow` or `agent` span is a run; a `task` groups its children under the span above it;
//! a `tool` span is a tool call (no call id: derivation joins it to the model's calls by name,
//! arguments and order). Model requests belong to the span they are nested in. The session comes
//! from `traceloop.association.properties.session_id`.

use opentelemetry_proto::tonic::trace::v1::Span;
use serde_json::{json, Map, Value};

use super::attributes::Attributes;
use super::budget::Cut;
use super::fact::{FactKind, Interpreted, SpanFact};
use super::genai::{error_text, requested_calls, store_bodies};
use super::openai_items;

/// Conversation id keys, most specific first.
const SESSION_KEYS: &[&str] = &[
    "traceloop.association.properties.session_id",
    "traceloop.association.properties.conversation_id",
    "gen_ai.conversation.id",
    "session.id",
];

/// True when a span carries the legacy flattened prompt or completion attributes.
pub fn has_legacy_content(attrs: &Attributes<'_>) -> bool {
    attrs
        .0
        .iter()
        .any(|kv| kv.key.starts_with("gen_ai.prompt.") || kv.key.starts_with("gen_ai.completion."))
        || attrs.get("llm.request.type").is_some()
}

/// Interprets one OpenLLMetry span; message bodies are cut to `cut`'s depth.
pub fn interpret_span(span: &Span, cut: &mut Cut) -> Option<Interpreted> {
    let attrs = Attributes(&span.attributes);
    let kind = match attrs.str(&["traceloop.span.kind"]).as_deref() {
        Some("workflow") | Some("agent") => FactKind::AgentRun,
        Some("task") => FactKind::Group,
        Some("tool") => FactKind::ToolCall,
        _ if has_legacy_content(&attrs) => FactKind::ModelRequest,
        _ => return None,
    };
    let mut fact = SpanFact::of_finished_span(kind, span, error_text(span, &attrs))?;
    // A root task has nothing above it to group its children under.
    if kind == FactKind::Group && fact.parent_span_id.is_none() {
        return None;
    }
    fact.conversation_id = attrs.str(SESSION_KEYS);

    let mut messages = Vec::new();
    match kind {
        FactKind::Group => {}
        FactKind::AgentRun => {
            fact.agent_name = attrs.str(&[
                "gen_ai.agent.name",
                "traceloop.entity.name",
                "traceloop.workflow.name",
            ]);
        }
        FactKind::ToolCall => {
            fact.agent_name = attrs.str(&["gen_ai.agent.name"]);
            fact.tool_name = attrs.str(&["gen_ai.tool.name", "traceloop.entity.name"]);
            fact.tool_call_id = attrs.str(&["gen_ai.tool.call.id"]);
            fact.arguments = attrs
                .loose_json(&["gen_ai.tool.call.arguments", "traceloop.entity.input"])
                .map(decorator_arguments);
            fact.result = attrs.loose_json(&["gen_ai.tool.call.result", "traceloop.entity.output"]);
        }
        FactKind::ModelRequest => {
            fact.agent_name = attrs.str(&["gen_ai.agent.name"]);
            let prompt: Vec<Value> = attrs
                .indexed("gen_ai.prompt")
                .iter()
                .filter_map(legacy_message)
                .collect();
            let completion: Vec<Value> = attrs
                .indexed("gen_ai.completion")
                .iter()
                .filter_map(legacy_message)
                .collect();
            if !prompt.is_empty() {
                let mapped = openai_items::map_history(&prompt);
                if !mapped.system.is_empty() {
                    fact.system_instructions = Some(Value::Array(mapped.system));
                }
                fact.input = Some(std::sync::Arc::new(store_bodies(
                    mapped.messages,
                    &mut messages,
                    cut,
                )));
            }
            if !completion.is_empty() {
                let mapped = openai_items::map_history(&completion);
                let first = messages.len();
                fact.output = Some(store_bodies(mapped.messages, &mut messages, cut));
                fact.requested_calls = messages[first..]
                    .iter()
                    .flat_map(|(_, m)| requested_calls(m))
                    .collect();
            }
            if fact.input.is_none() && fact.error.is_none() {
                fact.content_problem = Some(
                    "model request spans carry no prompt content (TRACELOOP_TRACE_CONTENT is off)"
                        .into(),
                );
            }
            fact.model = attrs.str(&["gen_ai.response.model", "gen_ai.request.model"]);
            fact.provider = attrs.str(&["gen_ai.provider.name", "gen_ai.system"]);
            fact.input_tokens = attrs
                .int(&[
                    "gen_ai.usage.input_tokens",
                    "gen_ai.usage.prompt_tokens",
                    "llm.usage.prompt_tokens",
                ])
                .and_then(|v| u64::try_from(v).ok());
            fact.output_tokens = attrs
                .int(&[
                    "gen_ai.usage.output_tokens",
                    "gen_ai.usage.completion_tokens",
                    "llm.usage.completion_tokens",
                ])
                .and_then(|v| u64::try_from(v).ok());
        }
    }
    Some(Interpreted::keyed(fact, messages))
}

/// A decorated function's input `{"args": [], "kwargs": {...}}` is its keyword arguments.
fn decorator_arguments(value: Value) -> Value {
    match value {
        Value::Object(mut o)
            if o.len() == 2
                && o.get("args")
                    .and_then(Value::as_array)
                    .is_some_and(Vec::is_empty)
                && o.get("kwargs").is_some_and(Value::is_object) =>
        {
            o.remove("kwargs").unwrap_or(Value::Null)
        }
        other => other,
    }
}

/// One legacy flattened message (`role`, `content`, `tool_call_id`, `tool_calls.{j}.{id,name,
/// arguments}`) as a Chat Completions message. Content holding a JSON list of content blocks is
/// parsed.
fn legacy_message(item: &Value) -> Option<Value> {
    let obj = item.as_object()?;
    let mut out = Map::new();
    out.insert(
        "role".into(),
        obj.get("role").cloned().unwrap_or(json!("user")),
    );
    if let Some(content) = obj.get("content") {
        let content = match content {
            Value::String(s) if s.trim_start().starts_with('[') => {
                serde_json::from_str(s).unwrap_or_else(|_| content.clone())
            }
            other => other.clone(),
        };
        out.insert("content".into(), content);
    }
    if let Some(calls) = obj.get("tool_calls").and_then(Value::as_array) {
        let calls: Vec<Value> = calls
            .iter()
            .map(|c| {
                json!({
                    "id": c.get("id").cloned().unwrap_or(json!("")),
                    "type": "function",
                    "function": {
                        "name": c.get("name").cloned().unwrap_or(json!("")),
                        "arguments": c.get("arguments").cloned().unwrap_or(json!("{}")),
                    }
                })
            })
            .collect();
        out.insert("tool_calls".into(), Value::Array(calls));
    }
    if let Some(id) = obj.get("tool_call_id") {
        out.insert("tool_call_id".into(), id.clone());
    }
    Some(Value::Object(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_fixtures::kv;

    fn test_cut() -> Cut {
        Cut::new(&crate::limits::Limits::default())
    }

    fn span(name: &str, attrs: Vec<opentelemetry_proto::tonic::common::v1::KeyValue>) -> Span {
        crate::test_fixtures::span(2, 3, name, 10, attrs)
    }

    #[test]
    fn legacy_flattened_prompt_and_completion() {
        let s = span(
            "openai.chat",
            vec![
                kv("llm.request.type", "chat"),
                kv("gen_ai.system", "openai"),
                kv("gen_ai.request.model", "gpt-test"),
                kv("gen_ai.usage.prompt_tokens", "12"),
                kv("traceloop.association.properties.session_id", "s1"),
                kv("gen_ai.prompt.0.role", "system"),
                kv("gen_ai.prompt.0.content", "You add."),
                kv("gen_ai.prompt.1.role", "user"),
                kv("gen_ai.prompt.1.content", "2+3?"),
                kv("gen_ai.prompt.2.role", "assistant"),
                kv("gen_ai.prompt.2.tool_calls.0.id", "c0"),
                kv("gen_ai.prompt.2.tool_calls.0.name", "add"),
                kv("gen_ai.prompt.2.tool_calls.0.arguments", r#"{"a":1}"#),
                kv("gen_ai.prompt.3.role", "tool"),
                kv("gen_ai.prompt.3.tool_call_id", "c0"),
                kv("gen_ai.prompt.3.content", "1"),
                kv("gen_ai.completion.0.role", "assistant"),
                kv("gen_ai.completion.0.finish_reason", "tool_calls"),
                kv("gen_ai.completion.0.tool_calls.0.id", "c1"),
                kv("gen_ai.completion.0.tool_calls.0.name", "add"),
                kv(
                    "gen_ai.completion.0.tool_calls.0.arguments",
                    r#"{"a":2,"b":3}"#,
                ),
            ],
        );
        let i = interpret_span(&s, &mut test_cut()).unwrap();
        assert_eq!(i.fact.kind, FactKind::ModelRequest);
        assert_eq!(i.run_span_id, "0303030303030303");
        assert_eq!(i.fact.conversation_id.as_deref(), Some("s1"));
        assert_eq!(i.fact.input.as_ref().unwrap().len(), 3);
        assert_eq!(i.fact.input.as_ref().unwrap()[2].shape.closes, vec!["c0"]);
        assert_eq!(
            i.fact.system_instructions.as_ref().unwrap()[0]["content"],
            "You add."
        );
        assert_eq!(i.fact.requested_calls[0].id, "c1");
        assert_eq!(
            i.fact.requested_calls[0].arguments.as_ref().unwrap()["b"],
            3
        );
        assert_eq!(i.fact.input_tokens, Some(12));
    }

    #[test]
    fn decorator_spans() {
        let tool = span(
            "add.tool",
            vec![
                kv("traceloop.span.kind", "tool"),
                kv("traceloop.entity.name", "add"),
                kv(
                    "traceloop.entity.input",
                    r#"{"args": [], "kwargs": {"a": 2, "b": 3}}"#,
                ),
                kv("traceloop.entity.output", "5"),
            ],
        );
        let i = interpret_span(&tool, &mut test_cut()).unwrap();
        assert_eq!(i.fact.kind, FactKind::ToolCall);
        assert_eq!(i.fact.arguments.unwrap(), json!({"a": 2, "b": 3}));
        assert_eq!(i.fact.result.unwrap(), json!("5"));
        let agent = span(
            "calc.agent",
            vec![
                kv("traceloop.span.kind", "agent"),
                kv("traceloop.entity.name", "calc"),
            ],
        );
        let i = interpret_span(&agent, &mut test_cut()).unwrap();
        assert_eq!(i.fact.kind, FactKind::AgentRun);
        assert_eq!(i.fact.agent_name.as_deref(), Some("calc"));
        assert_eq!(i.run_span_id, "0202020202020202");
    }
}
