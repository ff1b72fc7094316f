//! Span facts as stored: what one recognised span says about its run ([`SpanFact`]), the form
//! it is stored in with its long histories by reference ([`StoredFact`]), and the small types
//! they carry. JSON records (see [`super::json`]); the interpreter builds them from spans.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::domain::{ChainRef, MessageHash, MessageRef, RunInfo};

/// The role a span plays in a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FactKind {
    /// The agent-run span itself.
    AgentRun,
    /// A model request.
    ModelRequest,
    /// A tool execution.
    ToolCall,
    /// A span between a run and its model requests and tool calls (Strands' event-loop cycle):
    /// no content of its own, it only tells which run its children belong to.
    Group,
}

/// What one span says. Stored per (run, span): the run is derived from the set of its facts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpanFact {
    /// The span's role.
    pub kind: FactKind,
    /// Trace id (hex).
    pub trace_id: String,
    /// Span id (hex).
    pub span_id: String,
    /// Parent span id (hex), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_span_id: Option<String>,
    /// Span name.
    pub name: String,
    /// Start, nanoseconds since the epoch.
    pub start_ns: u64,
    /// End, nanoseconds since the epoch.
    pub end_ns: u64,
    /// Error text when the span ended in error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// `gen_ai.agent.name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_name: Option<String>,
    /// Framework run id (`gen_ai.agent.call.id`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_call_id: Option<String>,
    /// `gen_ai.conversation.id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation_id: Option<String>,
    /// The resource's `service.name` (model requests only: where lineage is looked for when
    /// the run has no conversation id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
    /// Model request input history (shared: consecutive requests of a run mostly repeat the
    /// same long history, which the interpreter's memo hands out without copying it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Arc<Vec<MessageRef>>>,
    /// Model request output messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Vec<MessageRef>>,
    /// The form (role, result key) of the last tool-return message in a model request's input,
    /// when it has one: reconstructed tool returns mirror it (see [`ToolReturnForm`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_return_form: Option<ToolReturnForm>,
    /// The run's final history (Pydantic AI `pydantic_ai.all_messages`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub all_messages: Option<Vec<MessageRef>>,
    /// `gen_ai.system_instructions` (array of parts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_instructions: Option<Value>,
    /// Model name (response model, else request model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Provider (`gen_ai.provider.name`, old `gen_ai.system`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// Input tokens of a model request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
    /// Output tokens of a model request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
    /// Tool calls the model asked for in its output (model requests only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requested_calls: Vec<RequestedCall>,
    /// Tool name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_name: Option<String>,
    /// Tool-call id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// Tool arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Value>,
    /// Tool result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// Framework retry details of a tool that asked the model to retry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<Value>,
    /// Idempotency key of a tool call, when the span carries one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// What a tool call was deferred for, when the span says it did not run but waits
    /// (Pydantic AI `pydantic_ai.tool.deferral.name`: `ApprovalRequired`, `CallDeferred`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deferral: Option<crate::domain::InteractionKind>,
    /// Why content could not be used (absent or damaged message attributes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_problem: Option<String>,
    /// Only the start of the span is known (a Logfire pending span): the real span, when it
    /// arrives, replaces this fact.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pending: bool,
    /// The content was rebuilt from the span's log records (legacy GenAI events as OTLP logs).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub content_from_logs: bool,
    /// What the interpreter changed in the span's content to keep it within its budget (values
    /// nested too deep, kept in part as JSON text); shown on the run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// Who started the run and the configured run attributes, as the span and its resource
    /// say (see [`crate::domain::RunInfoKeys`]); the fold merges them onto the run record.
    #[serde(default, skip_serializing_if = "RunInfo::is_empty")]
    pub run_info: RunInfo,
}

/// A fact as stored: its long histories (a model request's input, the run's final history) by
/// reference to the run's history chains, so a fact's size does not grow with the run, and its
/// system instructions (the same long text on every request of a run) by the key of their body
/// among the run's messages (schema 5; older facts hold them inline).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredFact {
    /// The fact, without `input` and `all_messages`, and without `system_instructions` when
    /// `instructions` names them.
    pub fact: SpanFact,
    /// The key of the system instructions' body among the run's messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<MessageHash>,
    /// The input history.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_chain: Option<ChainRef>,
    /// The final history.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub all_messages_chain: Option<ChainRef>,
}

impl StoredFact {
    /// The stored form of a fact.
    pub fn of(fact: &SpanFact) -> StoredFact {
        let input_chain = fact.input.as_deref().map(|refs| ChainRef::of(refs));
        let all_messages_chain = fact.all_messages.as_deref().map(ChainRef::of);
        Self::with_chains(fact, input_chain, all_messages_chain)
    }

    /// The stored form of a fact whose histories' references are known, its system
    /// instructions by the key of their body (which is stored with the run's messages).
    pub fn with_chains(
        fact: &SpanFact,
        input_chain: Option<ChainRef>,
        all_messages_chain: Option<ChainRef>,
    ) -> StoredFact {
        StoredFact {
            fact: fact.without_histories(),
            instructions: fact
                .system_instructions
                .as_ref()
                .map(MessageHash::of_repeated),
            input_chain,
            all_messages_chain,
        }
    }

    /// [`Self::with_chains`] of a fact given by value: its fields move into the stored form,
    /// and what the stored form holds by reference (its histories and system instructions)
    /// comes back beside it, so [`Self::into_fact`] gives the fact back without a copy.
    pub fn from_fact(
        mut fact: SpanFact,
        input_chain: Option<ChainRef>,
        all_messages_chain: Option<ChainRef>,
    ) -> (StoredFact, Histories) {
        let histories = Histories {
            input: fact.input.take(),
            all_messages: fact.all_messages.take(),
            system_instructions: fact.system_instructions.take(),
        };
        let stored = StoredFact {
            fact,
            instructions: histories
                .system_instructions
                .as_ref()
                .map(MessageHash::of_repeated),
            input_chain,
            all_messages_chain,
        };
        (stored, histories)
    }

    /// The fact [`Self::from_fact`] made this stored form of, with `histories` it took out.
    pub fn into_fact(self, histories: Histories) -> SpanFact {
        let mut fact = self.fact;
        fact.input = histories.input;
        fact.all_messages = histories.all_messages;
        fact.system_instructions = histories.system_instructions;
        fact
    }
}

/// What a fact's stored form holds by reference, taken out of the fact by
/// [`StoredFact::from_fact`].
#[derive(Debug, Default)]
pub struct Histories {
    input: Option<Arc<Vec<MessageRef>>>,
    all_messages: Option<Vec<MessageRef>>,
    system_instructions: Option<Value>,
}

impl SpanFact {
    /// A copy of the fact without what its stored form holds by reference (`input`,
    /// `all_messages`, `system_instructions`): field by field, so the long lists are not copied
    /// only to be dropped.
    fn without_histories(&self) -> SpanFact {
        let mut stored = SpanFact::new(self.kind, String::new(), String::new(), String::new());
        let SpanFact {
            kind: _,
            trace_id,
            span_id,
            parent_span_id,
            name,
            start_ns,
            end_ns,
            error,
            agent_name,
            agent_call_id,
            conversation_id,
            service,
            input: _,
            output,
            tool_return_form,
            all_messages: _,
            system_instructions: _,
            model,
            provider,
            input_tokens,
            output_tokens,
            requested_calls,
            tool_name,
            tool_call_id,
            arguments,
            result,
            retry,
            idempotency_key,
            deferral,
            content_problem,
            pending,
            content_from_logs,
            warnings,
            run_info,
        } = self;
        stored.trace_id = trace_id.clone();
        stored.span_id = span_id.clone();
        stored.parent_span_id = parent_span_id.clone();
        stored.name = name.clone();
        stored.start_ns = *start_ns;
        stored.end_ns = *end_ns;
        stored.error = error.clone();
        stored.agent_name = agent_name.clone();
        stored.agent_call_id = agent_call_id.clone();
        stored.conversation_id = conversation_id.clone();
        stored.service = service.clone();
        stored.output = output.clone();
        stored.tool_return_form = *tool_return_form;
        stored.deferral = *deferral;
        stored.model = model.clone();
        stored.provider = provider.clone();
        stored.input_tokens = *input_tokens;
        stored.output_tokens = *output_tokens;
        stored.requested_calls = requested_calls.clone();
        stored.tool_name = tool_name.clone();
        stored.tool_call_id = tool_call_id.clone();
        stored.arguments = arguments.clone();
        stored.result = result.clone();
        stored.retry = retry.clone();
        stored.idempotency_key = idempotency_key.clone();
        stored.content_problem = content_problem.clone();
        stored.pending = *pending;
        stored.content_from_logs = *content_from_logs;
        stored.warnings = warnings.clone();
        stored.run_info = run_info.clone();
        stored
    }
}

/// A tool call a model response asked for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestedCall {
    /// Tool-call id (may be empty when the producer gives none).
    pub id: String,
    /// Tool name.
    pub name: String,
    /// Arguments as the model gave them (object or JSON string).
    pub arguments: Option<Value>,
}

/// Role and result key of a run's tool-return messages. The default, used until a run has shown
/// a tool return, is the semantic conventions' form: role `tool`, key `response`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolReturnForm {
    /// Role of the message.
    pub role: ToolReturnRole,
    /// Key of a part that carries the result (or the error text of a failed call).
    pub result_key: ResultKey,
}

/// Role of a tool-return message.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolReturnRole {
    /// `user` (Pydantic AI up to instrumentation v5).
    User,
    /// `tool` (semantic conventions, Pydantic AI v6).
    #[default]
    Tool,
}

/// Key of a `tool_call_response` part that carries the result.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResultKey {
    /// `result` (Pydantic AI, older producers).
    Result,
    /// `response` (semantic conventions).
    #[default]
    Response,
}

impl SpanFact {
    /// An empty fact of the given kind for a span; the convention modules fill it.
    pub fn new(kind: FactKind, trace_id: String, span_id: String, name: String) -> Self {
        Self {
            kind,
            trace_id,
            span_id,
            parent_span_id: None,
            name,
            start_ns: 0,
            end_ns: 0,
            error: None,
            agent_name: None,
            agent_call_id: None,
            conversation_id: None,
            service: None,
            input: None,
            output: None,
            tool_return_form: None,
            all_messages: None,
            system_instructions: None,
            model: None,
            provider: None,
            input_tokens: None,
            output_tokens: None,
            requested_calls: Vec::new(),
            tool_name: None,
            tool_call_id: None,
            arguments: None,
            result: None,
            retry: None,
            idempotency_key: None,
            deferral: None,
            content_problem: None,
            pending: false,
            content_from_logs: false,
            warnings: Vec::new(),
            run_info: RunInfo::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_fixtures::{delegate_scenario, kv};

    /// Facts with every kind of content: model requests with input, output and system
    /// instructions, a tool call with arguments and result, and agent runs with a final history.
    fn facts() -> Vec<SpanFact> {
        let mut spans = delegate_scenario();
        // The outer run's model request (span 2) also carries system instructions.
        spans[0].attributes.push(kv(
            "gen_ai.system_instructions",
            r#"[{"type":"text","content":"be brief"}]"#,
        ));
        let mut facts: Vec<SpanFact> = spans
            .iter()
            .filter_map(crate::interpreter::interpret_span)
            .map(|i| i.fact)
            .collect();
        let history = facts.iter().find_map(|f| f.input.as_deref().cloned());
        for f in facts.iter_mut().filter(|f| f.kind == FactKind::AgentRun) {
            f.all_messages = history.clone();
        }
        facts
    }

    #[test]
    fn a_fact_stored_by_value_is_stored_as_by_reference_and_comes_back_whole() {
        let facts = facts();
        assert!(facts.iter().any(|f| f.system_instructions.is_some()));
        assert!(facts.iter().any(|f| f.input.is_some()));
        assert!(facts.iter().any(|f| f.all_messages.is_some()));
        assert!(facts.iter().any(|f| f.result.is_some()));
        for fact in facts {
            let by_reference = StoredFact::of(&fact);
            let chains = (
                by_reference.input_chain.clone(),
                by_reference.all_messages_chain.clone(),
            );
            let (by_value, histories) = StoredFact::from_fact(fact.clone(), chains.0, chains.1);
            assert_eq!(by_value, by_reference, "span {}", fact.span_id);
            assert!(by_value.fact.input.is_none() && by_value.fact.all_messages.is_none());
            assert!(by_value.fact.system_instructions.is_none());
            assert_eq!(
                by_value.instructions.is_some(),
                fact.system_instructions.is_some()
            );
            assert_eq!(by_value.into_fact(histories), fact);
        }
    }
}
