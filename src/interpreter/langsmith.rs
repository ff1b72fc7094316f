//! LangSmith's OTel mode (`LANGSMITH_TRACING=true`, `LANGSMITH_TRACING_MODE=otel`): the
//! LangChain / LangGraph runs LangSmith records, exported as spans with `langsmith.span.kind`
//! (the run type: `chain`, `llm`, `tool`, `retriever`, ...).
//!
//! Content is the raw run JSON: `gen_ai.prompt` holds a run's inputs and `gen_ai.completion` its
//! outputs (a model call's `{"messages": [[lc messages]]}` and `LLMResult`; a tool's arguments and
//! `{"output": ToolMessage}`), read through [`super::langchain`]. The conversation is the LangGraph
//! thread (`langsmith.metadata.thread_id`, else `session_id` / `conversation_id`), not
//! `langsmith.trace.session_name` (that is the LangSmith project). Tool spans carry
//! `gen_ai.tool.call.id`. Which chain span is the run: see [`super::langchain`].

use std::sync::Arc;

use opentelemetry_proto::tonic::trace::v1::Span;
use serde_json::Value;

use super::attributes::Attributes;
use super::budget::Cut;
use super::fact::{FactKind, Interpreted, SpanFact};
use super::genai::{error_text, requested_calls, store_bodies};
use super::langchain;
use super::openai_items;

/// Interprets one LangSmith span; message bodies are cut to `cut`'s depth.
pub fn interpret_span(span: &Span, cut: &mut Cut) -> Option<Interpreted> {
    let attrs = Attributes(&span.attributes);
    let agent_name = attrs.str(&["langsmith.metadata.lc_agent_name"]);
    let has_parent = span.parent_span_id.len() == 8;
    let kind = match attrs.str(&["langsmith.span.kind"])?.as_str() {
        "llm" | "chat" => FactKind::ModelRequest,
        "tool" => FactKind::ToolCall,
        // Chains, and run types that only nest others (retriever, prompt, parser, ...).
        _ if langchain::chain_is_run(has_parent, &span.name, agent_name.as_deref()) => {
            FactKind::AgentRun
        }
        _ if has_parent => FactKind::Group,
        _ => return None,
    };
    let mut fact = SpanFact::of_finished_span(kind, span, error_text(span, &attrs))?;
    fact.conversation_id = attrs.str(&[
        "langsmith.metadata.thread_id",
        "langsmith.metadata.session_id",
        "langsmith.metadata.conversation_id",
    ]);
    let mut messages = Vec::new();
    match kind {
        FactKind::Group => {}
        FactKind::AgentRun => {
            fact.agent_name = agent_name.or_else(|| Some(span.name.clone()));
        }
        FactKind::ModelRequest => {
            read_model_call(&attrs, &mut fact, &mut messages, cut);
            fact.model = attrs.str(&[
                "gen_ai.response.model",
                "gen_ai.request.model",
                "langsmith.metadata.ls_model_name",
            ]);
            fact.provider = attrs.str(&["langsmith.metadata.ls_provider", "gen_ai.system"]);
            (fact.input_tokens, fact.output_tokens) = super::genai::usage_tokens(&attrs);
        }
        FactKind::ToolCall => {
            fact.tool_name = attrs
                .str(&["gen_ai.tool.name"])
                .or_else(|| Some(span.name.clone()));
            fact.tool_call_id = attrs.str(&["gen_ai.tool.call.id"]);
            fact.arguments = attrs.loose_json(&["gen_ai.prompt"]);
            fact.result = attrs.loose_json(&["gen_ai.completion"]);
            langchain::apply_tool_output(&mut fact);
        }
    }
    Some(Interpreted::keyed(fact, messages))
}

/// A model call's history (`gen_ai.prompt`) and response (`gen_ai.completion`).
fn read_model_call(
    attrs: &Attributes<'_>,
    fact: &mut SpanFact,
    messages: &mut Vec<(crate::domain::MessageHash, Value)>,
    cut: &mut Cut,
) {
    match attrs.json("gen_ai.prompt") {
        Some(Ok(prompt)) => {
            if let Some(chat) = langchain::model_input(&prompt) {
                let mapped = openai_items::map_history(&chat);
                if !mapped.system.is_empty() {
                    fact.system_instructions = Some(Value::Array(mapped.system));
                }
                fact.input = Some(Arc::new(store_bodies(mapped.messages, messages, cut)));
            }
        }
        Some(Err(reason)) => {
            fact.content_problem.get_or_insert(reason);
        }
        None => {}
    }
    match attrs.json("gen_ai.completion") {
        Some(Ok(completion)) => {
            if let Some(reply) = langchain::model_output(&completion) {
                let mapped = openai_items::map_history(std::slice::from_ref(&reply));
                let first = messages.len();
                fact.output = Some(store_bodies(mapped.messages, messages, cut));
                fact.requested_calls = messages[first..]
                    .iter()
                    .flat_map(|(_, m)| requested_calls(m))
                    .collect();
            }
        }
        Some(Err(reason)) => {
            fact.content_problem.get_or_insert(reason);
        }
        None => {}
    }
    if fact.input.is_none() && fact.content_problem.is_none() && fact.error.is_none() {
        fact.content_problem = Some(
            "LangSmith model spans carry no message content (gen_ai.prompt is absent or holds no messages)"
                .into(),
        );
    }
}

#[cfg(test)]
#[path = "langsmith_tests.rs"]
mod tests;
