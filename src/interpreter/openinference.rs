//! The OpenInference convention (`openinference.span.kind`), as the OpenAI Agents SDK
//! instrumentation emits it: `Agent workflow` (AGENT, the trace) → task (CHAIN) → `{agent}`
//! (AGENT, `agent.name`) → `turn` (CHAIN) → `response` | `generation` (LLM) and `{tool}` (TOOL);
//! and as the LangChain instrumentation emits it: `{graph}` (AGENT when the name contains
//! "agent", else CHAIN) → `model` / `tools` (CHAIN) → `{ChatModel}` (LLM) and `{tool}` (TOOL).
//!
//! Runs are keyed by the AGENT span that names an agent: one run per agent invocation (a handoff
//! starts a new run with the same session). The trace-level AGENT span names no agent and is not
//! a run. LangChain's agent spans name none either: they are runs named by the metadata's
//! `lc_agent_name`, else by the span, and so is a parent-less CHAIN (one graph invocation is one
//! run) and a nested `create_agent` graph (a delegate run; see [`super::langchain`]). Other
//! CHAIN spans (task, turn, graph nodes) group their children under the span above them, like
//! Strands' cycles, so model requests and tools reach their agent whatever the arrival order, and
//! an agent used as a tool links to the tool through the task span between them.
//!
//! Content comes from `input.value` / `output.value` (the exact provider request and response,
//! Chat Completions or Responses shaped), else from the flattened `llm.input_messages.*` /
//! `llm.output_messages.*` (always for LangChain, whose `input.value` holds batches of
//! serialised messages). The session (`session.id`; LangChain's thread) is the conversation.
//! TOOL spans carry no tool-call id (`tool.id` where a producer sets one): LangChain's is in the
//! `ToolMessage` of `output.value`, whose content is the result; otherwise derivation joins them
//! to the model's calls (see `call_join`).

use opentelemetry_proto::tonic::trace::v1::Span;
use serde_json::{json, Map, Value};

use super::attributes::Attributes;
use super::budget::Cut;
use super::fact::{FactKind, Interpreted, SpanFact};
use super::genai::{error_text, requested_calls, store_bodies};
use super::langchain;
use super::openai_items::{self, Mapped};

/// Interprets one OpenInference span; message bodies are cut to `cut`'s depth.
pub fn interpret_span(span: &Span, cut: &mut Cut) -> Option<Interpreted> {
    let span = &*super::openinference_frameworks::normalise(span)?;
    let attrs = Attributes(&span.attributes);
    let lc_agent_name = langchain::metadata_agent_name(&attrs);
    let mut agent_name = attrs.str(&["agent.name", "graph.node.id"]);
    let has_parent = span.parent_span_id.len() == 8;
    let kind = match attrs
        .str(&["openinference.span.kind"])?
        .to_ascii_uppercase()
        .as_str()
    {
        "AGENT" if agent_name.is_some() => FactKind::AgentRun,
        // LangChain never sets `agent.name`: its agent spans are runs named by the metadata or
        // by the span (an OpenAI Agents `Agent workflow` span has no LangChain metadata).
        "AGENT" if lc_agent_name.is_some() || langchain::is_langchain_metadata(&attrs) => {
            agent_name = lc_agent_name.or_else(|| Some(span.name.clone()));
            FactKind::AgentRun
        }
        // A LangGraph invocation is a root CHAIN (`LangGraph`, or a graph named without
        // "agent"), or a `create_agent` graph nested under a tool or a graph. Only LangChain's
        // chains (its metadata): other producers' root chains (CrewAI's `crew.kickoff`) group.
        "CHAIN"
            if (lc_agent_name.is_some() || langchain::is_langchain_metadata(&attrs))
                && langchain::chain_is_run(has_parent, &span.name, lc_agent_name.as_deref()) =>
        {
            agent_name = lc_agent_name.or_else(|| Some(span.name.clone()));
            FactKind::AgentRun
        }
        "CHAIN" => FactKind::Group,
        "LLM" => FactKind::ModelRequest,
        "TOOL" => FactKind::ToolCall,
        _ => return None,
    };
    let mut fact = SpanFact::of_finished_span(kind, span, error_text(span, &attrs))?;
    fact.conversation_id = attrs.str(&["session.id", "gen_ai.conversation.id"]);
    if kind == FactKind::AgentRun {
        fact.agent_name = agent_name;
    }

    let mut messages = Vec::new();
    match kind {
        FactKind::AgentRun | FactKind::Group => {}
        FactKind::ModelRequest => {
            let input = read_input(&attrs, &mut fact);
            let output = read_output(&attrs, &mut fact);
            let mut system = input.as_ref().map(|m| m.system.clone()).unwrap_or_default();
            if let Some(instructions) = output.as_ref().and_then(|o| o.1.clone()) {
                if system.is_empty() {
                    system = instructions;
                }
            }
            if !system.is_empty() {
                fact.system_instructions = Some(Value::Array(system));
            }
            if let Some(input) = input {
                fact.input = Some(std::sync::Arc::new(store_bodies(
                    input.messages,
                    &mut messages,
                    cut,
                )));
            }
            if let Some((output, _)) = output {
                let first = messages.len();
                fact.output = Some(store_bodies(output.messages, &mut messages, cut));
                fact.requested_calls = messages[first..]
                    .iter()
                    .flat_map(|(_, m)| requested_calls(m))
                    .collect();
            }
            if fact.input.is_none() && fact.content_problem.is_none() && fact.error.is_none() {
                fact.content_problem = Some(
                    "LLM spans carry no message content (trace_include_sensitive_data or content capture is off)"
                        .into(),
                );
            }
            fact.model = attrs.str(&["llm.model_name"]);
            fact.provider = attrs.str(&["llm.provider", "llm.system"]);
            fact.input_tokens = attrs
                .int(&["llm.token_count.prompt"])
                .and_then(|v| u64::try_from(v).ok());
            fact.output_tokens = attrs
                .int(&["llm.token_count.completion"])
                .and_then(|v| u64::try_from(v).ok());
        }
        FactKind::ToolCall => {
            fact.tool_name = attrs
                .str(&["tool.name"])
                .or_else(|| Some(span.name.clone()));
            fact.tool_call_id = attrs.str(&["tool_call.id", "tool.call_id", "tool.id"]);
            fact.arguments = attrs.loose_json(&["input.value", "tool.parameters_value"]);
            fact.result = attrs.loose_json(&["output.value"]);
            // LangChain: the id and the content are inside the returned `ToolMessage`. (A
            // one-string-argument tool's `input.value` is the bare string: the ledger keeps the
            // arguments of the model's call, which it prefers to the span's.)
            langchain::apply_tool_output(&mut fact);
        }
    }

    super::openinference_frameworks::annotate(span, &mut fact);
    Some(Interpreted::keyed(fact, messages))
}

/// The request history: `input.value` when it is JSON, else the flattened input messages.
fn read_input(attrs: &Attributes<'_>, fact: &mut SpanFact) -> Option<Mapped> {
    let flattened = attrs.indexed("llm.input_messages");
    match attrs.json("input.value") {
        // LangChain: `{"messages": [[lc messages]]}` (batches of serialised messages). The
        // flattened messages are the first batch, already as chat messages: read when present.
        Some(Ok(Value::Object(body)))
            if body
                .get("messages")
                .and_then(Value::as_array)
                .is_some_and(|items| langchain::holds_lc_messages(items)) =>
        {
            let chat = match flattened.is_empty() {
                true => langchain::model_input(&Value::Object(body))?,
                false => flattened.iter().filter_map(flat_message).collect(),
            };
            return Some(openai_items::map_history(&chat));
        }
        Some(Ok(Value::Array(items))) => return Some(openai_items::map_history(&items)),
        Some(Ok(Value::Object(body))) => {
            // A request body: `{input, instructions}` (Responses) or `{messages}` (chat).
            let body = Value::Object(body);
            let items = body
                .get("input")
                .or_else(|| body.get("messages"))
                .and_then(Value::as_array);
            if let Some(items) = items {
                let mut mapped = openai_items::map_history(items);
                if mapped.system.is_empty() {
                    mapped.system = openai_items::response_instructions(&body).unwrap_or_default();
                }
                return Some(mapped);
            }
        }
        Some(Ok(Value::String(text))) if flattened.is_empty() => {
            return Some(openai_items::map_history(&[
                json!({"role": "user", "content": text}),
            ]));
        }
        Some(Err(reason)) if flattened.is_empty() => {
            // Plain text input is a user prompt; JSON cut by a length limit is damage.
            let raw = attrs.str(&["input.value"]).unwrap_or_default();
            let t = raw.trim_start();
            if t.starts_with('[') || t.starts_with('{') {
                fact.content_problem.get_or_insert(reason);
                return None;
            }
            return Some(openai_items::map_history(&[
                json!({"role": "user", "content": raw}),
            ]));
        }
        _ => {}
    }
    if flattened.is_empty() {
        return None;
    }
    let chat: Vec<Value> = flattened.iter().filter_map(flat_message).collect();
    Some(openai_items::map_history(&chat))
}

/// The response messages, with the instructions a Responses body echoes.
fn read_output(
    attrs: &Attributes<'_>,
    fact: &mut SpanFact,
) -> Option<(Mapped, Option<Vec<Value>>)> {
    let flattened = attrs.indexed("llm.output_messages");
    match attrs.json("output.value") {
        // LangChain: an `LLMResult`; the flattened messages are its first generation.
        Some(Ok(body)) if body.get("generations").is_some() => {
            let chat = match flattened.is_empty() {
                true => vec![langchain::model_output(&body)?],
                false => flattened.iter().filter_map(flat_message).collect(),
            };
            return Some((openai_items::map_history(&chat), None));
        }
        Some(Ok(body @ (Value::Object(_) | Value::Array(_)))) => {
            let mapped = openai_items::map_response(&body);
            if !mapped.messages.is_empty() || flattened.is_empty() {
                let instructions = openai_items::response_instructions(&body);
                return Some((mapped, instructions));
            }
        }
        Some(Err(reason)) if flattened.is_empty() => {
            fact.content_problem.get_or_insert(reason);
            return None;
        }
        _ => {}
    }
    if flattened.is_empty() {
        return None;
    }
    let chat: Vec<Value> = flattened.iter().filter_map(flat_message).collect();
    Some((openai_items::map_history(&chat), None))
}

/// One flattened OpenInference message (`message.{role,content,contents,tool_calls,...}`) as a
/// Chat Completions message.
fn flat_message(item: &Value) -> Option<Value> {
    let m = item.get("message")?;
    let mut out = Map::new();
    out.insert(
        "role".into(),
        m.get("role").cloned().unwrap_or(json!("user")),
    );
    if let Some(contents) = m.get("contents").and_then(Value::as_array) {
        let blocks: Vec<Value> = contents
            .iter()
            .filter_map(|c| c.get("message_content"))
            .map(|c| match c.get("type").and_then(Value::as_str) {
                Some("image") => json!({"type": "image_url", "image_url": {
                    "url": c.pointer("/image/image/url").cloned().unwrap_or(Value::Null)}}),
                _ => json!({"type": "text", "text": c.get("text").cloned().unwrap_or(json!(""))}),
            })
            .collect();
        out.insert("content".into(), Value::Array(blocks));
    } else if let Some(content) = m.get("content") {
        out.insert("content".into(), content.clone());
    }
    if let Some(calls) = m.get("tool_calls").and_then(Value::as_array) {
        let calls: Vec<Value> = calls
            .iter()
            .filter_map(|c| c.get("tool_call"))
            .map(|c| {
                json!({
                    "id": c.get("id").cloned().unwrap_or(json!("")),
                    "type": "function",
                    "function": {
                        "name": c.pointer("/function/name").cloned().unwrap_or(json!("")),
                        "arguments": c.pointer("/function/arguments").cloned().unwrap_or(json!("{}")),
                    }
                })
            })
            .collect();
        out.insert("tool_calls".into(), Value::Array(calls));
    }
    for key in ["tool_call_id", "name"] {
        if let Some(v) = m.get(key) {
            out.insert(key.into(), v.clone());
        }
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
    fn responses_llm_span_maps_history_calls_and_instructions() {
        let s = span(
            "response",
            vec![
                kv("openinference.span.kind", "LLM"),
                kv("llm.model_name", "gpt-test"),
                kv("llm.token_count.prompt", "10"),
                kv("session.id", "s1"),
                kv("input.value", r#"[{"content":"2+3?","role":"user"}]"#),
                kv(
                    "output.value",
                    r#"{"id":"r1","instructions":"You add.","output":[
                        {"type":"function_call","call_id":"c1","name":"add","arguments":"{\"a\":2}"},
                        {"type":"function_call","call_id":"c2","name":"add","arguments":"{\"a\":1}"}]}"#,
                ),
            ],
        );
        let i = interpret_span(&s, &mut test_cut()).unwrap();
        assert_eq!(i.run_span_id, "0303030303030303");
        assert_eq!(i.fact.kind, FactKind::ModelRequest);
        assert_eq!(i.fact.conversation_id.as_deref(), Some("s1"));
        assert_eq!(i.fact.requested_calls.len(), 2);
        assert_eq!(i.fact.requested_calls[1].id, "c2");
        assert_eq!(i.fact.output.as_ref().unwrap().len(), 1);
        assert_eq!(
            i.fact.system_instructions.as_ref().unwrap()[0]["content"],
            "You add."
        );
        assert_eq!(i.fact.input_tokens, Some(10));
    }

    #[test]
    fn flattened_messages_are_used_without_input_value() {
        let s = span(
            "generation",
            vec![
                kv("openinference.span.kind", "LLM"),
                kv("llm.input_messages.0.message.role", "system"),
                kv("llm.input_messages.0.message.content", "Be brief."),
                kv("llm.input_messages.1.message.role", "user"),
                kv(
                    "llm.input_messages.1.message.contents.0.message_content.type",
                    "text",
                ),
                kv(
                    "llm.input_messages.1.message.contents.0.message_content.text",
                    "hi",
                ),
                kv("llm.output_messages.0.message.role", "assistant"),
                kv(
                    "llm.output_messages.0.message.tool_calls.0.tool_call.id",
                    "c1",
                ),
                kv(
                    "llm.output_messages.0.message.tool_calls.0.tool_call.function.name",
                    "f",
                ),
                kv(
                    "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments",
                    "{}",
                ),
            ],
        );
        let i = interpret_span(&s, &mut test_cut()).unwrap();
        assert_eq!(i.fact.input.as_ref().unwrap().len(), 1);
        assert_eq!(
            i.fact.system_instructions.as_ref().unwrap()[0]["content"],
            "Be brief."
        );
        assert_eq!(i.fact.requested_calls[0].name, "f");
    }

    #[test]
    fn kinds_and_keys() {
        let agent = span(
            "calc",
            vec![
                kv("openinference.span.kind", "AGENT"),
                kv("agent.name", "calc"),
            ],
        );
        let i = interpret_span(&agent, &mut test_cut()).unwrap();
        assert_eq!(
            (i.fact.kind, i.run_span_id.as_str()),
            (FactKind::AgentRun, "0202020202020202")
        );
        let workflow = span(
            "Agent workflow",
            vec![kv("openinference.span.kind", "AGENT")],
        );
        assert!(interpret_span(&workflow, &mut test_cut()).is_none());
        let turn = span("turn", vec![kv("openinference.span.kind", "CHAIN")]);
        assert_eq!(
            interpret_span(&turn, &mut test_cut()).unwrap().fact.kind,
            FactKind::Group
        );
        let tool = span(
            "add",
            vec![
                kv("openinference.span.kind", "TOOL"),
                kv("tool.name", "add"),
                kv("input.value", r#"{"a":2}"#),
                kv("output.value", "5"),
            ],
        );
        let i = interpret_span(&tool, &mut test_cut()).unwrap();
        assert_eq!(i.fact.tool_name.as_deref(), Some("add"));
        assert_eq!(i.fact.arguments.unwrap()["a"], 2);
        assert!(i.fact.tool_call_id.is_none());
    }

    #[test]
    fn cut_input_is_a_content_problem() {
        let s = span(
            "response",
            vec![
                kv("openinference.span.kind", "LLM"),
                kv("input.value", r#"[{"content":"2+"#),
            ],
        );
        let i = interpret_span(&s, &mut test_cut()).unwrap();
        assert!(i.fact.input.is_none());
        assert!(i.fact.content_problem.unwrap().contains("not valid JSON"));
    }
}
