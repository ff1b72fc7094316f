//! Persisting a run's derived state: appending a group's new facts to the stored run when they
//! extend it, else deriving the run in full and rewriting its record, index keys, events,
//! ledger, snapshots, messages, history nodes and append state.

use std::collections::{BTreeMap, HashSet};

use crate::domain::MessageHash;
use crate::interpreter::{append, derive, NewFact, SpanFact};
use crate::store::keys::{self, cf};
use crate::store::{conflict_warning, AliasClaims, Store, StoreError, WriteBatch};

use super::continued_from::{self, Written};
use super::work_set::{load, load_full, Runs};

/// What one write group shares across its runs: alias claims, lineage links and the answers
/// its requests carry to waiting calls.
pub(super) struct GroupLinks<'a> {
    /// Aliases claimed so far in the group.
    pub(super) claims: &'a mut AliasClaims,
    /// Lineage lookups and links of the group.
    pub(super) lineage: &'a mut continued_from::Group,
    /// Answers to waiting calls carried by the group's requests.
    pub(super) answers: &'a [super::interactions::GroupAnswer],
}

/// Writes what the group changed in a run: incrementally when its new facts extend it (see
/// [`append`]), else by deriving it in full. Gives the most messages of any of the run's
/// snapshots when it derived the run in full (and so wrote every snapshot), else `None`.
pub(super) fn write_run(
    store: &Store,
    batch: &mut WriteBatch<'_>,
    runs: &mut Runs,
    group: &mut GroupLinks<'_>,
    run_id: &str,
    now_ns: u64,
) -> Result<Option<u32>, StoreError> {
    let (claims, lineage, answers) = (&mut *group.claims, &mut *group.lineage, group.answers);
    let meta = &mut load(store, runs, run_id)?.meta;
    meta.revision = meta.revision.saturating_add(1).max(now_ns);
    if try_append(store, batch, runs, lineage, run_id)? {
        return Ok(None);
    }
    let work = load_full(store, runs, run_id)?;
    // The run is written once per group, last: its facts move out of the work set (nothing
    // reads them after this), not copied.
    let facts: Vec<SpanFact> = work
        .all
        .take()
        .into_iter()
        .flat_map(|a| a.into_values())
        .collect();
    let mut derived = derive(run_id, &facts, &work.meta);
    // A run waiting on calls takes the answers known for them, and is derived again with them.
    if super::interactions::note_waiting(
        store,
        batch,
        &derived.run,
        &derived.effects,
        answers,
        &mut work.meta,
    )? {
        derived = derive(run_id, &facts, &work.meta);
    }
    // An alias stays with the first run that claimed it; a refused claim is listed on the run.
    let mut seen: HashSet<&str> = HashSet::new();
    let mut refused = Vec::new();
    for alias in &derived.run.aliases {
        if seen.insert(alias.as_str()) {
            if let Some(owner) = claims.claim(store, batch, alias, run_id)? {
                let warning = conflict_warning(alias, &owner);
                if !work
                    .old
                    .as_ref()
                    .is_some_and(|o| o.warnings.contains(&warning))
                {
                    claims.refused(alias, &owner, run_id);
                }
                refused.push(warning);
            }
        }
    }
    derived.run.warnings.extend(refused);
    let run = &derived.run;

    let new_index = keys::index_keys(run);
    if let Some(old) = &work.old {
        for key in keys::index_keys(old) {
            if !new_index.contains(&key) {
                batch.delete(cf::RUN_INDEX, &key)?;
            }
        }
    }
    for key in &new_index {
        batch.put_raw(cf::RUN_INDEX, key, b"")?;
    }
    batch.put_json(cf::RUNS, run_id.as_bytes(), run)?;
    batch.put_json(cf::RUN_META, run_id.as_bytes(), &work.meta)?;

    let old = work.old.as_ref();
    rewrite_seq(
        batch,
        cf::EVENTS,
        run_id,
        &derived.events,
        old.map_or(0, |r| r.event_count),
        |batch, seq, e| batch.put_event(run_id, seq, e),
    )?;
    rewrite_seq(
        batch,
        cf::EFFECTS,
        run_id,
        &derived.effects,
        old.map_or(0, |r| r.tool_call_count),
        |batch, seq, effect| batch.put_effect(run_id, seq, effect),
    )?;
    for s in &derived.snapshots {
        batch.put_snapshot(run_id, s)?;
    }
    for seq in derived.snapshots.len() as u32..old.map_or(0, |r| r.snapshot_count) {
        batch.delete_snapshot(run_id, seq)?;
    }
    // Bodies this group put for the run already (the facts' instructions) are not put again.
    for message in &derived.new_messages {
        let hash = MessageHash::of(message);
        if work.known_messages.insert(hash) {
            batch.put_message(run_id, &hash, message)?;
        }
    }
    for (id, node) in &derived.nodes {
        if !work.known_nodes.contains(id) {
            batch.put_node(run_id, id, node)?;
        }
    }
    // The working state for the next append, and the ledger's tool-call id counts.
    match &derived.state {
        Some(state) => batch.put_json(cf::RUN_STATE, run_id.as_bytes(), state)?,
        None => batch.delete(cf::RUN_STATE, run_id.as_bytes())?,
    }
    // Call counts are written with the run record: a run without one has none to clear.
    if work.old.is_some() {
        for key in store.keys_with_prefix(cf::RUN_STATE, &keys::run_prefix(run_id))? {
            batch.delete(cf::RUN_STATE, &key)?;
        }
    }
    let mut counts: BTreeMap<&str, u32> = BTreeMap::new();
    for e in &derived.effects {
        *counts.entry(e.tool_call_id.as_str()).or_default() += 1;
    }
    for (id, count) in counts {
        batch.put_raw(
            cf::RUN_STATE,
            &keys::run_child(run_id, id),
            &count.to_be_bytes(),
        )?;
    }
    // The facts this group added, among the run's (they moved there from the work set).
    let added: Vec<&SpanFact> = facts
        .iter()
        .filter(|f| work.was_added(&f.span_id))
        .collect();
    let written = Written {
        run,
        added: &added,
        snapshots: &derived.snapshots,
    };
    continued_from::note_run(store, batch, lineage, written)?;
    let longest = derived.snapshots.iter().map(|s| s.meta.message_count).max();
    Ok(Some(longest.unwrap_or(0)))
}

/// Appends the group's new facts to the run without deriving it again, when they extend it
/// (see [`append`]); false when the run must be derived in full.
fn try_append(
    store: &Store,
    batch: &mut WriteBatch<'_>,
    runs: &mut Runs,
    lineage: &mut continued_from::Group,
    run_id: &str,
) -> Result<bool, StoreError> {
    let work = load(store, runs, run_id)?;
    let Some(old) = work.old.clone() else {
        return Ok(false);
    };
    if work.full
        || work.all.is_some()
        || work.added_none()
        || work.meta.abandoned.is_some()
        || work.meta.parent_run_id != old.parent_run_id
    {
        return Ok(false);
    }
    let Some(state) = store
        .run_state(run_id)
        .map_err(|e| e.in_run(run_id, None))?
    else {
        return Ok(false);
    };
    // The run's last stored input chain (the cache's) gives the node ids of the prefixes of the
    // fact's input it names, so the append walks only what the input adds.
    let chain = store.take_chain(run_id);
    let current = chain.current();
    let new: Vec<NewFact<'_>> = work
        .added()
        .map(|fact| {
            let input_chain = work.input_chains.get(&fact.span_id).cloned();
            let input_prefixes = input_chain
                .as_ref()
                .filter(|c| **c == current)
                .map(|_| chain.node_ids());
            NewFact {
                fact,
                input_chain,
                input_prefixes,
            }
        })
        .collect();
    let mut failed = None;
    let appended = append(&old, &state, &new, |id| {
        match store.call_count(run_id, id) {
            Ok(n) => Some(n),
            Err(e) => {
                failed = Some(e);
                None
            }
        }
    });
    drop(new);
    store.keep_chain(run_id, chain);
    if let Some(e) = failed {
        return Err(e.in_run(run_id, None));
    }
    let Some(a) = appended else {
        return Ok(false);
    };
    #[cfg(test)]
    super::tests::APPENDS.with(|n| n.set(n.get() + 1));
    batch.put_json(cf::RUNS, run_id.as_bytes(), &a.run)?;
    batch.put_json(cf::RUN_META, run_id.as_bytes(), &work.meta)?;
    for e in &a.events {
        batch.put_event(run_id, e.seq, e)?;
    }
    for (index, effect) in &a.effects {
        batch.put_effect(run_id, *index, effect)?;
    }
    for s in &a.snapshots {
        batch.put_snapshot(run_id, s)?;
    }
    for seq in a.run.snapshot_count..old.snapshot_count {
        batch.delete_snapshot(run_id, seq)?;
    }
    for message in &a.new_messages {
        let hash = MessageHash::of(message);
        if !work.known_messages.contains(&hash) && !store.has_message(run_id, &hash)? {
            batch.put_message(run_id, &hash, message)?;
            work.known_messages.insert(hash);
        }
    }
    for (id, node) in &a.nodes {
        if work.known_nodes.insert(*id) {
            batch.put_node(run_id, id, node)?;
        }
    }
    for (id, count) in &a.call_counts {
        batch.put_raw(
            cf::RUN_STATE,
            &keys::run_child(run_id, id),
            &count.to_be_bytes(),
        )?;
    }
    batch.put_json(cf::RUN_STATE, run_id.as_bytes(), &a.state)?;
    let added: Vec<&SpanFact> = work.added().collect();
    let written = Written {
        run: &a.run,
        added: &added,
        snapshots: &a.snapshots,
    };
    continued_from::note_run(store, batch, lineage, written)?;
    Ok(true)
}

/// Writes records at `0..len` (each with `put`, given its position) and deletes those left
/// over from a longer earlier derivation.
fn rewrite_seq<T>(
    batch: &mut WriteBatch<'_>,
    cf_name: crate::store::Cf,
    run_id: &str,
    items: &[T],
    old_len: u32,
    put: impl Fn(&mut WriteBatch<'_>, u32, &T) -> Result<(), StoreError>,
) -> Result<(), StoreError> {
    for (n, item) in items.iter().enumerate() {
        put(batch, n as u32, item)?;
    }
    for n in items.len() as u32..old_len {
        batch.delete_at(cf_name, run_id, n)?;
    }
    Ok(())
}
