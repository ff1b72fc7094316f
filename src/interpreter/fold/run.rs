//! The run record of a fold over all of a run's facts (its counters are the fold step's, see
//! [`super::step::count`]).

use std::collections::HashSet;

use super::NewFact;
use crate::domain::{format_timestamp, Run, RunStatus, SnapshotRecord, SnapshotState};
use crate::interpreter::fact::SpanFact;
use crate::records::run_state::RunMeta;

/// What the run record is made of.
pub(super) struct Parts<'p, 'f> {
    pub run_id: &'p str,
    /// All facts, in the order given (after joins).
    pub facts: &'f [SpanFact],
    /// The finished run span.
    pub agent: Option<&'f SpanFact>,
    /// The run span while it is running.
    pub started: Option<&'f SpanFact>,
    /// Model requests and tool spans, in sort order.
    pub models: &'p [NewFact<'f>],
    pub tools: &'p [&'f SpanFact],
    pub meta: &'p RunMeta,
    pub status: RunStatus,
    /// Warnings of the joins of id-less tool spans.
    pub join_warnings: &'p [String],
    pub snapshots: &'p [SnapshotRecord],
}

/// The run record, with zero counters.
pub(super) fn record(p: Parts<'_, '_>) -> Run {
    let Parts {
        run_id,
        facts,
        agent,
        started,
        models,
        tools,
        meta,
        status,
        join_warnings,
        snapshots,
    } = p;
    let started_ns = agent
        .map(|a| a.start_ns)
        .or_else(|| facts.iter().map(|f| f.start_ns).min())
        .unwrap_or(0);
    let ended_ns = match (agent, &meta.abandoned) {
        (Some(a), _) => Some(a.end_ns),
        (None, Some(ab)) => Some(ab.at_ns),
        _ => None,
    };
    let first = |pick: fn(&SpanFact) -> Option<&String>| {
        agent
            .and_then(pick)
            .or_else(|| facts.iter().find_map(pick))
            .cloned()
    };
    let mut aliases: Vec<String> = Vec::new();
    let mut seen: HashSet<&str> = HashSet::new();
    for alias in agent
        .into_iter()
        .chain(started)
        .chain(models.iter().map(|n| n.fact))
        .chain(tools.iter().copied())
        .filter_map(|f| f.agent_call_id.as_deref())
    {
        if seen.insert(alias) {
            aliases.push(alias.to_string());
        }
    }
    // What the interpreter cut from the facts' content, in span order.
    let mut warnings = join_warnings.to_vec();
    let mut noted: Vec<&SpanFact> = facts.iter().filter(|f| !f.warnings.is_empty()).collect();
    noted.sort_by(|a, b| (a.start_ns, &a.span_id).cmp(&(b.start_ns, &b.span_id)));
    for f in noted {
        warnings.extend(
            f.warnings
                .iter()
                .map(|w| format!("span {}: {w}", f.span_id)),
        );
    }
    let has_complete = snapshots
        .iter()
        .any(|s| s.meta.state == SnapshotState::Complete);
    let continuation_unavailable = if has_complete {
        None
    } else {
        facts
            .iter()
            .find_map(|f| f.content_problem.clone())
            .or_else(|| {
                snapshots
                    .is_empty()
                    .then(|| "no model request with message content has arrived yet".to_string())
            })
    };
    Run {
        run_id: run_id.to_string(),
        aliases,
        trace_id: facts
            .first()
            .map(|f| f.trace_id.clone())
            .unwrap_or_default(),
        agent_name: first(|f| f.agent_name.as_ref()),
        conversation_id: first(|f| f.conversation_id.as_ref()),
        parent_run_id: meta.parent_run_id.clone(),
        status,
        started_at: format_timestamp(started_ns),
        ended_at: ended_ns.map(format_timestamp),
        error: agent.and_then(|a| a.error.clone()).or_else(|| {
            meta.abandoned
                .as_ref()
                .filter(|_| agent.is_none())
                .map(|a| a.reason.clone())
        }),
        model_request_count: 0,
        tool_call_count: 0,
        snapshot_count: 0,
        event_count: 0,
        input_tokens: 0,
        output_tokens: 0,
        continuation_unavailable,
        warnings,
        started_ns,
        trigger: None,
        attributes: Default::default(),
        tool_time_ms: 0,
        model_time_ms: 0,
        tool_calls_by_status: Default::default(),
        continued_from: None,
        resumed_by_run_id: None,
    }
}
