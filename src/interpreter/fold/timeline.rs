//! A fold step's step events: its model requests, the calls they asked for, its tool spans and,
//! in a fold over all of a run's facts, the run's start and end.

use crate::domain::{format_timestamp, EventKind, StepEvent};
use crate::interpreter::fact::SpanFact;
use crate::records::run_state::{Abandonment, EffectBuild};

/// What starts and ends a run, for a fold over all of its facts.
pub(super) struct Edges<'f> {
    /// The finished run span.
    pub agent: Option<&'f SpanFact>,
    /// The run span while it is running.
    pub started: Option<&'f SpanFact>,
    /// Set when the run was declared dead.
    pub abandoned: Option<&'f Abandonment>,
}

/// The step's events, chronological and numbered from `first_seq`: `models` (in order, the
/// run's `first_step`-th on), the `requested` entries they asked for (in ledger order), `tools`
/// (in order), and with `edges` the run's start and end.
pub(super) fn events<'e>(
    edges: Option<&Edges<'_>>,
    models: &[&SpanFact],
    first_step: usize,
    requested: impl Iterator<Item = &'e EffectBuild>,
    tools: &[&SpanFact],
    first_seq: u32,
) -> Vec<StepEvent> {
    let mut events = Vec::new();
    let mut push = |kind: EventKind,
                    time_ns: u64,
                    span: Option<&str>,
                    tool: Option<(&str, &str)>,
                    error: Option<&String>| {
        events.push(StepEvent {
            seq: 0,
            kind,
            timestamp: format_timestamp(time_ns),
            span_id: span.map(str::to_string),
            tool_call_id: tool.map(|t| t.0.to_string()),
            tool_name: tool.map(|t| t.1.to_string()),
            error: error.cloned(),
            time_ns,
        });
    };
    let run_span = edges.and_then(|e| e.agent.or(e.started));
    if edges.is_some() {
        let first_start = run_span
            .map(|a| a.start_ns)
            .into_iter()
            .chain(models.iter().map(|m| m.start_ns))
            .chain(tools.iter().map(|t| t.start_ns))
            .min();
        if let Some(start) = first_start {
            push(
                EventKind::RunStarted,
                start,
                run_span.map(|a| a.span_id.as_str()),
                None,
                None,
            );
        }
    }
    for m in models {
        push(
            EventKind::ModelRequestStarted,
            m.start_ns,
            Some(&m.span_id),
            None,
            None,
        );
        let kind = if m.error.is_some() {
            EventKind::ModelRequestFailed
        } else {
            EventKind::ModelRequestCompleted
        };
        push(kind, m.end_ns, Some(&m.span_id), None, m.error.as_ref());
    }
    for e in requested {
        if let Some(at) = e.requested_ns {
            let span = e
                .request_step
                .and_then(|s| s.checked_sub(first_step))
                .and_then(|s| models.get(s))
                .map(|m| m.span_id.as_str());
            push(
                EventKind::ToolCallRequested,
                at,
                span,
                Some((&e.effect.tool_call_id, &e.effect.tool_name)),
                None,
            );
        }
    }
    for t in tools {
        let id = t.tool_call_id.as_deref().unwrap_or("");
        let name = t.tool_name.as_deref().unwrap_or("");
        push(
            EventKind::ToolCallStarted,
            t.start_ns,
            Some(&t.span_id),
            Some((id, name)),
            None,
        );
        if t.pending {
            continue;
        }
        let kind = if t.error.is_some() {
            EventKind::ToolCallFailed
        } else {
            EventKind::ToolCallCompleted
        };
        push(
            kind,
            t.end_ns,
            Some(&t.span_id),
            Some((id, name)),
            t.error.as_ref(),
        );
    }
    match (edges.and_then(|e| e.agent), edges.and_then(|e| e.abandoned)) {
        (Some(a), _) => {
            let kind = if a.error.is_some() {
                EventKind::RunFailed
            } else {
                EventKind::RunCompleted
            };
            push(kind, a.end_ns, Some(&a.span_id), None, a.error.as_ref());
        }
        (None, Some(ab)) => push(
            EventKind::RunAbandoned,
            ab.at_ns,
            None,
            None,
            Some(&ab.reason),
        ),
        (None, None) => {}
    }
    // Facts are pushed in a deterministic order (sorted facts, ledger order), so a stable sort
    // keeps simultaneous events, like the calls of one response, in the order they were made.
    events.sort_by_key(|e| (e.time_ns, e.kind.tie_rank()));
    for (n, e) in events.iter_mut().enumerate() {
        e.seq = first_seq + n as u32;
    }
    events
}
