//! The work set of a write group: the runs the group touches, each loaded once (its meta and
//! record, its facts only when needed) and changed in memory until the group is written.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use crate::domain::{ChainRef, IdSet, MessageHash, NodeId, Run};
use crate::interpreter::{FactKind, RunMeta, SpanFact, StoredFact};
use crate::store::keys::cf;
use crate::store::{Store, StoreError};

/// The runs a write group touches, by run id.
pub(super) type Runs = HashMap<String, RunWork>;

/// One run of the work set.
pub(super) struct RunWork {
    /// Every fact of the run by span id, once loaded in full (for a full derivation): the
    /// facts this group added are among them then.
    pub(super) all: Option<BTreeMap<String, SpanFact>>,
    /// Facts this group added or replaced while the run's facts were not loaded, by span id
    /// (each fact is held once: loading the run's facts moves these into `all`).
    added: BTreeMap<String, SpanFact>,
    /// Span ids of the facts this group added or replaced.
    added_ids: BTreeSet<String>,
    /// Something happened that only a full derivation follows (a fact replaced, runs merged,
    /// the run abandoned).
    pub(super) full: bool,
    /// Messages written for the run by this group.
    pub(super) known_messages: IdSet<MessageHash>,
    /// History nodes written for the run by this group.
    pub(super) known_nodes: IdSet<NodeId>,
    /// Tool-call ids of the calls this group's facts of the run asked for or ran (an answer to
    /// one of them in the run's own input resolves nothing elsewhere).
    pub(super) own_calls: HashSet<String>,
    /// Input histories of the facts this group added, by span id.
    pub(super) input_chains: HashMap<String, ChainRef>,
    /// The run's meta (stored, as changed by this group).
    pub(super) meta: RunMeta,
    /// The run record stored before this group, if any.
    pub(super) old: Option<Run>,
    /// The group changed the run: it is written.
    pub(super) dirty: bool,
    /// When the group first touched the run (runs are written in this order, so the first of
    /// two runs claiming one alias in a group keeps it).
    pub(super) order: usize,
}

impl RunWork {
    /// Adds (or replaces) a fact of the run.
    pub(super) fn add(&mut self, fact: SpanFact) {
        if !self.added_ids.contains(&fact.span_id) {
            self.added_ids.insert(fact.span_id.clone());
        }
        match &mut self.all {
            Some(all) => all.insert(fact.span_id.clone(), fact),
            None => self.added.insert(fact.span_id.clone(), fact),
        };
    }

    /// The facts this group added or replaced, in span id order.
    pub(super) fn added(&self) -> impl Iterator<Item = &SpanFact> {
        let loaded = self
            .all
            .iter()
            .flat_map(|all| all.values().filter(|f| self.added_ids.contains(&f.span_id)));
        self.added.values().chain(loaded)
    }

    /// True when this group added or replaced the fact of `span_id`.
    pub(super) fn was_added(&self, span_id: &str) -> bool {
        self.added_ids.contains(span_id)
    }

    /// True when this group added or replaced no fact of the run.
    pub(super) fn added_none(&self) -> bool {
        self.added_ids.is_empty()
    }

    /// Notes the calls fact `fact` of the run asks for (a model request) or runs (a tool call).
    pub(super) fn note_calls(&mut self, fact: &SpanFact) {
        let asked = fact.requested_calls.iter().map(|c| &c.id);
        for id in asked.chain(&fact.tool_call_id) {
            if !id.is_empty() && !self.own_calls.contains(id) {
                self.own_calls.insert(id.clone());
            }
        }
    }

    /// Whether the run has a fact other than a grouping span (a run record was written before,
    /// or one of its facts is not a group); a run known only from grouping spans is not shown.
    pub(super) fn shown(&self) -> bool {
        let not_group = |f: &SpanFact| f.kind != FactKind::Group;
        self.old.is_some()
            || self.added.values().any(not_group)
            || self.all.iter().flat_map(|a| a.values()).any(not_group)
    }
}

/// The work entry of a run: its meta and record (its facts are read only when needed).
pub(super) fn load<'a>(
    store: &Store,
    runs: &'a mut Runs,
    run_id: &str,
) -> Result<&'a mut RunWork, StoreError> {
    if !runs.contains_key(run_id) {
        let old = store
            .run_record(run_id)
            .map_err(|e| e.in_run(run_id, None))?;
        let meta = store.run_meta(run_id).map_err(|e| e.in_run(run_id, None))?;
        // A run without a record is derived in full when written (there is nothing to append
        // to), so its facts are read now, with one scan: each span added then is checked
        // against them instead of with a read of its own. A run with no meta either has no
        // fact stored (see [`Store::fact_runs_have_meta`]): nothing to scan for.
        let all = match (&old, &meta) {
            (Some(_), _) => None,
            (None, None) if store.fact_runs_have_meta() => Some(BTreeMap::new()),
            (None, _) => Some(stored_facts(store, run_id)?),
        };
        let work = RunWork {
            all,
            added: BTreeMap::new(),
            added_ids: BTreeSet::new(),
            full: false,
            known_messages: IdSet::default(),
            known_nodes: IdSet::default(),
            own_calls: HashSet::new(),
            input_chains: HashMap::new(),
            meta: meta.unwrap_or_default(),
            old,
            dirty: false,
            order: runs.len(),
        };
        runs.insert(run_id.to_string(), work);
    }
    runs.get_mut(run_id).ok_or(StoreError::Corrupt {
        cf: cf::RUNS,
        reason: "run vanished from the work set".into(),
    })
}

/// The work entry of a run with every fact of the run (stored, and added by this group).
pub(super) fn load_full<'a>(
    store: &Store,
    runs: &'a mut Runs,
    run_id: &str,
) -> Result<&'a mut RunWork, StoreError> {
    let work = load(store, runs, run_id)?;
    if work.all.is_none() {
        let mut all = stored_facts(store, run_id)?;
        all.append(&mut work.added);
        work.all = Some(all);
    }
    Ok(work)
}

/// Every fact stored for the run, by span id.
fn stored_facts(store: &Store, run_id: &str) -> Result<BTreeMap<String, SpanFact>, StoreError> {
    Ok(store
        .facts(run_id)
        .map_err(|e| e.in_run(run_id, None))?
        .into_iter()
        .map(|f| (f.span_id.clone(), f))
        .collect())
}

/// The fact of `span_id` already known for the run (added by this group or stored), in its
/// stored form.
pub(super) fn known_fact(
    store: &Store,
    work: &RunWork,
    run_id: &str,
    span_id: &str,
) -> Result<Option<StoredFact>, StoreError> {
    if let Some(f) = work.added.get(span_id) {
        return Ok(Some(StoredFact::of(f)));
    }
    if let Some(all) = &work.all {
        return Ok(all.get(span_id).map(StoredFact::of));
    }
    store
        .stored_fact(run_id, span_id)
        .map_err(|e| e.in_run(run_id, Some(span_id)))
}
