//! Message bodies: `run key` `hash` (binary) → the message's canonical JSON, each distinct
//! message once per run.

use std::collections::HashMap;

use serde_json::Value;

use super::error::StoreError;
use super::keys::{self, cf, RunKey};
use super::rocks::{decode, Store, WriteBatch};
use crate::domain::{MessageHash, MESSAGE_HASH_BYTES};

/// From this many messages a history's bodies are read with one scan of the run's messages
/// instead of one lookup each: a long history is most of its run's messages, and they lie
/// together under the run's key.
const SCAN_FROM: usize = 64;

impl WriteBatch<'_> {
    /// Puts a message body of a run (canonical JSON).
    pub fn put_message(
        &mut self,
        run_id: &str,
        hash: &MessageHash,
        body: &Value,
    ) -> Result<(), StoreError> {
        let run = self.run_key(run_id)?;
        self.put_json(cf::MESSAGES, &keys::message_key(run, hash), body);
        Ok(())
    }
}

impl Store {
    /// True when the run has the message body.
    pub fn has_message(&self, run_id: &str, hash: &MessageHash) -> Result<bool, StoreError> {
        let Some(run) = self.run_key(run_id)? else {
            return Ok(false);
        };
        let handle = self.handle(cf::MESSAGES)?;
        Ok(self
            .db
            .get_pinned_cf(handle, keys::message_key(run, hash))?
            .is_some())
    }

    /// Message bodies of a run, in the order of `hashes`. A missing one is an error, never a
    /// silently different history.
    pub fn messages(&self, run_id: &str, hashes: &[MessageHash]) -> Result<Vec<Value>, StoreError> {
        let missing = |hash: &MessageHash| StoreError::MissingMessage {
            run_id: run_id.to_string(),
            hash: hash.0.clone(),
        };
        let Some(run) = self.run_key(run_id)? else {
            return match hashes.first() {
                Some(hash) => Err(missing(hash)),
                None => Ok(Vec::new()),
            };
        };
        let bodies = if hashes.len() >= SCAN_FROM {
            self.scan_messages(run, hashes)?
        } else {
            self.get_messages(run, hashes)?
        };
        hashes
            .iter()
            .zip(bodies)
            .map(|(hash, body)| body.ok_or_else(|| missing(hash)))
            .collect()
    }

    /// One lookup per message.
    fn get_messages(
        &self,
        run: RunKey,
        hashes: &[MessageHash],
    ) -> Result<Vec<Option<Value>>, StoreError> {
        let handle = self.handle(cf::MESSAGES)?;
        let keys: Vec<Vec<u8>> = hashes.iter().map(|h| keys::message_key(run, h)).collect();
        self.db
            .batched_multi_get_cf(handle, &keys, false)
            .into_iter()
            .map(|result| match result? {
                Some(bytes) => decode(cf::MESSAGES, &bytes).map(Some),
                None => Ok(None),
            })
            .collect()
    }

    /// One scan of the run's messages, decoding those the history holds.
    fn scan_messages(
        &self,
        run: RunKey,
        hashes: &[MessageHash],
    ) -> Result<Vec<Option<Value>>, StoreError> {
        // Where each wanted hash goes (a message may appear more than once in a history).
        let mut wanted: HashMap<[u8; MESSAGE_HASH_BYTES], Vec<usize>> = HashMap::new();
        for (at, hash) in hashes.iter().enumerate() {
            let mut binary = [0u8; MESSAGE_HASH_BYTES];
            if hex::decode_to_slice(&hash.0, &mut binary).is_err() {
                // Not a hash this store made: look each message up.
                return self.get_messages(run, hashes);
            }
            wanted.entry(binary).or_default().push(at);
        }
        let mut out: Vec<Option<Value>> = vec![None; hashes.len()];
        let handle = self.handle(cf::MESSAGES)?;
        let mut iter = self.db.raw_iterator_cf(handle);
        iter.seek(run.0);
        while let (Some(key), Some(value)) = (iter.key(), iter.value()) {
            if !key.starts_with(&run.0) || wanted.is_empty() {
                break;
            }
            if let Some(at) = key[run.0.len()..]
                .try_into()
                .ok()
                .and_then(|hash: [u8; MESSAGE_HASH_BYTES]| wanted.remove(&hash))
            {
                let body: Value = decode(cf::MESSAGES, value)?;
                if let Some((last, rest)) = at.split_last() {
                    for &i in rest {
                        out[i] = Some(body.clone());
                    }
                    out[*last] = Some(body);
                }
            }
            iter.next();
        }
        iter.status()?;
        Ok(out)
    }
}
