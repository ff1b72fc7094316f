//! Resolving waiting runs across runs: a model request whose input ends with answers to tool
//! calls (the results or the approval decisions a resumed run carries) resolves the runs of the
//! same conversation that ended waiting on those calls.
//!
//! Both sides leave an entry in the interaction index (`store::interactions`): the answering
//! request one per call its input's last turn answers, the waiting run one per call it waits on.
//! Each side looks the other up when it arrives, so the resolution is the same whichever comes
//! first, and the answer kept per call is the earliest `(start, run id)`: redelivery and order
//! change nothing. The work is linear in the answers of one turn and the calls a run waits on.

use std::collections::HashSet;

use crate::domain::{Resolution, Run, ToolEffect};
use crate::interpreter::{FactKind, SpanFact};
use crate::records::run_state::RunMeta;
use crate::store::keys::cf;
use crate::store::{answer_key, waiting_key, Store, StoreError, WriteBatch};

use super::work_set::{load, Runs};

/// Most answers of one request's last turn indexed (a turn answering more calls is answered
/// for its first ones).
const MAX_ANSWERS_PER_REQUEST: usize = 256;

/// The call ids a model request's input answers after its last message that asks for calls:
/// the answers its last turn carries. None for other facts or without a conversation.
pub(super) fn answered_calls(fact: &SpanFact) -> Vec<&str> {
    let Some(input) = fact
        .input
        .as_deref()
        .filter(|_| fact.kind == FactKind::ModelRequest && fact.conversation_id.is_some())
    else {
        return Vec::new();
    };
    let tail_from = input
        .iter()
        .rposition(|m| !m.shape.opens.is_empty())
        .map_or(0, |i| i + 1);
    let mut seen = HashSet::new();
    input[tail_from..]
        .iter()
        .flat_map(|m| m.shape.closes.iter().map(String::as_str))
        .filter(|id| !id.is_empty() && seen.insert(*id))
        .take(MAX_ANSWERS_PER_REQUEST)
        .collect()
}

/// Takes answer `r` for call `call` into `meta` when it is earlier than the one it has; true
/// when `meta` changed.
fn take(meta: &mut RunMeta, call: &str, r: Resolution) -> bool {
    match meta.resolutions.get(call) {
        Some(old) if *old <= r => false,
        _ => {
            meta.resolutions.insert(call.to_string(), r);
            true
        }
    }
}

/// A model request just stored for run `run_id`: indexes the answers of its last turn to calls
/// the run did not ask for itself, and resolves the runs already known to wait on them (they
/// are derived again).
pub(super) fn note_answers(
    store: &Store,
    batch: &mut WriteBatch<'_>,
    runs: &mut Runs,
    run_id: &str,
    fact: &SpanFact,
) -> Result<(), StoreError> {
    let calls = answered_calls(fact);
    let Some(conv) = fact
        .conversation_id
        .as_deref()
        .filter(|_| !calls.is_empty())
    else {
        return Ok(());
    };
    for call in calls {
        // An answer to the run's own call (the usual tool loop) resolves nothing elsewhere: one
        // this group's facts of the run asked for or ran, or one the stored run has.
        let asked_here = runs.get(run_id).is_some_and(|w| w.own_calls.contains(call));
        if asked_here || store.call_count(run_id, call)? > 0 {
            continue;
        }
        batch.put_raw(
            cf::RUN_INDEX,
            &answer_key(conv, call, run_id, fact.start_ns),
            b"",
        )?;
        for waiting in store.runs_waiting_on(conv, call)? {
            if waiting == run_id {
                continue;
            }
            let work = load(store, runs, &waiting)?;
            // Only a later request answers: the waiting run started before it.
            if work
                .old
                .as_ref()
                .is_some_and(|r| r.started_ns > fact.start_ns)
            {
                continue;
            }
            let r = Resolution {
                at_ns: fact.start_ns,
                run_id: run_id.to_string(),
            };
            if take(&mut work.meta, call, r) {
                work.full = true;
                work.dirty = true;
            }
        }
    }
    Ok(())
}

/// An answer a write group's model request carries: `(conversation, call, run id, start)`.
pub(super) type GroupAnswer = (String, String, String, u64);

/// The answers this write group's own model requests carry. A waiting run stored in the same
/// group as its answers finds them here (the index entries are not readable before the commit).
pub(super) fn group_answers(runs: &Runs) -> Vec<GroupAnswer> {
    let mut out = Vec::new();
    for (run_id, work) in runs {
        for fact in work.added() {
            for call in answered_calls(fact) {
                if let Some(conv) = &fact.conversation_id {
                    out.push((
                        conv.clone(),
                        call.to_string(),
                        run_id.clone(),
                        fact.start_ns,
                    ));
                }
            }
        }
    }
    out
}

/// Run `run` just derived with ledger `effects`: indexes the calls it waits on, and takes into
/// `meta` the answers stored (or in `group`) for them from later requests of its conversation.
/// True when `meta` changed (the run is derived again with it).
pub(super) fn note_waiting(
    store: &Store,
    batch: &mut WriteBatch<'_>,
    run: &Run,
    effects: &[ToolEffect],
    group: &[GroupAnswer],
    meta: &mut RunMeta,
) -> Result<bool, StoreError> {
    let (run_id, started_ns) = (run.run_id.as_str(), run.started_ns);
    let Some(conv) = run.conversation_id.as_deref() else {
        return Ok(false);
    };
    let mut changed = false;
    for call in crate::interpreter::waiting_calls(effects) {
        batch.put_raw(cf::RUN_INDEX, &waiting_key(conv, call, run_id), b"")?;
        let stored = store.answers_to(conv, call)?;
        let here = group
            .iter()
            .filter(|(c, id, _, _)| c == conv && id == call)
            .map(|(_, _, run, at)| (run.clone(), *at));
        for (answer_run, at_ns) in stored.into_iter().chain(here) {
            if answer_run == run_id || at_ns < started_ns {
                continue;
            }
            changed |= take(
                meta,
                call,
                Resolution {
                    at_ns,
                    run_id: answer_run,
                },
            );
        }
    }
    Ok(changed)
}
