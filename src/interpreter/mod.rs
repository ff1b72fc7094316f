//! The interpreter: turns OTLP spans into domain records. Pure and synchronous.
//!
//! Each span's convention is detected ([`convention`]); the convention's module maps it onto a
//! [`SpanFact`] of one run. A run's events, effects, snapshots and record are then [`derive`]d
//! from the set of its facts, whatever the convention, so arrival order and duplicate delivery
//! cannot change the outcome.

pub(crate) mod attributes;
mod call_join;
pub mod convention;
mod derive;
mod events;
mod fact;
mod genai;
mod incremental;
mod logs;
mod openai_items;
mod openinference;
mod openllmetry;
pub mod prefix_memo;
mod tool_return;
mod validity;

use opentelemetry_proto::tonic::trace::v1::Span;

pub use convention::Convention;
pub use derive::{derive, Abandonment, DerivedRun, RunMeta};
pub use events::block_to_part;
pub use fact::{FactKind, Interpreted, RequestedCall, SpanFact, StoredFact};
pub use incremental::{append, Append, NewFact, RunState};
pub use logs::{interpret_log, with_log_content, LogEvent};
pub use prefix_memo::{PrefixMemo, SharedMessages};
pub use tool_return::{ResultKey, ToolReturnForm, ToolReturnRole};
pub use validity::{walk, Walk, WalkState};

/// Interprets one span with the module of its convention. Spans that are not agent runs, model
/// requests, tool calls or grouping spans give `None`.
pub fn interpret_span(span: &Span) -> Option<Interpreted> {
    interpret(span, None)
}

/// Interprets one span as [`interpret_span`] does, with the same result, reusing what `memo`
/// holds of the span's run: a model request whose input history extends the last one
/// interpreted for its run parses and hashes only the new messages. Only the OTel GenAI
/// convention's `gen_ai.input.messages` (Pydantic AI 2.x, Strands) goes through the memo; the
/// other conventions flatten or map their messages first and are read in full.
pub fn interpret_span_with(span: &Span, memo: &PrefixMemo) -> Option<Interpreted> {
    interpret(span, Some(memo))
}

fn interpret(span: &Span, memo: Option<&PrefixMemo>) -> Option<Interpreted> {
    let mut interpreted = match convention::detect(&attributes::Attributes(&span.attributes)) {
        Convention::GenAi => genai::interpret_span(span, memo),
        Convention::OpenInference => openinference::interpret_span(span),
        Convention::Traceloop => openllmetry::interpret_span(span),
    }?;
    interpreted.note_tool_return_form();
    Some(interpreted)
}
