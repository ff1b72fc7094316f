//! Lineage of continued and forked runs, kept by the writer as runs are written: every snapshot
//! a run writes is recorded under its history's tip (see `store::lineage_index`), and a run's
//! first model request is looked up there by the node ids of its input's prefixes, in one
//! multi-get. The longest prefix held by another run that started earlier is the snapshot the run
//! starts from. Only prefixes with a model response in them count: two runs that merely share a
//! system prompt (or a first question) carry nothing another run produced, and are not linked.
//!
//! Out-of-order arrival converges: a run records the longer prefixes it could still link to
//! (those ending with a model response, as a source's latest snapshot does), and a source that
//! writes such a snapshot later relinks the waiting run to it. Redelivered facts change nothing
//! (they are not added again), and a run's earliest request wins over a later one whatever the
//! order they arrive in.

use std::collections::HashMap;

use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::resource::v1::Resource;

use crate::domain::{ChainIds, LineageScope, NodeId, Run, SnapshotRecord};
use crate::interpreter::{FactKind, SpanFact};
use crate::store::{LinkRecord, LinkSource, ScopeKey, Store, StoreError, Wanted, WriteBatch};

/// Longest service name kept (longer ones are cut at a character boundary).
const MAX_SERVICE_BYTES: usize = 256;

/// Most prefixes a run waits for (the longest ones: a source's latest snapshot is the end of
/// the history a run continues).
const MAX_WANTED: usize = 256;

/// Keeps the resource's `service.name` on a model-request fact.
pub(crate) fn note_service(fact: &mut SpanFact, resource: Option<&Resource>) {
    if fact.kind != FactKind::ModelRequest {
        return;
    }
    let name = resource
        .into_iter()
        .flat_map(|r| &r.attributes)
        .find(|kv| kv.key == "service.name")
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v| match &v.value {
            Some(AnyValue::StringValue(s)) => Some(s.as_str()),
            _ => None,
        });
    fact.service = name.map(|s| {
        let mut end = s.len().min(MAX_SERVICE_BYTES);
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s[..end].to_string()
    });
}

/// What this write group put in the lineage index, read before the store (the batch is not
/// committed yet).
#[derive(Default)]
pub(super) struct Group {
    holders: HashMap<(ScopeKey, NodeId), (u64, String)>,
    wanted: HashMap<(ScopeKey, NodeId), Vec<Wanted>>,
    links: HashMap<String, LinkRecord>,
    services: HashMap<String, String>,
}

/// A run as this group writes it.
pub(super) struct Written<'a> {
    /// The run record.
    pub run: &'a Run,
    /// The facts this group added to it.
    pub added: &'a [&'a SpanFact],
    /// The snapshots this group wrote for it.
    pub snapshots: &'a [SnapshotRecord],
}

/// Records the run's snapshots in the lineage index (relinking the runs waiting for them) and
/// looks up the snapshot its first model request starts from.
pub(super) fn note_run(
    store: &Store,
    batch: &mut WriteBatch<'_>,
    group: &mut Group,
    written: Written<'_>,
) -> Result<(), StoreError> {
    let mode = store.lineage_scope();
    if mode == LineageScope::Off {
        return Ok(());
    }
    let run = written.run;
    let service = service_of(store, batch, group, &run.run_id, written.added)?;
    let Some(scope) = ScopeKey::of(mode, run.conversation_id.as_deref(), service.as_deref()) else {
        return Ok(());
    };
    hold_snapshots(store, batch, group, run, scope, written.snapshots)?;
    look_up(store, batch, group, run, scope, written.added)
}

/// The run's service: from the model requests this group added (kept for later), else kept.
fn service_of(
    store: &Store,
    batch: &mut WriteBatch<'_>,
    group: &mut Group,
    run_id: &str,
    added: &[&SpanFact],
) -> Result<Option<String>, StoreError> {
    let known = match group.services.get(run_id) {
        Some(s) => Some(s.clone()),
        None => store.lineage_service(run_id)?,
    };
    let named = added
        .iter()
        .filter(|f| f.kind == FactKind::ModelRequest)
        .min_by_key(|f| (f.start_ns, &f.span_id))
        .and_then(|f| f.service.clone());
    match named {
        Some(name) if known.is_none() => {
            batch.put_lineage_service(run_id, &name)?;
            group.services.insert(run_id.to_string(), name.clone());
            Ok(Some(name))
        }
        _ => Ok(known),
    }
}

/// The run's link, as this group left it or as stored.
fn link_of(store: &Store, group: &Group, run_id: &str) -> Result<Option<LinkRecord>, StoreError> {
    match group.links.get(run_id) {
        Some(link) => Ok(Some(link.clone())),
        None => store.lineage_link(run_id),
    }
}

/// True when run `a` (started at `a_started`) orders before run `b`.
fn before(a_started: u64, a: &str, b_started: u64, b: &str) -> bool {
    (a_started, a) < (b_started, b)
}

/// Records each snapshot history of the run (unless a run that started earlier holds it) and
/// relinks the runs waiting for it.
fn hold_snapshots(
    store: &Store,
    batch: &mut WriteBatch<'_>,
    group: &mut Group,
    run: &Run,
    scope: ScopeKey,
    snapshots: &[SnapshotRecord],
) -> Result<(), StoreError> {
    // The stored holders of every tip not held in this group, read with one multi-get.
    let mut tips: Vec<NodeId> = snapshots.iter().filter_map(|s| s.history.tip).collect();
    tips.sort_unstable();
    tips.dedup();
    tips.retain(|tip| !group.holders.contains_key(&(scope, *tip)));
    let stored: HashMap<NodeId, Option<(u64, String)>> = tips
        .iter()
        .copied()
        .zip(store.lineage_holders(&scope, &tips)?)
        .collect();
    let mut last = None;
    for snapshot in snapshots {
        let Some(tip) = snapshot.history.tip else {
            continue;
        };
        if last == Some(tip) {
            continue;
        }
        last = Some(tip);
        let key = (scope, tip);
        let holder = match group.holders.get(&key) {
            Some(h) => Some(h.clone()),
            None => stored.get(&tip).cloned().flatten(),
        };
        let me = (run.started_ns, run.run_id.clone());
        if holder
            .as_ref()
            .is_some_and(|(started, id)| *id != run.run_id && before(*started, id, me.0, &me.1))
        {
            continue;
        }
        if holder.as_ref() != Some(&me) {
            batch.put_lineage_holder(&scope, &tip, me.0, &me.1)?;
            group.holders.insert(key, me);
        }
        let mut waiting = store.lineage_wanted(&scope, &tip)?;
        waiting.extend(group.wanted.get(&key).into_iter().flatten().cloned());
        for wanted in waiting {
            if wanted.run_id == run.run_id {
                continue;
            }
            let source = LinkSource {
                run_id: run.run_id.clone(),
                tip,
                len: snapshot.history.len,
                started_ns: run.started_ns,
            };
            relink(store, batch, group, &wanted, source)?;
        }
    }
    Ok(())
}

/// Links a waiting run to `source` when that is a longer match of the request it looked up.
fn relink(
    store: &Store,
    batch: &mut WriteBatch<'_>,
    group: &mut Group,
    wanted: &Wanted,
    source: LinkSource,
) -> Result<(), StoreError> {
    let Some(old) = link_of(store, group, &wanted.run_id)? else {
        return Ok(());
    };
    if old.first_start != wanted.first_start
        || old.source.as_ref().is_some_and(|s| s.len >= source.len)
        || !before(
            source.started_ns,
            &source.run_id,
            old.own_started,
            &wanted.run_id,
        )
    {
        return Ok(());
    }
    let link = LinkRecord {
        source: Some(source),
        ..old.clone()
    };
    batch.put_lineage_link(&wanted.run_id, Some(&old), &link)?;
    group.links.insert(wanted.run_id.clone(), link);
    Ok(())
}

/// Looks up the snapshot the run's first model request starts from, when this group added a
/// request earlier than the one looked up before.
fn look_up(
    store: &Store,
    batch: &mut WriteBatch<'_>,
    group: &mut Group,
    run: &Run,
    scope: ScopeKey,
    added: &[&SpanFact],
) -> Result<(), StoreError> {
    let Some(first) = added
        .iter()
        .filter(|f| f.kind == FactKind::ModelRequest && f.input.is_some() && !f.pending)
        .min_by_key(|f| (f.start_ns, &f.span_id))
    else {
        return Ok(());
    };
    let Some(refs) = first.input.as_deref() else {
        return Ok(());
    };
    let old = link_of(store, group, &run.run_id)?;
    if old
        .as_ref()
        .is_some_and(|l| l.first_start <= first.start_ns)
    {
        return Ok(());
    }
    // Only prefixes with a model response in them: a shared system prompt is no lineage.
    // `from` is the length of the shortest one.
    let from = refs
        .iter()
        .position(|r| r.shape.role == "assistant")
        .map(|i| i + 1);
    let mut chain = ChainIds::default();
    let ids = chain.ids(refs.iter().map(|r| &r.hash));
    let tips = match from {
        Some(from) => ids.get(from - 1..).unwrap_or(&[]),
        None => &[],
    };
    let from = from.unwrap_or(refs.len() + 1);
    let stored = store.lineage_holders(&scope, tips)?;
    let mut source = None;
    for (n, (tip, held)) in tips.iter().zip(stored).enumerate().rev() {
        let holder = group.holders.get(&(scope, *tip)).cloned().or(held);
        if let Some((started, id)) = holder {
            if id != run.run_id && before(started, &id, run.started_ns, &run.run_id) {
                source = Some(LinkSource {
                    run_id: id,
                    tip: *tip,
                    len: (from + n) as u32,
                    started_ns: started,
                });
                break;
            }
        }
    }
    let matched = source.as_ref().map_or(0, |s| s.len as usize);
    let link = LinkRecord {
        first_start: first.start_ns,
        own_started: run.started_ns,
        scope,
        source,
    };
    batch.put_lineage_link(&run.run_id, old.as_ref(), &link)?;
    group.links.insert(run.run_id.clone(), link);
    // Longer prefixes ending with a model response: a source may write that snapshot later.
    let waits: Vec<usize> = (matched.max(from)..=refs.len())
        .filter(|&len| len > matched)
        .filter(|&len| {
            refs.get(len - 1)
                .is_some_and(|r| r.shape.role == "assistant")
        })
        .collect();
    for &len in waits.iter().rev().take(MAX_WANTED) {
        let Some(&tip) = ids.get(len - 1) else {
            continue;
        };
        let wanted = Wanted {
            run_id: run.run_id.clone(),
            first_start: first.start_ns,
            len: len as u32,
        };
        batch.put_lineage_wanted(&scope, &tip, &wanted)?;
        group.wanted.entry((scope, tip)).or_default().push(wanted);
    }
    Ok(())
}
