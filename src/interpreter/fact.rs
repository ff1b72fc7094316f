//! Span facts: what one recognised span says about its run. The fact types are records
//! ([`crate::records::fact`]); this module builds them from spans.

use serde_json::Value;

use super::prefix_memo::SharedMessages;
use super::tool_return::ToolReturnForm;
use crate::domain::MessageHash;
pub use crate::records::fact::{FactKind, RequestedCall, SpanFact, StoredFact};

/// The outcome of interpreting one span.
#[derive(Debug, Clone, PartialEq)]
pub struct Interpreted {
    /// The run key span: the agent-run span id of the run this span belongs to (hex).
    pub run_span_id: String,
    /// The fact.
    pub fact: SpanFact,
    /// Message bodies referenced by the fact, with their hashes, to store once per run (the
    /// input's bodies that `shared` holds are not repeated here).
    pub messages: Vec<(MessageHash, Value)>,
    /// Bodies of the fact's input (of its `all_messages` for an agent run, which has no input),
    /// by position, shared with the interpreter's memo rather than copied: the `i`-th holds the
    /// body of `fact.input[i]` (`fact.all_messages[i]`) when their hashes are equal (media
    /// offloading may rename a message, whose new body is then in `messages`).
    pub shared: SharedMessages,
}

impl SpanFact {
    /// A fact of `kind` for a finished `span`: its ids (hex), parent, times and `error` filled in,
    /// the rest left for the convention module. `None` when the span's ids have the wrong length.
    pub fn of_finished_span(
        kind: FactKind,
        span: &opentelemetry_proto::tonic::trace::v1::Span,
        error: Option<String>,
    ) -> Option<Self> {
        if span.trace_id.len() != 16 || span.span_id.len() != 8 {
            return None;
        }
        let mut fact = Self::new(
            kind,
            super::attributes::hex_id(&span.trace_id),
            super::attributes::hex_id(&span.span_id),
            span.name.clone(),
        );
        fact.parent_span_id = (span.parent_span_id.len() == 8)
            .then(|| super::attributes::hex_id(&span.parent_span_id));
        fact.start_ns = span.start_time_unix_nano;
        fact.end_ns = span.end_time_unix_nano.max(span.start_time_unix_nano);
        fact.error = error;
        Some(fact)
    }
}

impl Interpreted {
    /// Keys `fact` to its run: an agent-run span is its own run key; any other span is keyed by
    /// its parent (apply resolves grouping spans in between), so a run's id is the same whether
    /// or not its agent-run span ever arrives.
    pub fn keyed(fact: SpanFact, messages: Vec<(MessageHash, Value)>) -> Self {
        let run_span_id = match (fact.kind, &fact.parent_span_id) {
            (FactKind::AgentRun, _) | (_, None) => fact.span_id.clone(),
            (_, Some(parent)) => parent.clone(),
        };
        Self {
            run_span_id,
            fact,
            messages,
            shared: SharedMessages::default(),
        }
    }

    /// The body of the `i`-th message of the fact's input: the shared one when its hash is that
    /// message's, else the one of `messages` with that hash.
    fn input_body(&self, i: usize, hash: &MessageHash) -> Option<&Value> {
        let shared = self
            .shared
            .iter_from(i)
            .next()
            .filter(|(at, m)| *at == i && m.reference.hash == *hash)
            .map(|(_, m)| &m.body);
        shared.or_else(|| {
            self.messages
                .iter()
                .find(|(h, _)| h == hash)
                .map(|(_, v)| v)
        })
    }

    /// Records on a model-request fact the form of the last tool return of its input (whether
    /// the input was parsed now or mostly taken from the memo, the bodies are the same).
    pub(super) fn note_tool_return_form(&mut self) {
        let form = match (&self.fact.kind, &self.fact.input) {
            (FactKind::ModelRequest, Some(input)) => {
                ToolReturnForm::last_in(input, |i, hash| self.input_body(i, hash))
            }
            _ => None,
        };
        self.fact.tool_return_form = form;
    }

    /// Every message body the interpretation carries, with its hash: the shared ones, then
    /// `messages`.
    pub fn bodies(&self) -> impl Iterator<Item = (&MessageHash, &Value)> + '_ {
        let shared = self.shared.iter().map(|m| (&m.reference.hash, &m.body));
        shared.chain(self.messages.iter().map(|(h, v)| (h, v)))
    }
}
