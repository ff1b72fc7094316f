//! The interpreter: turns OTLP spans into domain records. Pure and synchronous.
//!
//! Each span's convention is detected ([`convention`]); the convention's module maps it onto a
//! [`SpanFact`] of one run. A run's events, effects, snapshots and record are then [`derive`]d
//! from the set of its facts, whatever the convention, as one fold ([`fold`]) that [`append`]
//! continues with new facts, so arrival order and duplicate delivery cannot change the outcome.

mod adk;
pub(crate) mod attributes;
mod blocks;
pub mod budget;
mod call_join;
mod chat_shape;
pub mod convention;
mod events;
mod fact;
mod fold;
mod genai;
#[cfg(test)]
mod hardening_tests;
mod langchain;
mod langsmith;
mod logs;
mod mastra;
mod openai_items;
mod openinference;
mod openinference_frameworks;
mod openllmetry;
pub mod prefix_memo;
mod run_info;
mod tool_return;
mod validity;
pub mod vercel_ai;

use opentelemetry_proto::tonic::trace::v1::Span;

pub use crate::records::run_state::{Abandonment, RunMeta, RunState};
pub use blocks::block_to_part;
pub use budget::{NotInterpreted, OverLimit};
pub use convention::Convention;
pub use fact::{FactKind, Interpreted, RequestedCall, SpanFact, StoredFact};
pub use fold::{append, derive, waiting_calls, Append, DerivedRun, NewFact};
pub use logs::{interpret_log, with_log_content, with_log_content_within, LogEvent};
pub use prefix_memo::{PrefixMemo, SharedMessages};
pub use run_info::{note_run_info, ResourceInfo};
pub use tool_return::{ResultKey, ToolReturnForm, ToolReturnRole};
pub use validity::{walk, Walk, WalkState};

use crate::limits::Limits;

/// True when spans may be keyed by `fact`'s span and belong to the run above it: grouping spans,
/// and model requests that nest their tool calls (the Vercel AI SDK's v7 `LegacyOpenTelemetry`
/// and `streamText` `ai.*` spans). Apply resolves such children to the run above.
pub fn groups_children(fact: &SpanFact) -> bool {
    fact.kind == FactKind::Group || vercel_ai::nests_tool_calls(fact)
}

/// Interprets one span within the default [`Limits`]. Spans that are not agent runs, model
/// requests, tool calls or grouping spans, and spans over a cap, give `None`
/// ([`interpret_span_within`] says why).
pub fn interpret_span(span: &Span) -> Option<Interpreted> {
    interpret(span, None, &Limits::default()).ok()
}

/// Interprets one span within `limits`: a span over a per-span cap is not interpreted (the
/// reason says which), and every JSON value kept is cut to `limits.max_nesting_depth` (the
/// fact's warnings say what was cut).
pub fn interpret_span_within(span: &Span, limits: &Limits) -> Result<Interpreted, NotInterpreted> {
    interpret(span, None, limits)
}

/// Interprets one span as [`interpret_span_within`] does, with the same result, reusing what
/// `memo` holds of the span's run: a model request whose input history extends the last one
/// interpreted for its run parses and hashes only the new messages, and so does an agent run's
/// `pydantic_ai.all_messages` that extends its last model request's input. The OTel GenAI
/// `gen_ai.input.messages` (Pydantic AI 2.x, Strands), `pydantic_ai.all_messages` and the
/// Vercel AI SDK's `ai.prompt.messages` (mapped message by message) go through the memo; the
/// other conventions flatten their messages into attributes or events and are read in full.
pub fn interpret_span_with(
    span: &Span,
    memo: &PrefixMemo,
    limits: &Limits,
) -> Result<Interpreted, NotInterpreted> {
    interpret(span, Some(memo), limits)
}

fn interpret(
    span: &Span,
    memo: Option<&PrefixMemo>,
    limits: &Limits,
) -> Result<Interpreted, NotInterpreted> {
    budget::check_span(span, limits)?;
    let mut cut = budget::Cut::new(limits);
    let interpreted = match convention::detect(&attributes::Attributes(&span.attributes)) {
        Convention::GenAi => genai::interpret_span(span, memo, &mut cut),
        Convention::OpenInference => openinference::interpret_span(span, &mut cut),
        Convention::Traceloop => openllmetry::interpret_span(span, &mut cut),
        Convention::VercelAi => vercel_ai::interpret_span(span, memo, &mut cut),
        Convention::LangSmith => langsmith::interpret_span(span, &mut cut),
    };
    let mut interpreted = interpreted.ok_or(NotInterpreted::NotAgentSpan)?;
    budget::check_interpreted(&interpreted, limits)?;
    let fact = &mut interpreted.fact;
    cut.apply_opt("system instructions", &mut fact.system_instructions);
    cut.apply_opt("tool arguments", &mut fact.arguments);
    cut.apply_opt("tool result", &mut fact.result);
    cut.apply_opt("tool retry details", &mut fact.retry);
    for call in &mut fact.requested_calls {
        cut.apply_opt("tool call arguments", &mut call.arguments);
    }
    fact.warnings = cut.warnings();
    interpreted.note_tool_return_form();
    Ok(interpreted)
}
