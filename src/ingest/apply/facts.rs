//! Facts: a span's fact is added to its run once (a redelivery changes nothing, a pending span
//! never replaces the real one), stored with its content-addressed histories (history nodes
//! and message bodies the run does not have yet).

use crate::domain::{ChainIds, IdSet, MessageHash};
use crate::interpreter::{Interpreted, SharedMessages, SpanFact, StoredFact};
use crate::records::fact::Histories;
use crate::store::keys::{self, cf};
use crate::store::{request_start, Store, StoreError, WriteBatch};

use super::work_set::{known_fact, load, RunWork, Runs};

/// Adds fact `i` to run `run_id`: writes it and marks the run changed. False when the run
/// knows the fact already (delivered before), or it is a pending span standing for a real
/// span the run has: nothing changes then.
pub(super) fn add_fact(
    store: &Store,
    batch: &mut WriteBatch<'_>,
    runs: &mut Runs,
    run_id: &str,
    i: &Interpreted,
    now_ns: u64,
) -> Result<bool, StoreError> {
    let work = load(store, runs, run_id)?;
    let chains = FactChains::of(store, run_id, &i.fact);
    let known = known_fact(store, work, run_id, &i.fact.span_id)?;
    let previous = known.as_ref().and_then(|k| request_start(&k.fact));
    // The fact's one copy: stored from, then kept in the work set.
    let (stored, histories) = chains.stored_from(i.fact.clone());
    match known {
        Some(known) if known == stored => {
            chains.keep(store, run_id);
            return Ok(false); // delivered before: nothing changes
        }
        // A pending span never replaces the real span it stands for.
        Some(known) if i.fact.pending && !known.fact.pending => {
            chains.keep(store, run_id);
            return Ok(false);
        }
        Some(_) => work.full = true,
        None => {}
    }
    let bodies = Bodies {
        listed: &i.messages,
        shared: &i.shared,
    };
    write_fact_with(
        store,
        batch,
        run_id,
        work,
        (&i.fact, &stored, previous),
        &chains,
        bodies,
    )?;
    chains.keep(store, run_id);
    work.note_calls(&i.fact);
    work.add(stored.into_fact(histories));
    work.meta.last_seen_ns = now_ns;
    work.dirty = true;
    Ok(true)
}

/// Writes a fact in its stored form, the history nodes its histories add to the run, and the
/// message bodies the run does not have yet.
pub(super) fn write_fact(
    store: &Store,
    batch: &mut WriteBatch<'_>,
    run_id: &str,
    work: &mut RunWork,
    fact: &SpanFact,
    bodies: &[(MessageHash, serde_json::Value)],
) -> Result<(), StoreError> {
    let chains = FactChains::of(store, run_id, fact);
    let bodies = Bodies {
        listed: bodies,
        shared: &SharedMessages::default(),
    };
    let previous = work.all.as_ref().and_then(|all| all.get(&fact.span_id));
    let previous = previous.and_then(request_start);
    let stored = chains.stored(fact);
    write_fact_with(
        store,
        batch,
        run_id,
        work,
        (fact, &stored, previous),
        &chains,
        bodies,
    )?;
    chains.keep(store, run_id);
    Ok(())
}

/// The node ids of a fact's histories (input, final history), computed once per fact.
struct FactChains {
    input: Option<ChainIds>,
    all_messages: Option<ChainIds>,
}

impl FactChains {
    /// The chains of a fact of `run_id`; the input's starts from the run's cached chain, so
    /// only the messages it does not share with the last stored input are hashed.
    fn of(store: &Store, run_id: &str, fact: &SpanFact) -> Self {
        let input = fact.input.as_ref().map(|refs| {
            let mut chain = store.take_chain(run_id);
            chain.ids(refs.iter().map(|r| &r.hash));
            chain
        });
        let all_messages = fact.all_messages.as_ref().map(|refs| {
            let mut chain = ChainIds::default();
            chain.ids(refs.iter().map(|r| &r.hash));
            chain
        });
        Self {
            input,
            all_messages,
        }
    }

    /// Hands the input's chain back to the run's cache.
    fn keep(self, store: &Store, run_id: &str) {
        if let Some(chain) = self.input {
            store.keep_chain(run_id, chain);
        }
    }

    fn stored(&self, fact: &SpanFact) -> StoredFact {
        StoredFact::with_chains(
            fact,
            self.input.as_ref().map(ChainIds::current),
            self.all_messages.as_ref().map(ChainIds::current),
        )
    }

    /// [`Self::stored`] of a fact given by value (see [`StoredFact::from_fact`]).
    fn stored_from(&self, fact: SpanFact) -> (StoredFact, Histories) {
        StoredFact::from_fact(
            fact,
            self.input.as_ref().map(ChainIds::current),
            self.all_messages.as_ref().map(ChainIds::current),
        )
    }
}

/// The message bodies an interpreted fact carries: listed with their hashes, and the input's
/// shared with the interpreter's memo (by position in the input).
#[derive(Clone, Copy)]
struct Bodies<'a> {
    listed: &'a [(MessageHash, serde_json::Value)],
    shared: &'a SharedMessages,
}

/// Writes a fact in its stored form `stored` (with the start of the span's previous fact, when
/// that was a model request: see [`WriteBatch::note_fact`]), its history nodes and the message
/// bodies the run lacks.
fn write_fact_with(
    store: &Store,
    batch: &mut WriteBatch<'_>,
    run_id: &str,
    work: &mut RunWork,
    (fact, stored, previous_start): (&SpanFact, &StoredFact, Option<u64>),
    chains: &FactChains,
    bodies: Bodies<'_>,
) -> Result<(), StoreError> {
    let key = keys::fact_key(batch.run_key(run_id)?, &fact.span_id);
    batch.put_json(cf::FACTS, &key, stored)?;
    batch.note_fact(run_id, previous_start, stored)?;
    // Messages before the first new node of a history are stored already (a node is written
    // with its message); the others may be new.
    let mut maybe_new: IdSet<&MessageHash> = IdSet::default();
    // Shared input bodies of the messages from the first new node on (the ones before are
    // stored), when the reference at their position is theirs.
    let mut shared: Vec<(&MessageHash, &serde_json::Value)> = Vec::new();
    for (n, (refs, ids)) in [
        (fact.input.as_deref().map(Vec::as_slice), &chains.input),
        (fact.all_messages.as_deref(), &chains.all_messages),
    ]
    .into_iter()
    .enumerate()
    {
        let (Some(refs), Some(ids)) = (refs, ids) else {
            continue;
        };
        let from = write_chain(store, batch, run_id, work, ids)?;
        maybe_new.extend(refs[from..].iter().map(|r| &r.hash));
        if n == 0 {
            work.input_chains
                .insert(fact.span_id.clone(), ids.current());
        }
        // Shared bodies are the input's, or an agent run's whole conversation (it has no input).
        if n == 0 || fact.input.is_none() {
            for (index, m) in bodies.shared.iter_from(from) {
                if refs.get(index).is_some_and(|r| r.hash == m.reference.hash) {
                    shared.push((&m.reference.hash, &m.body));
                }
            }
        }
    }
    maybe_new.extend(fact.output.iter().flatten().map(|r| &r.hash));
    // The system instructions, which the stored fact names by the key of their body.
    let instructions = stored
        .instructions
        .as_ref()
        .zip(fact.system_instructions.as_ref());
    maybe_new.extend(instructions.map(|(hash, _)| hash));
    let listed = bodies.listed.iter().map(|(hash, body)| (hash, body));
    for (hash, body) in shared.into_iter().chain(listed).chain(instructions) {
        if !maybe_new.contains(hash) || work.known_messages.contains(hash) {
            continue;
        }
        // A run this batch gave its key has no message committed (and the ones this group put
        // are in `known_messages`).
        if batch.gave_key(run_id) || !store.has_message(run_id, hash)? {
            batch.put_message(run_id, hash, body)?;
        }
        work.known_messages.insert(*hash);
    }
    Ok(())
}

/// Writes the nodes of a history the run does not have yet; returns the index of the first
/// message whose node was new. Only the end of the chain is probed: a stored node implies its
/// ancestors.
fn write_chain(
    store: &Store,
    batch: &mut WriteBatch<'_>,
    run_id: &str,
    work: &mut RunWork,
    chain: &ChainIds,
) -> Result<usize, StoreError> {
    let ids = chain.node_ids();
    let mut from = ids.len();
    while from > 0 {
        let id = &ids[from - 1];
        // A run this batch gave its key has no node committed: only the group's are known.
        if work.known_nodes.contains(id)
            || (!batch.gave_key(run_id) && store.has_node(run_id, id)?)
        {
            break;
        }
        from -= 1;
    }
    for (id, node) in chain.nodes_from(from) {
        batch.put_node(run_id, id, &node)?;
        work.known_nodes.insert(*id);
    }
    Ok(from)
}
