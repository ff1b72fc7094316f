//! Which telemetry convention a span follows, decided per span (one trace may mix producers).

use super::attributes::Attributes;

/// A producer convention.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Convention {
    /// OpenInference (`openinference.span.kind`): OpenAI Agents SDK and other Arize
    /// instrumentations.
    OpenInference,
    /// The OTel GenAI conventions (`gen_ai.operation.name`): Pydantic AI, Strands Agents, and the
    /// older names and event forms of the same conventions.
    GenAi,
    /// LangSmith's OTel mode (`langsmith.span.kind`): LangChain / LangGraph runs as LangSmith
    /// records them, content as raw run JSON in `gen_ai.prompt` / `gen_ai.completion`.
    LangSmith,
    /// OpenLLMetry / Traceloop (`traceloop.span.kind`, or the legacy flattened
    /// `gen_ai.prompt.{i}.*` / `gen_ai.completion.{i}.*` model-request attributes).
    Traceloop,
    /// The Vercel AI SDK's built-in `ai.*` spans (`ai.operationId`): v3–v6, and v7 with
    /// `LegacyOpenTelemetry`.
    VercelAi,
}

/// Detects a span's convention: `openinference.span.kind`, then the Vercel AI SDK's
/// `ai.operationId`, then `langsmith.span.kind` (LangSmith also writes `gen_ai.operation.name`),
/// then `gen_ai.operation.name`, then
/// `traceloop.span.kind`, then the presence of OpenLLMetry's legacy flattened content; spans with
/// none of them fall back to the GenAI interpreter, which recognises the older Pydantic AI span
/// names by attribute presence.
pub fn detect(attrs: &Attributes<'_>) -> Convention {
    if attrs.get("openinference.span.kind").is_some() {
        Convention::OpenInference
    } else if super::vercel_ai::is_vercel_span(attrs) {
        Convention::VercelAi
    } else if attrs.get("langsmith.span.kind").is_some() {
        Convention::LangSmith
    } else if attrs.get("gen_ai.operation.name").is_some() {
        Convention::GenAi
    } else if attrs.get("traceloop.span.kind").is_some()
        || super::openllmetry::has_legacy_content(attrs)
    {
        Convention::Traceloop
    } else {
        Convention::GenAi
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_fixtures::kv;

    #[test]
    fn detection_order() {
        let both = vec![
            kv("gen_ai.operation.name", "chat"),
            kv("openinference.span.kind", "LLM"),
        ];
        assert_eq!(detect(&Attributes(&both)), Convention::OpenInference);
        let genai = vec![
            kv("gen_ai.operation.name", "chat"),
            kv("traceloop.span.kind", "task"),
        ];
        assert_eq!(detect(&Attributes(&genai)), Convention::GenAi);
        let tl = vec![kv("traceloop.span.kind", "task")];
        assert_eq!(detect(&Attributes(&tl)), Convention::Traceloop);
        assert_eq!(detect(&Attributes(&[])), Convention::GenAi);
        let langsmith = vec![
            kv("gen_ai.operation.name", "chat"),
            kv("langsmith.span.kind", "llm"),
        ];
        assert_eq!(detect(&Attributes(&langsmith)), Convention::LangSmith);
        let legacy = vec![kv("gen_ai.prompt.0.role", "user")];
        assert_eq!(detect(&Attributes(&legacy)), Convention::Traceloop);
        let vercel = vec![
            kv("ai.operationId", "ai.generateText"),
            kv("gen_ai.system", "openai"),
        ];
        assert_eq!(detect(&Attributes(&vercel)), Convention::VercelAi);
        let vercel_oi = vec![
            kv("ai.operationId", "ai.generateText"),
            kv("openinference.span.kind", "CHAIN"),
        ];
        assert_eq!(detect(&Attributes(&vercel_oi)), Convention::OpenInference);
    }
}
