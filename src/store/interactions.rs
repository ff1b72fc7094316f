//! The interaction index: which runs wait on a tool call, and which runs answered it, by
//! conversation and tool-call id. Kept in the run-index column family under two tags of its
//! own (`W` and `A`, apart from the list indexes' lower-case tags):
//!
//! - `W len(conv) conv len(call) call run_id` → (): run `run_id` ended waiting on the call;
//! - `A len(conv) conv len(call) call run_id start_ns(be64)` → (): a model request of run
//!   `run_id` starting at `start_ns` carried the call's answer.
//!
//! Strings are length-prefixed (be32), so ids holding any byte stay apart. Keys are written
//! once per (call, run, request), so redelivery rewrites the same keys.

use super::core::Store;
use super::error::StoreError;
use super::keys::cf;

/// Most entries read per call id and tag (a call id the same conversation repeats in more
/// runs than this is answered from the first ones).
pub const MAX_ENTRIES_PER_CALL: usize = 64;

const WAITING: u8 = b'W';
const ANSWER: u8 = b'A';

/// The prefix of the entries of `tag` for call `call` of conversation `conv`.
fn prefix(tag: u8, conv: &str, call: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(9 + conv.len() + call.len());
    k.push(tag);
    for part in [conv, call] {
        k.extend_from_slice(&(part.len() as u32).to_be_bytes());
        k.extend_from_slice(part.as_bytes());
    }
    k
}

/// The key saying run `run_id` waits on call `call` of conversation `conv`.
pub fn waiting_key(conv: &str, call: &str, run_id: &str) -> Vec<u8> {
    let mut k = prefix(WAITING, conv, call);
    k.extend_from_slice(run_id.as_bytes());
    k
}

/// The key saying a request of run `run_id` starting at `start_ns` answered call `call` of
/// conversation `conv`.
pub fn answer_key(conv: &str, call: &str, run_id: &str, start_ns: u64) -> Vec<u8> {
    let mut k = prefix(ANSWER, conv, call);
    k.extend_from_slice(run_id.as_bytes());
    k.extend_from_slice(&start_ns.to_be_bytes());
    k
}

impl Store {
    /// Ids of runs whose status is `waiting`.
    pub fn waiting_run_ids(&self) -> Result<Vec<String>, StoreError> {
        self.run_ids_with_status(crate::domain::RunStatus::Waiting)
    }

    /// The runs waiting on call `call` of conversation `conv` (at most
    /// [`MAX_ENTRIES_PER_CALL`]).
    pub fn runs_waiting_on(&self, conv: &str, call: &str) -> Result<Vec<String>, StoreError> {
        let prefix = prefix(WAITING, conv, call);
        let mut out = Vec::new();
        self.scan(cf::RUN_INDEX, &prefix, &prefix, |k, _| {
            if let Some(id) = k
                .get(prefix.len()..)
                .and_then(|b| std::str::from_utf8(b).ok())
            {
                out.push(id.to_string());
            }
            Ok(out.len() < MAX_ENTRIES_PER_CALL)
        })?;
        Ok(out)
    }

    /// The answers to call `call` of conversation `conv`: `(run id, request start)`, at most
    /// [`MAX_ENTRIES_PER_CALL`].
    pub fn answers_to(&self, conv: &str, call: &str) -> Result<Vec<(String, u64)>, StoreError> {
        let prefix = prefix(ANSWER, conv, call);
        let mut out = Vec::new();
        self.scan(cf::RUN_INDEX, &prefix, &prefix, |k, _| {
            let rest = k.get(prefix.len()..).unwrap_or_default();
            if rest.len() > 8 {
                let (id, at) = rest.split_at(rest.len() - 8);
                let mut be = [0u8; 8];
                be.copy_from_slice(at);
                if let Ok(id) = std::str::from_utf8(id) {
                    out.push((id.to_string(), u64::from_be_bytes(be)));
                }
            }
            Ok(out.len() < MAX_ENTRIES_PER_CALL)
        })?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_read_back_and_stay_apart_by_conversation_and_call() {
        let store = Store::in_memory();
        let mut batch = store.batch();
        batch
            .put_raw(cf::RUN_INDEX, &waiting_key("c", "call\0x", "r1"), b"")
            .unwrap();
        batch
            .put_raw(cf::RUN_INDEX, &waiting_key("c\0call", "x", "r2"), b"")
            .unwrap();
        batch
            .put_raw(cf::RUN_INDEX, &answer_key("c", "call\0x", "r3", 7), b"")
            .unwrap();
        batch
            .put_raw(cf::RUN_INDEX, &answer_key("c", "call\0x", "r3", 5), b"")
            .unwrap();
        store.commit(batch).unwrap();
        assert_eq!(store.runs_waiting_on("c", "call\0x").unwrap(), ["r1"]);
        assert_eq!(store.runs_waiting_on("c\0call", "x").unwrap(), ["r2"]);
        assert_eq!(
            store.answers_to("c", "call\0x").unwrap(),
            [("r3".to_string(), 5), ("r3".to_string(), 7)]
        );
        assert!(store.answers_to("c", "other").unwrap().is_empty());
    }
}
