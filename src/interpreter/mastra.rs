//! What Mastra's OTel exporter (`@mastra/otel-exporter`, GenAI names) emits beside the GenAI
//! spans [`super::genai`] reads: `invoke_agent {agent}` → `model_generation` (one per
//! `generate` / `stream`) → `agent_step` (one per step) → `chat {model}` and `execute_tool {tool}`,
//! with `model_chunk` leaves. The two middle levels only group the run's model calls and tools.

/// Mastra's operations (`gen_ai.operation.name`) of spans that group a run's model calls and
/// tool calls without being a run.
pub(super) fn is_group_operation(operation: &str) -> bool {
    matches!(operation, "model_generation" | "agent_step")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mastra_levels_between_the_agent_and_its_calls_group() {
        assert!(is_group_operation("agent_step"));
        assert!(is_group_operation("model_generation"));
        assert!(!is_group_operation("model_chunk"));
        assert!(!is_group_operation("chat"));
    }
}
