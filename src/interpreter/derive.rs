//! Deriving a run from the set of its facts: record, events, tool-effect ledger and snapshots.
//!
//! `derive` is a pure function of the facts and the run's meta (lineage, abandonment), so the
//! same facts give the same run whatever order they arrived in, and a duplicate changes nothing.

use std::collections::{HashMap, HashSet, VecDeque};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::fact::{FactKind, SpanFact};
use super::tool_return::{Answer, ToolReturnForm};

use super::incremental::{state_after_derive, RunState, SnapshotTail};
use super::validity::{Walk, WalkState};
use crate::domain::{
    format_timestamp, ChainIds, ChainRef, EffectStatus, EventKind, HistoryNode, IdSet, MessageHash,
    MessageRef, NodeId, Run, RunStatus, SnapshotMeta, SnapshotRecord, SnapshotSource,
    SnapshotState, StepEvent, ToolEffect,
};

/// What is known of a run besides its span facts.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunMeta {
    /// The run whose tool call started this one, once the link is resolved.
    pub parent_run_id: Option<String>,
    /// Set when the run was declared dead.
    pub abandoned: Option<Abandonment>,
    /// Wall-clock nanoseconds when a new fact of the run last arrived.
    pub last_seen_ns: u64,
    /// Raised by every write of the run's derived state (run record, events, effects,
    /// snapshots), to at least the writer's clock: state read at one revision can be reused while
    /// the revision is unchanged, and a run deleted and made again (a merged orphan) does not
    /// start over at a revision an earlier run of that id had.
    #[serde(default)]
    pub revision: u64,
}

/// A run declared dead.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Abandonment {
    /// When, in nanoseconds since the epoch.
    pub at_ns: u64,
    /// Why (`abandoned by request`, `no telemetry for 600s`).
    pub reason: String,
}

/// Everything derived for one run.
#[derive(Debug, Clone, PartialEq)]
pub struct DerivedRun {
    /// The run record.
    pub run: Run,
    /// Step events, chronological.
    pub events: Vec<StepEvent>,
    /// The tool-effect ledger, in request order.
    pub effects: Vec<ToolEffect>,
    /// Snapshots, in step order, each naming its history chain.
    pub snapshots: Vec<SnapshotRecord>,
    /// Bodies the derivation refers to besides the facts' messages (reconstructed tool returns,
    /// system instructions), to store with the run's messages.
    pub new_messages: Vec<Value>,
    /// Every node of the snapshots' history chains.
    pub nodes: Vec<(NodeId, HistoryNode)>,
    /// What appending new facts to the run needs (none once the run is over).
    pub state: Option<RunState>,
}

/// A ledger entry while it is being built.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct EffectBuild {
    pub effect: ToolEffect,
    /// Index of the model request that asked for it.
    pub request_step: Option<usize>,
    pub requested_ns: Option<u64>,
    pub ended_ns: Option<u64>,
}

/// Derives a run from its facts.
pub fn derive(run_id: &str, facts: &[SpanFact], meta: &RunMeta) -> DerivedRun {
    // Joins of id-less tool spans depend on every fact of the run (a later call or tool span
    // can move them), so such runs are never appended to: no working state is kept for them.
    let appendable = !facts.iter().any(super::call_join::missing);
    let (facts, join_warnings) = &super::call_join::join(facts);
    let agent = facts
        .iter()
        .filter(|f| f.kind == FactKind::AgentRun && !f.pending)
        .min_by_key(|f| (f.start_ns, f.span_id.as_str()));
    // A run known only from its pending span: running, with its ids.
    let started = facts
        .iter()
        .filter(|f| f.kind == FactKind::AgentRun && f.pending)
        .min_by_key(|f| (f.start_ns, f.span_id.as_str()));
    let mut models: Vec<&SpanFact> = facts
        .iter()
        .filter(|f| f.kind == FactKind::ModelRequest)
        .collect();
    models.sort_by_key(|f| (f.start_ns, f.span_id.as_str()));
    let mut tools: Vec<&SpanFact> = facts
        .iter()
        .filter(|f| f.kind == FactKind::ToolCall)
        .collect();
    tools.sort_by_key(|f| (f.start_ns, f.span_id.as_str()));

    let status = match (agent, &meta.abandoned) {
        (Some(a), _) if a.error.is_some() => RunStatus::Failed,
        (Some(_), _) => RunStatus::Completed,
        (None, Some(_)) => RunStatus::Abandoned,
        (None, None) => RunStatus::Running,
    };

    let effects = build_effects(&models, &tools, agent, status);
    let events = build_events(agent, started, &models, &tools, &effects, Some(meta));
    // The instructions of the last agent-run fact (pending or not), in span order.
    let agent_instructions = facts
        .iter()
        .rfind(|f| f.kind == FactKind::AgentRun)
        .and_then(|f| f.system_instructions.as_ref());
    let built = build_snapshots(&models, agent, agent_instructions, &effects);
    let snapshots = built.records;
    // What appending to the run needs, while it is running.
    let state = (appendable && agent.is_none() && meta.abandoned.is_none())
        .then(|| state_after_derive(&models, &tools, &effects, &events, &snapshots, built.tail));

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
        .chain(models.iter().copied())
        .chain(tools.iter().copied())
        .filter_map(|f| f.agent_call_id.as_deref())
    {
        if seen.insert(alias) {
            aliases.push(alias.to_string());
        }
    }
    // What the interpreter cut from the facts' content, in span order.
    let mut warnings = join_warnings.clone();
    let mut noted: Vec<&SpanFact> = facts.iter().filter(|f| !f.warnings.is_empty()).collect();
    noted.sort_by_key(|f| (f.start_ns, f.span_id.as_str()));
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

    let run = Run {
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
        model_request_count: models.len() as u32,
        tool_call_count: effects.len() as u32,
        snapshot_count: snapshots.len() as u32,
        event_count: events.len() as u32,
        input_tokens: models.iter().filter_map(|m| m.input_tokens).sum(),
        output_tokens: models.iter().filter_map(|m| m.output_tokens).sum(),
        continuation_unavailable,
        warnings,
        started_ns,
    };
    DerivedRun {
        run,
        events,
        effects: effects.into_iter().map(|e| e.effect).collect(),
        snapshots,
        new_messages: built.new_messages,
        nodes: built.nodes,
        state,
    }
}

fn build_effects(
    models: &[&SpanFact],
    tools: &[&SpanFact],
    agent: Option<&SpanFact>,
    status: RunStatus,
) -> Vec<EffectBuild> {
    let mut ledger: Vec<EffectBuild> = Vec::new();
    // Entries per tool-call id so far (an id the model reuses gets the next occurrence).
    let mut counts: HashMap<String, u32> = HashMap::new();
    let mut occurrence = |id: &str| {
        let count = counts.entry(id.to_string()).or_insert(0);
        *count += 1;
        *count - 1
    };
    // Entries no tool span has settled yet, in ledger order, by call id and by tool name (an
    // entry settled through one index is skipped when met in the other).
    let mut unsettled_by_id: HashMap<String, VecDeque<usize>> = HashMap::new();
    let mut unsettled_by_name: HashMap<String, VecDeque<usize>> = HashMap::new();

    // The model asked for these.
    for (step, model) in models.iter().enumerate() {
        if model.error.is_some() {
            continue;
        }
        for call in &model.requested_calls {
            let occurrence = occurrence(&call.id);
            let index = ledger.len();
            unsettled_by_id
                .entry(call.id.clone())
                .or_default()
                .push_back(index);
            unsettled_by_name
                .entry(call.name.clone())
                .or_default()
                .push_back(index);
            ledger.push(EffectBuild {
                effect: ToolEffect {
                    tool_call_id: call.id.clone(),
                    tool_name: call.name.clone(),
                    status: EffectStatus::Requested,
                    arguments: call.arguments.clone(),
                    requested_at: Some(format_timestamp(model.end_ns)),
                    started_at: None,
                    ended_at: None,
                    result: None,
                    error: None,
                    idempotency_key: None,
                    occurrence,
                    span_id: None,
                    retry: None,
                },
                request_step: Some(step),
                requested_ns: Some(model.end_ns),
                ended_ns: None,
            });
        }
    }

    // Tool spans settle them (or stand alone when the request was not seen).
    for tool in tools {
        let id = tool.tool_call_id.clone().unwrap_or_default();
        let name = tool.tool_name.clone().unwrap_or_default();
        let queue = if id.is_empty() {
            unsettled_by_name.get_mut(&name)
        } else {
            unsettled_by_id.get_mut(&id)
        };
        // The first unsettled entry of that id (or name): entries settled meanwhile are dropped.
        let slot = queue.and_then(|q| {
            while let Some(&i) = q.front() {
                if ledger[i].effect.span_id.is_none() {
                    q.pop_front();
                    return Some(i);
                }
                q.pop_front();
            }
            None
        });
        let index = match slot {
            Some(i) => i,
            None => {
                let occurrence = occurrence(&id);
                ledger.push(EffectBuild {
                    effect: ToolEffect {
                        tool_call_id: id.clone(),
                        tool_name: name.clone(),
                        status: EffectStatus::Started,
                        arguments: None,
                        requested_at: None,
                        started_at: None,
                        ended_at: None,
                        result: None,
                        error: None,
                        idempotency_key: None,
                        occurrence,
                        span_id: None,
                        retry: None,
                    },
                    request_step: None,
                    requested_ns: None,
                    ended_ns: None,
                });
                ledger.len() - 1
            }
        };
        let entry = &mut ledger[index];
        let e = &mut entry.effect;
        e.span_id = Some(tool.span_id.clone());
        if e.tool_name.is_empty() {
            e.tool_name = name;
        }
        if e.arguments.is_none() {
            e.arguments = tool.arguments.clone();
        }
        e.started_at = Some(format_timestamp(tool.start_ns));
        if tool.pending {
            e.status = EffectStatus::Started;
            continue;
        }
        settle(entry, tool);
    }

    // A result that shows up in a later history settles a call whose tool span never came
    // (output tools, tools run outside the instrumentation).
    let answers = ledger
        .iter()
        .any(|e| e.effect.status == EffectStatus::Requested)
        .then(|| HistoryAnswers::of(models, agent));
    for entry in ledger.iter_mut() {
        let Some(answers) = &answers else { break };
        if entry.effect.status != EffectStatus::Requested {
            continue;
        }
        let after = entry.requested_ns.unwrap_or(0);
        let answered = answers.first_after(&entry.effect.tool_call_id, after);
        if let Some(at) = answered {
            entry.effect.status = EffectStatus::Completed;
            entry.effect.ended_at = Some(format_timestamp(at));
        }
    }

    if status.is_over() {
        for entry in ledger.iter_mut() {
            if entry.effect.status.is_unsettled() {
                entry.effect.status = EffectStatus::UnknownAfterCrash;
            }
        }
    }
    ledger
}

/// Where the inputs of a run's model requests (and the agent's final history) answer tool
/// calls, so each ledger entry finds its answer with one lookup.
struct HistoryAnswers<'a> {
    /// Per closed call id, the start times of the requests whose input closes it, ascending.
    by_request: HashMap<&'a str, Vec<u64>>,
    /// Call ids the agent's final history closes, and the agent's end.
    final_history: Option<(HashSet<&'a str>, u64)>,
}

impl<'a> HistoryAnswers<'a> {
    /// Reads every history once; `models` are in start order.
    fn of(models: &[&'a SpanFact], agent: Option<&'a SpanFact>) -> Self {
        let mut by_request: HashMap<&'a str, Vec<u64>> = HashMap::new();
        for &m in models {
            for message in m.input.iter().flat_map(|i| i.iter()) {
                for id in &message.shape.closes {
                    let starts = by_request.entry(id.as_str()).or_default();
                    if starts.last() != Some(&m.start_ns) {
                        starts.push(m.start_ns);
                    }
                }
            }
        }
        let final_history = agent.and_then(|a| {
            let all = a.all_messages.as_ref()?;
            let ids = all
                .iter()
                .flat_map(|m| m.shape.closes.iter().map(String::as_str))
                .collect();
            Some((ids, a.end_ns))
        });
        Self {
            by_request,
            final_history,
        }
    }

    /// When call `id` is first answered: the start of the first request at or after `after`
    /// whose input closes it, else the agent's end when its final history does.
    fn first_after(&self, id: &str, after: u64) -> Option<u64> {
        self.by_request
            .get(id)
            .and_then(|starts| starts.get(starts.partition_point(|&s| s < after)).copied())
            .or_else(|| {
                self.final_history
                    .as_ref()
                    .filter(|(ids, _)| ids.contains(id))
                    .map(|(_, end)| *end)
            })
    }
}

/// Records what a finished tool span says on its ledger entry: end time, result or error, and
/// the status they give. The full and the incremental derivation both settle calls this way.
pub(super) fn settle(entry: &mut EffectBuild, tool: &SpanFact) {
    let e = &mut entry.effect;
    e.ended_at = Some(format_timestamp(tool.end_ns));
    e.result = tool.result.clone();
    e.error = tool.error.clone();
    e.retry = tool.retry.clone();
    e.idempotency_key = tool.idempotency_key.clone();
    e.status = if tool.error.is_some() {
        EffectStatus::Failed
    } else {
        EffectStatus::Completed
    };
    entry.ended_ns = Some(tool.end_ns);
}

/// The run's events, chronological and numbered from 0; with `meta` none, only the events of
/// the given model requests, tool calls and ledger entries (no run start or end).
pub(super) fn build_events(
    agent: Option<&SpanFact>,
    started: Option<&SpanFact>,
    models: &[&SpanFact],
    tools: &[&SpanFact],
    effects: &[EffectBuild],
    meta: Option<&RunMeta>,
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

    let first_start = agent
        .or(started)
        .map(|a| a.start_ns)
        .into_iter()
        .chain(models.iter().map(|m| m.start_ns))
        .chain(tools.iter().map(|t| t.start_ns))
        .min()
        .filter(|_| meta.is_some());
    if let Some(start) = first_start {
        push(
            EventKind::RunStarted,
            start,
            agent.or(started).map(|a| a.span_id.as_str()),
            None,
            None,
        );
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
    for e in effects {
        if let Some(at) = e.requested_ns {
            let span = e
                .request_step
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
    match (agent, meta.and_then(|m| m.abandoned.as_ref())) {
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
    for (seq, e) in events.iter_mut().enumerate() {
        e.seq = seq as u32;
    }
    events
}

/// Snapshots, chain nodes and message bodies a derivation produced.
pub(super) struct BuiltSnapshots {
    pub records: Vec<SnapshotRecord>,
    pub new_messages: Vec<Value>,
    pub nodes: Vec<(NodeId, HistoryNode)>,
    /// Where the snapshots stand after the last model request.
    pub tail: SnapshotTail,
}

/// The reconstructed tool message answering `open` calls of a model request from its settled
/// ledger entries, in `form`, with the time of the last answer; none unless every open call is
/// answered. Parts follow the order of `open` (the order of the calls); a failed call's error
/// text goes under the same key as a result.
pub(super) fn reconstructed_answer<'e>(
    open: &[String],
    entries: impl Iterator<Item = &'e EffectBuild> + Clone,
    fallback_ns: u64,
    form: ToolReturnForm,
) -> Option<(Value, u64)> {
    // The first settled entry of each call id, in entry order.
    let mut settled: HashMap<&str, &EffectBuild> = HashMap::new();
    for e in entries {
        if e.effect.span_id.is_some()
            && matches!(
                e.effect.status,
                EffectStatus::Completed | EffectStatus::Failed
            )
        {
            settled.entry(e.effect.tool_call_id.as_str()).or_insert(e);
        }
    }
    let answers: Option<Vec<&EffectBuild>> = open
        .iter()
        .map(|id| settled.get(id.as_str()).copied())
        .collect();
    let answers = answers?;
    let message = form.message(answers.iter().map(|e| {
        Answer {
            id: &e.effect.tool_call_id,
            name: &e.effect.tool_name,
            result: e
                .effect
                .result
                .clone()
                .or_else(|| e.effect.error.clone().map(Value::String))
                .unwrap_or(Value::Null),
        }
    }));
    let time_ns = answers
        .iter()
        .filter_map(|e| e.ended_ns)
        .max()
        .unwrap_or(fallback_ns);
    Some((message, time_ns))
}

/// The snapshots of a run: per model request its input and its full history (input + output),
/// and, while the next request is not seen, the full history answered from the tool spans.
///
/// A reconstructed answer to the calls of request `k` takes the tool-return form of the latest
/// of requests `0..=k` that showed one in its input (the default form before any did). That is
/// what the run itself sends next, known as soon as request `k` is, and the same whichever
/// facts come after it: an append (`super::incremental`) keeps the form reached so far in its
/// state and answers the last request with it, exactly as this does.
fn build_snapshots(
    models: &[&SpanFact],
    agent: Option<&SpanFact>,
    agent_instructions: Option<&Value>,
    effects: &[EffectBuild],
) -> BuiltSnapshots {
    let mut out = SnapshotBuilder::new(0, None);
    let mut chain = ChainIds::default();
    let mut emitted: IdSet<NodeId> = IdSet::default();
    let mut nodes: Vec<(NodeId, HistoryNode)> = Vec::new();
    let mut new_messages = Vec::new();
    let mut instruction_bodies: IdSet<MessageHash> = IdSet::default();
    let mut instructions = |value: Option<&Value>, new_messages: &mut Vec<Value>| {
        value.map(|v| {
            let hash = MessageHash::of(v);
            if instruction_bodies.insert(hash) {
                new_messages.push(v.clone());
            }
            hash
        })
    };
    // Chains the history of `parts` and emits its nodes not emitted yet.
    let mut link = |parts: &[&[MessageRef]], nodes: &mut Vec<(NodeId, HistoryNode)>| {
        chain.ids(parts.iter().flat_map(|p| p.iter().map(|m| &m.hash)));
        let fresh = chain.take_fresh();
        for (id, node) in chain.nodes_from(fresh) {
            if emitted.insert(*id) {
                nodes.push((*id, node));
            }
        }
        chain.current()
    };
    let mut latest_model_instructions: Option<&Value> = None;
    let mut fixed = (0, None);
    let mut last_full = None;
    let mut form = None;
    for (k, m) in models.iter().enumerate() {
        let step_index = k as u32 + 1;
        if let Some(v) = &m.system_instructions {
            latest_model_instructions = Some(v);
        }
        form = m.tool_return_form.or(form);
        fixed = (out.next_seq, out.previous.clone());
        last_full = None;
        let Some(input) = &m.input else { continue };
        let instr = instructions(
            latest_model_instructions.or(agent_instructions),
            &mut new_messages,
        );
        let mut walk = WalkState::default();
        input.iter().for_each(|r| walk.push(&r.shape));
        let history = link(&[input], &mut nodes);
        out.push(
            history,
            &walk,
            SnapshotSource::Observed,
            step_index,
            m.start_ns,
            instr,
        );
        fixed = (out.next_seq, out.previous.clone());
        let (None, Some(output)) = (&m.error, &m.output) else {
            continue;
        };
        output.iter().for_each(|r| walk.push(&r.shape));
        let history = link(&[input, output], &mut nodes);
        out.push(
            history.clone(),
            &walk,
            SnapshotSource::Observed,
            step_index,
            m.end_ns,
            instr,
        );
        fixed = (out.next_seq, out.previous.clone());
        last_full = Some(LastFull {
            history,
            walk: walk.clone(),
            end_ns: m.end_ns,
        });
        let open = match walk.result() {
            Walk::Open(ids) => ids,
            _ => Vec::new(),
        };
        let next_observed = models.get(k + 1).is_some_and(|n| n.input.is_some());
        if open.is_empty() || next_observed {
            continue;
        }
        // Before the next request exists, answer the calls from the tool spans' results.
        let entries = effects.iter().filter(|e| e.request_step == Some(k));
        let Some((message, time_ns)) =
            reconstructed_answer(&open, entries, m.end_ns, form.unwrap_or_default())
        else {
            continue;
        };
        let answer = [MessageRef::of(&message)];
        new_messages.push(message);
        walk.push(&answer[0].shape);
        let history = link(&[input, output, &answer], &mut nodes);
        out.push(
            history,
            &walk,
            SnapshotSource::Reconstructed,
            step_index,
            time_ns,
            instr,
        );
    }
    // The tail's instructions are what an append gives its snapshots without storing them
    // again, so their bodies are stored now even when no snapshot here refers to them (a model
    // request without an input, or an agent without its final history, names them first).
    let latest = instructions(latest_model_instructions, &mut new_messages);
    let from_agent = instructions(agent_instructions, &mut new_messages);
    if let Some((a, all)) = agent.and_then(|a| a.all_messages.as_ref().map(|all| (a, all))) {
        let instr = instructions(
            latest_model_instructions.or(agent_instructions),
            &mut new_messages,
        );
        let mut walk = WalkState::default();
        all.iter().for_each(|r| walk.push(&r.shape));
        let history = link(&[all], &mut nodes);
        out.push(
            history,
            &walk,
            SnapshotSource::Observed,
            models.len() as u32,
            a.end_ns,
            instr,
        );
    }
    BuiltSnapshots {
        records: out.records,
        new_messages,
        nodes,
        tail: SnapshotTail {
            fixed,
            last_full,
            instructions: (latest, from_agent),
            tool_return_form: form,
        },
    }
}

/// The full history of a model request (input + output) and the walk at its end.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct LastFull {
    pub history: ChainRef,
    pub walk: WalkState,
    pub end_ns: u64,
}

/// Numbers snapshots and drops a candidate equal to the one before it (same history and state).
pub(super) struct SnapshotBuilder {
    /// The records built, from the first seq given to [`SnapshotBuilder::new`].
    pub records: Vec<SnapshotRecord>,
    pub next_seq: u32,
    pub previous: Option<(ChainRef, SnapshotState)>,
}

impl SnapshotBuilder {
    /// A builder whose first record gets `next_seq`, after a record with `previous`.
    pub fn new(next_seq: u32, previous: Option<(ChainRef, SnapshotState)>) -> Self {
        Self {
            records: Vec::new(),
            next_seq,
            previous,
        }
    }

    /// Adds a candidate snapshot.
    pub fn push(
        &mut self,
        history: ChainRef,
        walk: &WalkState,
        source: SnapshotSource,
        step_index: u32,
        time_ns: u64,
        instructions: Option<MessageHash>,
    ) {
        let (state, reason) = match walk.result() {
            Walk::Complete => (SnapshotState::Complete, None),
            Walk::Open(ids) => (
                SnapshotState::Interrupted,
                Some(format!("tool calls {ids:?} are not answered yet")),
            ),
            Walk::Invalid(why) => (SnapshotState::Interrupted, Some(why)),
        };
        if self
            .previous
            .as_ref()
            .is_some_and(|(h, s)| *h == history && *s == state)
        {
            return;
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        self.records.push(SnapshotRecord {
            meta: SnapshotMeta {
                seq,
                step_index,
                state,
                source,
                message_count: history.len,
                timestamp: format_timestamp(time_ns),
                reason,
            },
            history: history.clone(),
            instructions,
        });
        self.previous = Some((history, state));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interpreter::fact::RequestedCall;
    use serde_json::json;

    fn msg(v: Value) -> MessageRef {
        MessageRef::of(&v)
    }

    fn user() -> Value {
        json!({"role":"user","parts":[{"type":"text","content":"Plan a trip"}]})
    }

    fn call(id: &str) -> Value {
        json!({"role":"assistant","parts":[{"type":"tool_call","id":id,"name":"get_weather","arguments":{"city":"Paris"}}]})
    }

    fn answer(id: &str) -> Value {
        json!({"role":"user","parts":[{"type":"tool_call_response","id":id,"name":"get_weather","result":"18C"}]})
    }

    fn text() -> Value {
        json!({"role":"assistant","parts":[{"type":"text","content":"Done"}]})
    }

    fn model(span: &str, start: u64, input: Vec<Value>, output: Vec<Value>) -> SpanFact {
        let mut f = SpanFact::new(
            FactKind::ModelRequest,
            "t".repeat(32),
            span.into(),
            "chat m".into(),
        );
        f.start_ns = start;
        f.end_ns = start + 10;
        f.requested_calls = output
            .iter()
            .flat_map(|m| m["parts"].as_array().cloned().unwrap_or_default())
            .filter(|p| p["type"] == "tool_call")
            .map(|p| RequestedCall {
                id: p["id"].as_str().unwrap().into(),
                name: p["name"].as_str().unwrap().into(),
                arguments: Some(p["arguments"].clone()),
            })
            .collect();
        let refs: Vec<MessageRef> = input.iter().map(MessageRef::of).collect();
        f.tool_return_form = ToolReturnForm::last_in(&refs, |i, _| input.get(i));
        f.input = Some(std::sync::Arc::new(refs));
        f.output = Some(output.into_iter().map(msg).collect());
        f.agent_call_id = Some("call-1".into());
        f
    }

    fn tool(span: &str, id: &str, start: u64, error: bool) -> SpanFact {
        let mut f = SpanFact::new(
            FactKind::ToolCall,
            "t".repeat(32),
            span.into(),
            "execute_tool get_weather".into(),
        );
        f.start_ns = start;
        f.end_ns = start + 5;
        f.tool_call_id = Some(id.into());
        f.tool_name = Some("get_weather".into());
        f.result = Some(json!("18C"));
        f.error = error.then(|| "boom".to_string());
        f
    }

    fn agent(start: u64, end: u64) -> SpanFact {
        let mut f = SpanFact::new(
            FactKind::AgentRun,
            "t".repeat(32),
            "a".into(),
            "invoke_agent x".into(),
        );
        f.start_ns = start;
        f.end_ns = end;
        f.agent_name = Some("x".into());
        f.agent_call_id = Some("call-1".into());
        f.all_messages = Some(vec![
            msg(user()),
            msg(call("c1")),
            msg(answer("c1")),
            msg(text()),
        ]);
        f
    }

    fn full_run() -> Vec<SpanFact> {
        vec![
            model("m1", 100, vec![user()], vec![call("c1")]),
            tool("t1", "c1", 120, false),
            model(
                "m2",
                200,
                vec![user(), call("c1"), answer("c1")],
                vec![text()],
            ),
            agent(50, 300),
        ]
    }

    #[test]
    fn arrival_order_does_not_matter() {
        let facts = full_run();
        let a = derive("r", &facts, &RunMeta::default());
        let mut reversed = facts.clone();
        reversed.reverse();
        let b = derive("r", &reversed, &RunMeta::default());
        assert_eq!(a, b);
        assert_eq!(a.run.status, RunStatus::Completed);
        assert_eq!(a.run.aliases, vec!["call-1".to_string()]);
        let kinds: Vec<EventKind> = a.events.iter().map(|e| e.kind).collect();
        assert_eq!(
            kinds,
            vec![
                EventKind::RunStarted,
                EventKind::ModelRequestStarted,
                EventKind::ModelRequestCompleted,
                EventKind::ToolCallRequested,
                EventKind::ToolCallStarted,
                EventKind::ToolCallCompleted,
                EventKind::ModelRequestStarted,
                EventKind::ModelRequestCompleted,
                EventKind::RunCompleted,
            ]
        );
        assert_eq!(a.effects.len(), 1);
        assert_eq!(a.effects[0].status, EffectStatus::Completed);
        let last = a.snapshots.last().unwrap();
        assert_eq!(last.meta.state, SnapshotState::Complete);
        assert_eq!(last.meta.message_count, 4);
    }

    #[test]
    fn parallel_calls_keep_the_order_of_the_response() {
        let two = json!({"role":"assistant","parts":[
            {"type":"tool_call","id":"z","name":"get_weather","arguments":{}},
            {"type":"tool_call","id":"a","name":"get_weather","arguments":{}}]});
        let d = derive(
            "r",
            &[model("m1", 100, vec![user()], vec![two])],
            &RunMeta::default(),
        );
        let requested: Vec<&str> = d
            .events
            .iter()
            .filter(|e| e.kind == EventKind::ToolCallRequested)
            .filter_map(|e| e.tool_call_id.as_deref())
            .collect();
        assert_eq!(requested, vec!["z", "a"]);
    }

    #[test]
    fn snapshots_are_chain_tips_and_nodes_are_linear_in_messages() {
        let d = derive("r", &full_run(), &RunMeta::default());
        // 4 distinct messages in one growing history: one node each, however many snapshots.
        assert_eq!(d.nodes.len(), 4);
        let by_id: std::collections::HashMap<_, _> = d.nodes.iter().cloned().collect();
        for s in &d.snapshots {
            let mut len = 0;
            let mut at = s.history.tip;
            while let Some(id) = at {
                len += 1;
                at = by_id[&id].parent;
            }
            assert_eq!(len, s.meta.message_count, "snapshot {}", s.meta.seq);
        }
    }

    #[test]
    fn crash_mid_tool_leaves_interrupted_and_unresolved_then_unknown_after_abandon() {
        let facts = vec![
            model("m1", 100, vec![user()], vec![call("c1")]),
            tool("t1", "c1", 120, false),
            model(
                "m2",
                200,
                vec![user(), call("c1"), answer("c1")],
                vec![call("c2")],
            ),
        ];
        let d = derive("r", &facts, &RunMeta::default());
        assert_eq!(d.run.status, RunStatus::Running);
        let latest_complete = d
            .snapshots
            .iter()
            .rev()
            .find(|s| s.meta.state == SnapshotState::Complete)
            .unwrap();
        assert_eq!(latest_complete.meta.message_count, 3);
        assert_eq!(
            d.snapshots.last().unwrap().meta.state,
            SnapshotState::Interrupted
        );
        assert_eq!(d.effects[1].status, EffectStatus::Requested);

        let meta = RunMeta {
            abandoned: Some(Abandonment {
                at_ns: 500,
                reason: "abandoned by request".into(),
            }),
            ..Default::default()
        };
        let d = derive("r", &facts, &meta);
        assert_eq!(d.run.status, RunStatus::Abandoned);
        assert_eq!(d.effects[1].status, EffectStatus::UnknownAfterCrash);
        assert_eq!(d.events.last().unwrap().kind, EventKind::RunAbandoned);
    }

    #[test]
    fn settled_tools_before_the_next_request_give_a_reconstructed_snapshot() {
        let facts = vec![
            model("m1", 100, vec![user()], vec![call("c1")]),
            tool("t1", "c1", 120, false),
        ];
        let d = derive("r", &facts, &RunMeta::default());
        let last = d.snapshots.last().unwrap();
        assert_eq!(last.meta.source, SnapshotSource::Reconstructed);
        assert_eq!(last.meta.state, SnapshotState::Complete);
        assert_eq!(d.new_messages.len(), 1);
        assert_eq!(d.new_messages[0]["parts"][0]["response"], "18C");
    }

    #[test]
    fn repeated_tool_call_ids_within_a_run_are_separate_entries() {
        let facts = vec![
            model("m1", 100, vec![user()], vec![call("c1")]),
            tool("t1", "c1", 120, true),
            model(
                "m2",
                200,
                vec![user(), call("c1"), answer("c1")],
                vec![call("c1")],
            ),
            tool("t2", "c1", 220, false),
        ];
        let d = derive("r", &facts, &RunMeta::default());
        assert_eq!(d.effects.len(), 2);
        assert_eq!(d.effects[0].status, EffectStatus::Failed);
        assert_eq!(d.effects[0].occurrence, 0);
        assert_eq!(d.effects[1].status, EffectStatus::Completed);
        assert_eq!(d.effects[1].occurrence, 1);
    }

    #[test]
    fn content_off_gives_a_reason_instead_of_a_continuation() {
        let mut m = model("m1", 100, vec![], vec![]);
        m.input = None;
        m.output = None;
        m.content_problem = Some("no content".into());
        let d = derive("r", &[m], &RunMeta::default());
        assert!(d.snapshots.is_empty());
        assert_eq!(
            d.run.continuation_unavailable.as_deref(),
            Some("no content")
        );
    }

    /// A run whose second request showed `shown` as the answer to `c1`, and whose second tool
    /// (`c2`) settled before any third request.
    fn answered_then_reconstructed(shown: Value) -> DerivedRun {
        let facts = vec![
            model("m1", 100, vec![user()], vec![call("c1")]),
            tool("t1", "c1", 120, false),
            model("m2", 200, vec![user(), call("c1"), shown], vec![call("c2")]),
            tool("t2", "c2", 220, false),
        ];
        derive("r", &facts, &RunMeta::default())
    }

    fn reconstructed(d: &DerivedRun) -> &Value {
        let last = d.snapshots.last().unwrap();
        assert_eq!(last.meta.source, SnapshotSource::Reconstructed);
        assert_eq!(last.meta.state, SnapshotState::Complete);
        d.new_messages
            .iter()
            .find(|m| m.get("role").is_some())
            .expect("a reconstructed answer")
    }

    #[test]
    fn reconstructed_answers_take_the_pydantic_ai_form_the_run_showed() {
        let d = answered_then_reconstructed(answer("c1"));
        // The form the run will send next: identical to an observed answer, so the same hash.
        let observed = json!({"role":"user","parts":[{"type":"tool_call_response","id":"c2","name":"get_weather","result":"18C"}]});
        assert_eq!(reconstructed(&d), &observed);
        let tip = d.snapshots.last().unwrap().history.tip.unwrap();
        let by_id: std::collections::HashMap<_, _> = d.nodes.iter().cloned().collect();
        assert_eq!(by_id[&tip].message, MessageHash::of(&observed));
    }

    #[test]
    fn reconstructed_answers_take_the_tool_role_forms_the_run_showed() {
        // Pydantic AI v6 (`result`) and the semantic conventions (`response`).
        for key in ["result", "response"] {
            let shown = json!({"role":"tool","parts":[{"type":"tool_call_response","id":"c1","name":"get_weather",key:"18C"}]});
            let d = answered_then_reconstructed(shown);
            let expected = json!({"role":"tool","parts":[{"type":"tool_call_response","id":"c2","name":"get_weather",key:"18C"}]});
            assert_eq!(reconstructed(&d), &expected, "{key}");
        }
    }

    #[test]
    fn a_failed_call_carries_its_error_under_the_mirrored_key() {
        let mut facts = vec![
            model("m1", 100, vec![user()], vec![call("c1")]),
            tool("t1", "c1", 120, false),
            model(
                "m2",
                200,
                vec![user(), call("c1"), answer("c1")],
                vec![call("c2")],
            ),
            tool("t2", "c2", 220, true),
        ];
        // A failed tool span without a result: its error text is the answer.
        facts[3].result = None;
        let d = derive("r", &facts, &RunMeta::default());
        assert_eq!(
            reconstructed(&d),
            &json!({"role":"user","parts":[{"type":"tool_call_response","id":"c2","name":"get_weather","result":"boom"}]})
        );
    }

    #[test]
    fn without_a_shown_tool_return_the_default_form_is_kept() {
        let facts = vec![
            model("m1", 100, vec![user()], vec![call("c1")]),
            tool("t1", "c1", 120, false),
        ];
        let d = derive("r", &facts, &RunMeta::default());
        assert_eq!(
            reconstructed(&d),
            &json!({"role":"tool","parts":[{"type":"tool_call_response","id":"c1","name":"get_weather","response":"18C"}]})
        );
    }

    #[test]
    fn a_request_without_a_tool_return_keeps_the_form_shown_before() {
        // The third request's input shows no tool return (a rewritten history): the form the
        // second one showed still holds.
        let shown = json!({"role":"tool","parts":[{"type":"tool_call_response","id":"c1","name":"get_weather","result":"18C"}]});
        let facts = vec![
            model("m1", 100, vec![user()], vec![call("c1")]),
            tool("t1", "c1", 120, false),
            model("m2", 200, vec![user(), call("c1"), shown], vec![text()]),
            model("m3", 300, vec![user()], vec![call("c3")]),
            tool("t3", "c3", 320, false),
        ];
        let d = derive("r", &facts, &RunMeta::default());
        let answer = reconstructed(&d);
        assert_eq!(answer["role"], "tool");
        assert_eq!(answer["parts"][0]["result"], "18C");
    }
}
