//! The snapshots of a run: per model request its input and its full history (input + output),
//! and, while the next request is not seen, the full history answered from the tool spans
//! (reconstructed). The one snapshot step here serves the fold from nothing and the fold
//! resumed from a stored state alike.
//!
//! A reconstructed answer to the calls of request `k` takes the tool-return form of the latest
//! of requests `0..=k` that showed one in its input (the default form before any did). That is
//! what the run itself sends next, known as soon as request `k` is, and the same whichever
//! facts come after it: a resumed fold keeps the form reached so far in its state and answers
//! the last request with it.

use std::ops::Range;

use serde_json::Value;

use super::state::Acc;
use super::NewFact;
use crate::domain::{
    format_timestamp, ChainIds, ChainRef, HistoryNode, IdSet, MessageHash, MessageRef, NodeId,
    SnapshotMeta, SnapshotRecord, SnapshotSource, SnapshotState,
};
use crate::interpreter::tool_return::ToolReturnForm;
use crate::interpreter::validity::{Walk, WalkState};
use crate::records::run_state::{EffectBuild, LastFull, LastSnapshot, SnapshotMark};

/// Numbers snapshots and drops a candidate equal to the one before it (same history and state).
pub(super) struct SnapshotBuilder {
    /// The records built, from the first seq of the mark given to [`SnapshotBuilder::new`].
    pub records: Vec<SnapshotRecord>,
    /// Where the records stand.
    pub mark: SnapshotMark,
}

impl SnapshotBuilder {
    /// A builder whose first record follows `mark`.
    pub fn new(mark: SnapshotMark) -> Self {
        Self {
            records: Vec::new(),
            mark,
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
            .mark
            .last
            .as_ref()
            .is_some_and(|l| l.history == history && l.state == state)
        {
            return;
        }
        let seq = self.mark.next_seq;
        self.mark.next_seq += 1;
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
        self.mark.last = Some(LastSnapshot { history, state });
    }
}

/// The history nodes a fold step names.
pub(super) struct Nodes {
    /// Ids of the last input chained here; `Some` when inputs' nodes are emitted too (a fold
    /// from nothing: a resumed fold's inputs were chained when their facts were stored).
    chain: Option<ChainIds>,
    emitted: IdSet<NodeId>,
    /// The nodes, each once.
    pub list: Vec<(NodeId, HistoryNode)>,
}

impl Nodes {
    /// Nodes of a step; `with_inputs`: inputs' nodes too.
    pub fn new(with_inputs: bool) -> Self {
        Self {
            chain: with_inputs.then(ChainIds::default),
            emitted: IdSet::default(),
            list: Vec::new(),
        }
    }

    /// The chain of a request's input (`given`: computed when the fact was stored).
    pub fn history(&mut self, messages: &[MessageRef], given: Option<&ChainRef>) -> ChainRef {
        let Some(chain) = &mut self.chain else {
            return given.cloned().unwrap_or_else(|| ChainRef::of(messages));
        };
        chain.ids(messages.iter().map(|m| &m.hash));
        let fresh = chain.take_fresh();
        for (id, node) in chain.nodes_from(fresh) {
            if self.emitted.insert(*id) {
                self.list.push((*id, node));
            }
        }
        chain.current()
    }

    /// The node of `message` after `parent`.
    pub fn child(&mut self, parent: Option<NodeId>, message: MessageHash) -> NodeId {
        let id = NodeId::child(parent.as_ref(), &message);
        if self.emitted.insert(id) {
            self.list.push((id, HistoryNode { parent, message }));
        }
        id
    }
}

/// Message bodies a fold step refers to besides the facts' messages (reconstructed tool
/// returns, system instructions), each instruction body once.
#[derive(Default)]
pub(super) struct Bodies {
    seen: IdSet<MessageHash>,
    /// The bodies, in the order first named.
    pub list: Vec<Value>,
}

impl Bodies {
    /// Names instructions `hash`, whose body is `body` when at hand (a hash without it was
    /// stored before).
    pub fn name(&mut self, hash: Option<MessageHash>, body: Option<&Value>) -> Option<MessageHash> {
        let h = hash?;
        if self.seen.insert(h) {
            if let Some(b) = body {
                self.list.push(b.clone());
            }
        }
        Some(h)
    }
}

/// The validity walk over a request's input. When the input starts with the previous request's
/// full history (its node ids say so: a node id names its whole history), the walk goes on from
/// where that history's walk ended, which is where a walk from the first message would be.
pub(super) fn walk_input(
    input: &[MessageRef],
    prefixes: Option<&[NodeId]>,
    previous: Option<&LastFull>,
) -> WalkState {
    if let (Some(ids), Some(full)) = (prefixes, previous) {
        let len = full.history.len as usize;
        let extends = ids.len() == input.len()
            && len > 0
            && len <= input.len()
            && full.history.tip.as_ref() == ids.get(len - 1);
        if extends {
            let mut walk = full.walk.clone();
            input[len..].iter().for_each(|r| walk.push(&r.shape));
            return walk;
        }
    }
    let mut walk = WalkState::default();
    input.iter().for_each(|r| walk.push(&r.shape));
    walk
}

/// Instructions as the step names them: the latest model request's (with its body when it came
/// in this step) and the run span's (with its body when at hand).
pub(super) struct Named<'f> {
    pub model_body: Option<&'f Value>,
    pub agent_body: Option<&'f Value>,
}

/// Snapshots, nodes and bodies of one fold step.
pub(super) struct Built {
    pub out: SnapshotBuilder,
    pub nodes: Nodes,
    pub bodies: Bodies,
}

impl Built {
    /// Pushes the reconstructed snapshot after `full` (of request `step_index`), when every call
    /// it leaves open is settled by `entries`.
    fn reconstruct<'e>(
        &mut self,
        full: &LastFull,
        entries: impl Iterator<Item = &'e EffectBuild>,
        form: ToolReturnForm,
        step_index: u32,
        instructions: Option<MessageHash>,
    ) {
        let Walk::Open(open) = full.walk.result() else {
            return;
        };
        let Some((message, time_ns)) =
            super::ledger::reconstructed_answer(&open, entries, full.end_ns, form)
        else {
            return;
        };
        let answer = MessageRef::of(&message);
        let tip = self.nodes.child(full.history.tip, answer.hash);
        self.bodies.list.push(message);
        let mut walk = full.walk.clone();
        walk.push(&answer.shape);
        self.out.push(
            ChainRef {
                tip: Some(tip),
                len: full.history.len + 1,
            },
            &walk,
            SnapshotSource::Reconstructed,
            step_index,
            time_ns,
            instructions,
        );
    }
}

/// The snapshot step: the records `models` (the step's requests, the run's `first_step`-th on,
/// whose calls are the ledger entries `asked[j]`) add after `acc.fixed`, the reconstructed one
/// of the request before them (whose calls are the entries `before`) first when the step does
/// not open with an observed input.
pub(super) fn step<'f>(
    acc: &mut Acc,
    models: &[NewFact<'f>],
    first_step: u32,
    before: &[u32],
    asked: &[Range<u32>],
    mut named: Named<'f>,
    with_inputs: bool,
) -> Built {
    let mut built = Built {
        out: SnapshotBuilder::new(acc.fixed.clone()),
        nodes: Nodes::new(with_inputs),
        bodies: Bodies::default(),
    };
    // Instructions named by an earlier step were stored then.
    built.bodies.name(acc.instructions.model, None);
    if named.agent_body.is_none() {
        built.bodies.name(acc.instructions.agent, None);
    }
    let entries = |acc: &Acc, range: Range<u32>| -> Vec<EffectBuild> {
        range.filter_map(|i| acc.known.get(&i).cloned()).collect()
    };
    if let (Some(full), Some(last)) = (acc.last_full.clone(), first_step.checked_sub(1)) {
        if models.first().is_none_or(|n| n.fact.input.is_none()) {
            let calls: Vec<EffectBuild> = before
                .iter()
                .filter_map(|i| acc.known.get(i).cloned())
                .collect();
            let instructions = acc.instructions.effective();
            let form = acc.form.unwrap_or_default();
            built.reconstruct(&full, calls.iter(), form, last + 1, instructions);
        }
    }
    for (j, n) in models.iter().enumerate() {
        let m = n.fact;
        let step_index = first_step + j as u32 + 1;
        if let Some(v) = &m.system_instructions {
            acc.instructions.model = Some(MessageHash::of_repeated(v));
            named.model_body = Some(v);
        }
        acc.form = m.tool_return_form.or(acc.form);
        acc.fixed = built.out.mark.clone();
        let previous_full = acc.last_full.take();
        let Some(input) = &m.input else { continue };
        let body = match acc.instructions.model {
            Some(_) => named.model_body,
            None => named.agent_body,
        };
        let instructions = built.bodies.name(acc.instructions.effective(), body);
        let mut walk = walk_input(input, n.input_prefixes, previous_full.as_ref());
        let history = built.nodes.history(input, n.input_chain.as_ref());
        built.out.push(
            history.clone(),
            &walk,
            SnapshotSource::Observed,
            step_index,
            m.start_ns,
            instructions,
        );
        acc.fixed = built.out.mark.clone();
        let (None, Some(output)) = (&m.error, &m.output) else {
            continue;
        };
        let mut tip = history.tip;
        for r in output {
            tip = Some(built.nodes.child(tip, r.hash));
            walk.push(&r.shape);
        }
        let full = LastFull {
            history: ChainRef {
                tip,
                len: history.len + output.len() as u32,
            },
            walk,
            end_ns: m.end_ns,
        };
        built.out.push(
            full.history.clone(),
            &full.walk,
            SnapshotSource::Observed,
            step_index,
            m.end_ns,
            instructions,
        );
        acc.fixed = built.out.mark.clone();
        // Before the next request exists, answer the calls from the tool spans' results.
        if models.get(j + 1).is_none_or(|n| n.fact.input.is_none()) {
            let calls = entries(acc, asked.get(j).cloned().unwrap_or(0..0));
            let form = acc.form.unwrap_or_default();
            built.reconstruct(&full, calls.iter(), form, step_index, instructions);
        }
        acc.last_full = Some(full);
    }
    // The instructions the state names are what a resumed fold gives its snapshots without
    // storing them again, so their bodies are stored now even when no snapshot here refers to
    // them (a model request without an input, or a run span without its final history, names
    // them first).
    built.bodies.name(acc.instructions.model, named.model_body);
    built.bodies.name(acc.instructions.agent, named.agent_body);
    acc.has_complete |= built
        .out
        .records
        .iter()
        .any(|s| s.meta.state == SnapshotState::Complete);
    built
}
