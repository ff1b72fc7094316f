//! The runs a continued run starts from, loaded for its continuation: a run continued from
//! another run's snapshot (see `store::lineage_index`) sent that history again in its first
//! model request, but its spans carry only the instructions in force now, and its model requests
//! produced none of the earlier responses. The source runs' records hold both.

use std::sync::Arc;

use serde_json::Value;

use super::context::{ContextCache, Provenance};
use crate::domain::{ChainIds, MessageHash, NodeId};
use crate::store::{Store, StoreError};

/// Most runs followed back from one run (a chain of continuations longer than this is cut).
const MAX_ANCESTORS: usize = 32;

/// A run the history continues, and what its records say of the messages it holds.
pub struct Ancestor {
    /// The source run.
    pub run_id: String,
    /// The source's first alias (the framework's run id: Pydantic AI stamps it on the messages
    /// that run made).
    pub alias: Option<String>,
    /// The messages `0..upto` of the history are the source's snapshot.
    pub upto: usize,
    /// The system instructions in force at that snapshot (array of parts).
    pub instructions: Option<Value>,
    /// Which of the source's model requests sent and produced each message (empty unless the
    /// continuation asked for provenance).
    pub provenance: Arc<Provenance>,
}

/// The runs the history `hashes` of `run_id` continues, nearest first; each one's snapshot must
/// still be a prefix of the history (a history rewritten since is not attributed to it).
pub fn ancestors(
    store: &Store,
    contexts: &ContextCache,
    run_id: &str,
    hashes: &[MessageHash],
    provenance: bool,
) -> Result<Vec<Ancestor>, StoreError> {
    let mut out: Vec<Ancestor> = Vec::new();
    let Some(mut link) = store.lineage_link(run_id)? else {
        return Ok(out);
    };
    // The node ids of the history's prefixes, computed (one SHA-256 each) only when a source is
    // named, and only up to the longest source: the first (later ones are shorter).
    let mut ids: Vec<NodeId> = Vec::new();
    let mut limit = hashes.len();
    while let Some(source) = link.source {
        let len = source.len as usize;
        let looped = source.run_id == run_id || out.iter().any(|a| a.run_id == source.run_id);
        if len == 0 || len > limit || looped || out.len() == MAX_ANCESTORS {
            break;
        }
        if ids.is_empty() {
            ids = ChainIds::default().ids(hashes[..len].iter()).to_vec();
        }
        if ids.get(len - 1) != Some(&source.tip) {
            break;
        }
        let snapshot =
            store.last_snapshot(&source.run_id, |r| r.history.tip == Some(source.tip))?;
        let instructions = match snapshot.and_then(|s| s.instructions) {
            Some(hash) => store
                .messages(&source.run_id, std::slice::from_ref(&hash))?
                .pop(),
            None => None,
        };
        let provenance = if provenance {
            let revision = store
                .run_meta(&source.run_id)?
                .map_or(0, |meta| meta.revision);
            contexts
                .get(store, &source.run_id, revision, true)?
                .provenance
                .unwrap_or_default()
        } else {
            Arc::default()
        };
        let next = store.lineage_link(&source.run_id)?;
        let alias = store
            .run_record(&source.run_id)?
            .and_then(|r| r.aliases.into_iter().next());
        out.push(Ancestor {
            run_id: source.run_id,
            alias,
            upto: len,
            instructions,
            provenance,
        });
        limit = len;
        match next {
            Some(l) => link = l,
            None => break,
        }
    }
    Ok(out)
}
