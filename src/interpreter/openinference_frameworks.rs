//! What the OpenInference instrumentations of LlamaIndex, CrewAI, smolagents and Agno emit
//! differently from the OpenAI Agents one, brought to the shape [`super::openinference`] reads
//! (found by recording them: `tests/fixtures/`).
//!
//! [`normalise`] rewrites a span's attributes before it is interpreted:
//! - run spans: LlamaIndex's root `FunctionAgent.run` is a CHAIN and smolagents' `calc.run` an
//!   AGENT without `agent.name`; both become agent runs named after the span;
//! - LLM spans: LlamaIndex's `…._prepare_chat_with_tools` is not a model call (dropped); an
//!   `input.value` / `output.value` holding the framework's own message objects (Python reprs of
//!   LlamaIndex / smolagents `ChatMessage`s, Agno `Message`s) gives way to the flattened
//!   `llm.input_messages` / `llm.output_messages`;
//!   CrewAI's event listener writes tool-call names and arguments as Python reprs (`'add'`) and a
//!   tool-calling answer as a bare list of calls in `output.value`; smolagents' `tool-call` /
//!   `tool-response` roles are sent to the model as `assistant` / `user`;
//! - TOOL spans: arguments wrapped as `{"kwargs": {...}}` (LlamaIndex, smolagents) are unwrapped,
//!   LlamaIndex's `ToolOutput` gives its `raw_output`, and `tool.id` is the call id where set.
//!
//! [`annotate`] says why a CrewAI run has no snapshot: its instrumentation records no model calls
//! unless the event listener (or an LLM instrumentation) is on.

use std::borrow::Cow;
use std::collections::HashSet;

use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::trace::v1::Span;
use serde_json::{Map, Value};

use super::attributes::Attributes;
use super::fact::{FactKind, SpanFact};

const KIND: &str = "openinference.span.kind";
const INPUT: &str = "input.value";
const OUTPUT: &str = "output.value";
const IN_MESSAGES: &str = "llm.input_messages.";
const OUT_MESSAGES: &str = "llm.output_messages.";

/// Why a CrewAI run has no snapshot (kept only while no model request with content arrives).
pub const CREWAI_NO_MODEL_SPANS: &str = "CrewAI's OpenInference instrumentation records no model \
calls by default: instrument it with use_event_listener=True (or add the LiteLLM / OpenAI \
instrumentation) for LLM spans; without them there is no message history to continue from";

/// Attribute changes for one span: values to set (replacing any present) and keys to remove.
#[derive(Default)]
struct Edits {
    set: Vec<(String, String)>,
    remove: Vec<String>,
}

impl Edits {
    fn set(&mut self, key: impl Into<String>, value: impl Into<String>) {
        self.set.push((key.into(), value.into()));
    }

    fn is_empty(&self) -> bool {
        self.set.is_empty() && self.remove.is_empty()
    }

    /// `span` with the edits applied: removed and replaced keys dropped, set values appended.
    fn apply(self, span: &Span) -> Span {
        let gone: HashSet<&str> = self
            .remove
            .iter()
            .map(String::as_str)
            .chain(self.set.iter().map(|(k, _)| k.as_str()))
            .collect();
        let mut attributes: Vec<KeyValue> = span
            .attributes
            .iter()
            .filter(|kv| !gone.contains(kv.key.as_str()))
            .cloned()
            .collect();
        attributes.extend(self.set.into_iter().map(|(key, value)| KeyValue {
            key,
            value: Some(AnyValue {
                value: Some(any_value::Value::StringValue(value)),
            }),
            key_strindex: 0,
        }));
        Span {
            attributes,
            ..span.clone()
        }
    }
}

/// The span as [`super::openinference`] should read it (borrowed when nothing changes), or
/// `None` for a span that is no agent step at all. Linear in the span's attributes.
pub(super) fn normalise(span: &Span) -> Option<Cow<'_, Span>> {
    let attrs = Attributes(&span.attributes);
    let Some(kind) = attrs.str(&[KIND]).map(|k| k.to_ascii_uppercase()) else {
        return Some(Cow::Borrowed(span));
    };
    let mut edits = Edits::default();
    match kind.as_str() {
        "LLM" => {
            if span.name.ends_with("._prepare_chat_with_tools") {
                return None;
            }
            model_call(&attrs, &mut edits);
        }
        "TOOL" => tool(&attrs, &mut edits),
        "AGENT" | "CHAIN" => run(span, &attrs, &kind, &mut edits),
        _ => {}
    }
    Some(if edits.is_empty() {
        Cow::Borrowed(span)
    } else {
        Cow::Owned(edits.apply(span))
    })
}

/// Notes on an interpreted fact what the span's framework leaves out.
pub(super) fn annotate(span: &Span, fact: &mut SpanFact) {
    if fact.kind == FactKind::AgentRun && is_crewai_agent(span) {
        fact.content_problem
            .get_or_insert_with(|| CREWAI_NO_MODEL_SPANS.to_string());
    }
}

/// CrewAI's agent spans: `{role}.{task}._execute_core` (the default wrappers) or the event
/// listener's, which carry the agent's goal and backstory.
fn is_crewai_agent(span: &Span) -> bool {
    let attrs = Attributes(&span.attributes);
    span.name.ends_with("._execute_core")
        || (attrs.get("agent.backstory").is_some() && attrs.get("agent.goal").is_some())
}

/// Run spans named after the agent: smolagents' `{agent}.run` AGENT, LlamaIndex's root
/// `{AgentClass}.run` CHAIN.
fn run(span: &Span, attrs: &Attributes<'_>, kind: &str, edits: &mut Edits) {
    if attrs.get("agent.name").is_some() || attrs.get("graph.node.id").is_some() {
        return;
    }
    let Some(owner) = [".run", ".arun"]
        .iter()
        .find_map(|suffix| span.name.strip_suffix(suffix))
        .filter(|owner| !owner.is_empty() && !owner.contains('.'))
    else {
        return;
    };
    match kind {
        "AGENT" => edits.set("agent.name", owner),
        "CHAIN" if span.parent_span_id.is_empty() && is_agent_class(owner) => {
            edits.set(KIND, "AGENT");
            edits.set("agent.name", owner);
        }
        _ => {}
    }
}

/// LlamaIndex agent classes: `FunctionAgent`, `ReActAgent`, `CodeActAgent`, `AgentWorkflow`.
fn is_agent_class(name: &str) -> bool {
    name.ends_with("Agent") || name == "AgentWorkflow"
}

/// LLM spans: which of the raw values and the flattened messages to read, and their repairs.
fn model_call(attrs: &Attributes<'_>, edits: &mut Edits) {
    let mut has_input = false;
    let mut has_output = false;
    for kv in attrs.0 {
        let (is_input, rest) = if let Some(rest) = kv.key.strip_prefix(IN_MESSAGES) {
            (true, rest)
        } else if let Some(rest) = kv.key.strip_prefix(OUT_MESSAGES) {
            (false, rest)
        } else {
            continue;
        };
        has_input |= is_input;
        has_output |= !is_input;
        let Some(Some(any_value::Value::StringValue(text))) =
            kv.value.as_ref().map(|v| v.value.as_ref())
        else {
            continue;
        };
        if rest.ends_with(".message.role") {
            // smolagents' roles, as its tool-calling models send them.
            let role = match text.as_str() {
                "tool-call" => "assistant",
                "tool-response" => "user",
                _ => continue,
            };
            edits.set(kv.key.clone(), role);
        } else if rest.ends_with(".tool_call.function.name")
            || rest.ends_with(".tool_call.function.arguments")
        {
            if let Some(inner) = python_quoted(text) {
                edits.set(kv.key.clone(), inner);
            }
        }
    }
    match attrs.json(INPUT) {
        Some(Ok(Value::Object(body))) if has_input && holds_framework_messages(&body) => {
            edits.remove.push(INPUT.into());
        }
        Some(Ok(Value::Array(items))) => repair_input_list(items, edits),
        _ => {}
    }
    match attrs.json(OUTPUT) {
        Some(Ok(Value::Object(body)))
            if has_output && body.contains_key("role") && body.contains_key("raw") =>
        {
            // smolagents' ChatMessage, with the provider's raw response as a Python repr.
            edits.remove.push(OUTPUT.into());
        }
        Some(Ok(Value::Array(items))) if !has_output && is_call_list(&items) => {
            // CrewAI: the answer was these tool calls.
            edits.remove.push(OUTPUT.into());
            edits.set(format!("{OUT_MESSAGES}0.message.role"), "assistant");
            for (i, call) in items.iter().enumerate() {
                let at = format!("{OUT_MESSAGES}0.message.tool_calls.{i}.tool_call");
                let id = call.get("id").and_then(Value::as_str).unwrap_or_default();
                let name = text_of(call.pointer("/function/name"));
                let arguments = text_of(call.pointer("/function/arguments"));
                edits.set(format!("{at}.id"), id);
                edits.set(format!("{at}.function.name"), unquoted(name));
                edits.set(format!("{at}.function.arguments"), unquoted(arguments));
            }
        }
        _ => {}
    }
}

/// An `input.value` whose `messages` are the framework's own objects rather than provider
/// messages: Python reprs (LlamaIndex and smolagents `ChatMessage`s) or Agno `Message`s, with
/// their bookkeeping (`from_history`). The flattened messages say the same in OpenInference's form.
fn holds_framework_messages(body: &Map<String, Value>) -> bool {
    let Some(messages) = body.get("messages").and_then(Value::as_array) else {
        return false;
    };
    messages
        .iter()
        .any(|m| m.is_string() || m.get("from_history").is_some())
}

/// A non-empty list of OpenAI-style tool calls (`{id, function: {name, arguments}}`).
fn is_call_list(items: &[Value]) -> bool {
    !items.is_empty()
        && items
            .iter()
            .all(|c| c.get("function").is_some_and(Value::is_object))
}

/// A string value as text; any other JSON value as its JSON text.
fn text_of(value: Option<&Value>) -> String {
    match value {
        Some(Value::String(s)) => s.clone(),
        Some(v) => v.to_string(),
        None => String::new(),
    }
}

/// `text` without the quotes of a Python `repr` of a string (`'add'`), when it is one.
fn python_quoted(text: &str) -> Option<&str> {
    let inner = text.strip_prefix('\'')?.strip_suffix('\'')?;
    (!inner.contains('\'') && !inner.contains('\\')).then_some(inner)
}

fn unquoted(text: String) -> String {
    match python_quoted(&text) {
        Some(inner) => inner.to_string(),
        None => text,
    }
}

/// Sets `input.value` to the chat messages `items` without Python repr quotes in their tool
/// calls, when there were any.
fn repair_input_list(mut items: Vec<Value>, edits: &mut Edits) {
    if unquote_tool_calls(&mut items) {
        edits.set(INPUT, Value::Array(items).to_string());
    }
}

/// Removes Python repr quotes from the tool calls of chat messages; whether any changed.
fn unquote_tool_calls(items: &mut [Value]) -> bool {
    let mut changed = false;
    for item in items {
        let Some(calls) = item.get_mut("tool_calls").and_then(Value::as_array_mut) else {
            continue;
        };
        for call in calls {
            let Some(function) = call.get_mut("function").and_then(Value::as_object_mut) else {
                continue;
            };
            for key in ["name", "arguments"] {
                if let Some(Value::String(s)) = function.get_mut(key) {
                    if let Some(inner) = python_quoted(s) {
                        *s = inner.to_string();
                        changed = true;
                    }
                }
            }
        }
    }
    changed
}

/// TOOL spans: the call id from `tool.id`, unwrapped arguments and LlamaIndex's raw result.
fn tool(attrs: &Attributes<'_>, edits: &mut Edits) {
    if attrs.get("tool_call.id").is_none() && attrs.get("tool.call_id").is_none() {
        if let Some(id) = attrs.str(&["tool.id"]).filter(|id| !id.is_empty()) {
            edits.set("tool_call.id", id);
        }
    }
    if let Some(Ok(Value::Object(input))) = attrs.json(INPUT) {
        if let Some(kwargs) = wrapped_kwargs(&input) {
            edits.set(INPUT, kwargs.to_string());
        }
    }
    if let Some(Ok(Value::Object(output))) = attrs.json(OUTPUT) {
        let tool_output = output.contains_key("tool_name")
            && (output.contains_key("blocks") || output.contains_key("content"));
        if let Some(raw) = output.get("raw_output").filter(|_| tool_output) {
            edits.set(OUTPUT, text_of(Some(raw)));
        }
    }
}

/// The keyword arguments of a call recorded as `{"kwargs": {...}}`, with at most an empty
/// `args` and smolagents' `sanitize_inputs_outputs` beside them.
fn wrapped_kwargs(input: &Map<String, Value>) -> Option<&Value> {
    let kwargs = input.get("kwargs").filter(|k| k.is_object())?;
    let others_fit = input.iter().all(|(k, v)| match k.as_str() {
        "kwargs" | "sanitize_inputs_outputs" => true,
        "args" => v.as_array().is_some_and(Vec::is_empty),
        _ => false,
    });
    others_fit.then_some(kwargs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_fixtures::kv;

    fn span(name: &str, parent: u8, attrs: Vec<KeyValue>) -> Span {
        crate::test_fixtures::span(2, parent, name, 10, attrs)
    }

    fn attr(span: &Span, key: &str) -> Option<String> {
        Attributes(&span.attributes).str(&[key])
    }

    #[test]
    fn llamaindex_root_chain_is_an_agent_run_and_prepare_spans_are_dropped() {
        let root = span(
            "FunctionAgent.run",
            0,
            vec![kv(KIND, "CHAIN"), kv("session.id", "s")],
        );
        let out = normalise(&root).unwrap();
        assert_eq!(attr(&out, KIND).as_deref(), Some("AGENT"));
        assert_eq!(attr(&out, "agent.name").as_deref(), Some("FunctionAgent"));
        // A nested CHAIN of the same name, and other root chains, stay as they are.
        let nested = span("FunctionAgent.run", 1, vec![kv(KIND, "CHAIN")]);
        assert!(matches!(normalise(&nested), Some(Cow::Borrowed(_))));
        let other = span("RunnableSequence", 0, vec![kv(KIND, "CHAIN")]);
        assert!(matches!(normalise(&other), Some(Cow::Borrowed(_))));
        let prepare = span(
            "MockFunctionCallingLLM._prepare_chat_with_tools",
            1,
            vec![kv(KIND, "LLM")],
        );
        assert!(normalise(&prepare).is_none());
    }

    #[test]
    fn smolagents_agent_is_named_and_roles_mapped() {
        let agent = span("calc.run", 0, vec![kv(KIND, "AGENT")]);
        assert_eq!(
            attr(&normalise(&agent).unwrap(), "agent.name").as_deref(),
            Some("calc")
        );
        let named = span(
            "calc.run",
            0,
            vec![kv(KIND, "AGENT"), kv("agent.name", "x")],
        );
        assert!(matches!(normalise(&named), Some(Cow::Borrowed(_))));
        let llm = span(
            "OpenAIModel.generate",
            1,
            vec![
                kv(KIND, "LLM"),
                kv(INPUT, r#"{"messages": ["ChatMessage(role=...)"]}"#),
                kv("llm.input_messages.0.message.role", "tool-call"),
                kv("llm.input_messages.1.message.role", "tool-response"),
                kv("llm.output_messages.0.message.role", "assistant"),
                kv(OUTPUT, r#"{"role": "assistant", "raw": "x"}"#),
            ],
        );
        let out = normalise(&llm).unwrap();
        assert_eq!(attr(&out, INPUT), None);
        assert_eq!(attr(&out, OUTPUT), None);
        let agno = span(
            "OpenAIChat.invoke",
            1,
            vec![
                kv(KIND, "LLM"),
                kv(
                    INPUT,
                    r#"{"messages": [{"role": "user", "from_history": false}]}"#,
                ),
                kv("llm.input_messages.0.message.role", "user"),
            ],
        );
        assert_eq!(attr(&normalise(&agno).unwrap(), INPUT), None);
        assert_eq!(
            attr(&out, "llm.input_messages.0.message.role").as_deref(),
            Some("assistant")
        );
        assert_eq!(
            attr(&out, "llm.input_messages.1.message.role").as_deref(),
            Some("user")
        );
    }

    #[test]
    fn provider_bodies_and_other_values_are_kept() {
        for (input, output) in [
            (r#"{"input": [], "model": "m"}"#, r#"{"output": []}"#),
            (
                r#"{"messages": [{"role": "user", "content": "hi"}]}"#,
                r#"{"choices": []}"#,
            ),
            (r#"{"messages": [[{"lc": 1}]]}"#, r#"{"generations": [[]]}"#),
        ] {
            let llm = span(
                "response",
                1,
                vec![
                    kv(KIND, "LLM"),
                    kv(INPUT, input),
                    kv("llm.input_messages.0.message.role", "user"),
                    kv(OUTPUT, output),
                    kv("llm.output_messages.0.message.role", "assistant"),
                ],
            );
            assert!(matches!(normalise(&llm), Some(Cow::Borrowed(_))), "{input}");
        }
    }

    #[test]
    fn crewai_reprs_and_call_lists() {
        let llm = span(
            "scripted-model.llm_call",
            1,
            vec![
                kv(KIND, "LLM"),
                kv(
                    INPUT,
                    r#"[{"role":"assistant","tool_calls":[{"id":"c","function":{"name":"'add'","arguments":"'{\"a\": 1}'"}}]}]"#,
                ),
                kv(
                    "llm.input_messages.0.message.tool_calls.0.tool_call.function.name",
                    "'add'",
                ),
                kv(
                    OUTPUT,
                    r#"[{"id":"c2","type":"function","function":{"name":"mul","arguments":"{\"a\": 2}"}}]"#,
                ),
            ],
        );
        let out = normalise(&llm).unwrap();
        let input: Value = serde_json::from_str(&attr(&out, INPUT).unwrap()).unwrap();
        assert_eq!(input[0]["tool_calls"][0]["function"]["name"], "add");
        assert_eq!(
            input[0]["tool_calls"][0]["function"]["arguments"],
            r#"{"a": 1}"#
        );
        assert_eq!(
            attr(
                &out,
                "llm.input_messages.0.message.tool_calls.0.tool_call.function.name"
            )
            .as_deref(),
            Some("add")
        );
        assert_eq!(attr(&out, OUTPUT), None);
        assert_eq!(
            attr(
                &out,
                "llm.output_messages.0.message.tool_calls.0.tool_call.id"
            )
            .as_deref(),
            Some("c2")
        );
        assert_eq!(
            attr(
                &out,
                "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments"
            )
            .as_deref(),
            Some(r#"{"a": 2}"#)
        );
        // Python-looking quotes inside a value are left alone.
        assert_eq!(python_quoted("'it's'"), None);
        assert_eq!(python_quoted("'a\\'b'"), None);
        assert_eq!(python_quoted("plain"), None);
    }

    #[test]
    fn tool_arguments_results_and_ids() {
        let t = span(
            "FunctionTool.acall",
            1,
            vec![
                kv(KIND, "TOOL"),
                kv("tool.id", "call_1"),
                kv(
                    INPUT,
                    r#"{"args": [], "sanitize_inputs_outputs": true, "kwargs": {"a": 2}}"#,
                ),
                kv(
                    OUTPUT,
                    r#"{"blocks":[{"text":"5"}],"tool_name":"add","raw_output":5,"is_error":false}"#,
                ),
            ],
        );
        let out = normalise(&t).unwrap();
        assert_eq!(attr(&out, "tool_call.id").as_deref(), Some("call_1"));
        assert_eq!(attr(&out, INPUT).as_deref(), Some(r#"{"a":2}"#));
        assert_eq!(attr(&out, OUTPUT).as_deref(), Some("5"));
        // Arguments that merely contain a `kwargs` key are the tool's own.
        let own = span(
            "t",
            1,
            vec![
                kv(KIND, "TOOL"),
                kv(INPUT, r#"{"kwargs": {"a": 1}, "b": 2}"#),
            ],
        );
        assert!(matches!(normalise(&own), Some(Cow::Borrowed(_))));
    }

    #[test]
    fn crewai_runs_say_why_there_is_no_snapshot() {
        let s = span(
            "calc._execute_core",
            1,
            vec![kv(KIND, "AGENT"), kv("graph.node.id", "calc")],
        );
        let mut fact = SpanFact::of_finished_span(FactKind::AgentRun, &s, None).unwrap();
        annotate(&s, &mut fact);
        assert_eq!(fact.content_problem.as_deref(), Some(CREWAI_NO_MODEL_SPANS));
        let other = span("calc", 1, vec![kv(KIND, "AGENT"), kv("agent.name", "calc")]);
        let mut fact = SpanFact::of_finished_span(FactKind::AgentRun, &other, None).unwrap();
        annotate(&other, &mut fact);
        assert!(fact.content_problem.is_none());
    }
}
