//! What Mastra's OTel exporter (`@mastra/otel-exporter`, GenAI names) emits beside the GenAI
//! spans [`super::genai`] reads: `invoke_agent {agent}` → `model_generation` (one per
//! `generate` / `stream`) → `agent_step` (one per step) → `chat {model}` and `execute_tool {tool}`,
//! with `model_chunk` leaves. The two middle levels only group the run's model calls and tools.
//!
//! With `@mastra/core` and `@mastra/observability` versions that emit model-inference spans
//! (1.71 / 1.17.9 recorded), the `chat` span carries no `gen_ai.input.messages` and its
//! `gen_ai.output.messages` keep the text only: no snapshot can be built from it, and
//! [`note_missing_input`] says so.

use super::attributes::Attributes;
use super::fact::SpanFact;

/// Why a Mastra run has no snapshot.
pub const NO_INPUT_MESSAGES: &str =
    "Mastra's OTel exporter writes no gen_ai.input.messages on its \
chat (model inference) spans, and their output keeps the text only: the history is not in the \
spans, so no snapshot can be built";

/// Mastra's operations (`gen_ai.operation.name`) of spans that group a run's model calls and
/// tool calls without being a run.
pub(super) fn is_group_operation(operation: &str) -> bool {
    matches!(operation, "model_generation" | "agent_step")
}

/// Notes on a model request without input history that it is one of Mastra's model-inference
/// spans, whose exporter leaves the history out.
pub(super) fn note_missing_input(attrs: &Attributes<'_>, fact: &mut SpanFact) {
    let inference = attrs.text("mastra.span.type") == Some("model_inference");
    if inference && fact.input.is_none() && fact.error.is_none() {
        fact.content_problem
            .get_or_insert_with(|| NO_INPUT_MESSAGES.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interpreter::fact::FactKind;
    use crate::test_fixtures::kv;

    #[test]
    fn a_mastra_chat_span_without_input_says_why() {
        let attrs = vec![kv("mastra.span.type", "model_inference")];
        let span = crate::test_fixtures::span(2, 1, "chat m", 10, attrs.clone());
        let mut fact = SpanFact::of_finished_span(FactKind::ModelRequest, &span, None).unwrap();
        note_missing_input(&Attributes(&attrs), &mut fact);
        assert_eq!(fact.content_problem.as_deref(), Some(NO_INPUT_MESSAGES));
        let mut other = SpanFact::of_finished_span(FactKind::ModelRequest, &span, None).unwrap();
        note_missing_input(&Attributes(&[]), &mut other);
        assert!(other.content_problem.is_none());
    }

    #[test]
    fn mastra_levels_between_the_agent_and_its_calls_group() {
        assert!(is_group_operation("agent_step"));
        assert!(is_group_operation("model_generation"));
        assert!(!is_group_operation("model_chunk"));
        assert!(!is_group_operation("chat"));
    }
}
