//! Which stored messages name which blob of the media store, so a blob no run names any more can
//! be found without reading every message.
//!
//! `media_refs`: `digest (32 bytes) run key (8) message hash (16)` → nothing, one key per
//! (blob, message of a run) pair, written with the message ([`WriteBatch::put_message`]).
//! The index is a hint checked against the messages it points at: an entry whose message is
//! gone (a run merged away, a deletion interrupted) counts for nothing and is dropped when met.
//!
//! `media_gc`: `digest` → nothing: blobs whose naming message was deleted, to be checked (no
//! valid index entry left) and removed from the media store by the deletion driver.
//!
//! A message names a blob when its stored JSON holds `media+sha256://` and 64 lowercase hex
//! digits anywhere (the shape the media store writes; a sender's look-alike, neutralised into a
//! `uri` part, counts too: that only keeps a blob longer, never loses one).
//!
//! A store written before the index existed is indexed once when opened (see
//! [`Store::index_media_refs`]); the marker `media_refs_indexed` in [`Cf::Meta`] says it was.

use super::column::Cf;
use super::core::Store;
use super::error::StoreError;
use super::keys::RunKey;
use super::kv::KvBatch;
use crate::domain::MESSAGE_HASH_BYTES;

/// The scheme of a media reference in a stored message (the media store's
/// `crate::media::SCHEME`, spelled here because the store does not depend on the media layer).
pub const MEDIA_SCHEME: &[u8] = b"media+sha256://";

/// Bytes of a blob's digest.
pub const DIGEST_BYTES: usize = 32;

/// Where the store records that every stored message is in the index ([`Cf::Meta`]).
pub(crate) const INDEXED_KEY: &[u8] = b"media_refs_indexed";

/// Messages indexed per write batch while indexing an older store.
const INDEX_BATCH: usize = 4096;

/// The digests of the media references in a stored message's JSON, each once, in order of
/// first appearance.
pub fn named_in(json: &[u8]) -> Vec<[u8; DIGEST_BYTES]> {
    let mut out: Vec<[u8; DIGEST_BYTES]> = Vec::new();
    let mut at = 0;
    while let Some(found) = find(&json[at..], MEDIA_SCHEME) {
        let start = at + found + MEDIA_SCHEME.len();
        at = start;
        let Some(hex_text) = json.get(start..start + 2 * DIGEST_BYTES) else {
            break;
        };
        if !hex_text
            .iter()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        {
            continue;
        }
        let mut digest = [0u8; DIGEST_BYTES];
        if hex::decode_to_slice(hex_text, &mut digest).is_ok() && !out.contains(&digest) {
            out.push(digest);
        }
        at = start + 2 * DIGEST_BYTES;
    }
    out
}

/// The first position of `needle` in `haystack`.
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    let first = *needle.first()?;
    let mut at = 0;
    while let Some(offset) = haystack.get(at..)?.iter().position(|&b| b == first) {
        let start = at + offset;
        if haystack.get(start..start + needle.len())? == needle {
            return Some(start);
        }
        at = start + 1;
    }
    None
}

/// The index key of a message of run `run` (by its hash) naming blob `digest`.
pub fn ref_key(digest: &[u8; DIGEST_BYTES], run: RunKey, hash: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(DIGEST_BYTES + 8 + MESSAGE_HASH_BYTES);
    k.extend_from_slice(digest);
    k.extend_from_slice(&run.0);
    k.extend_from_slice(hash);
    k
}

/// Adds the index keys of one message (`message_key`: run key + hash, `json`: its stored bytes).
pub(super) fn index_message(batch: &mut KvBatch, message_key: &[u8], json: &[u8]) {
    for digest in named_in(json) {
        let mut k = digest.to_vec();
        k.extend_from_slice(message_key);
        batch.put(Cf::MediaRefs, &k, Vec::new());
    }
}

/// What [`Store::media_referenced`] found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RefCheck {
    /// True when some stored message still names the blob.
    pub referenced: bool,
    /// False when the budget of stale entries ran out before an answer (check again later).
    pub complete: bool,
    /// Index entries whose message is gone (to be deleted).
    pub stale: Vec<Vec<u8>>,
}

impl Store {
    /// Whether a stored message still names blob `digest`, checking index entries against the
    /// messages (at most `budget` stale ones are collected; past that the answer is not
    /// complete, to be checked again later).
    pub fn media_referenced(
        &self,
        digest: &[u8; DIGEST_BYTES],
        budget: usize,
    ) -> Result<RefCheck, StoreError> {
        let mut check = RefCheck {
            complete: true,
            ..RefCheck::default()
        };
        self.scan(Cf::MediaRefs, digest, digest, |key, _| {
            let message_key = &key[DIGEST_BYTES..];
            if self.kv.contains(Cf::Messages, message_key)? {
                check.referenced = true;
                return Ok(false);
            }
            if check.stale.len() == budget {
                check.complete = false;
                return Ok(false);
            }
            check.stale.push(key.to_vec());
            Ok(true)
        })?;
        Ok(check)
    }

    /// Up to `limit` blobs waiting for the media check, in digest order.
    pub fn media_candidates(&self, limit: usize) -> Result<Vec<[u8; DIGEST_BYTES]>, StoreError> {
        let mut out = Vec::new();
        self.scan(Cf::MediaGc, b"", b"", |key, _| {
            if let Ok(digest) = <[u8; DIGEST_BYTES]>::try_from(key) {
                out.push(digest);
            }
            Ok(out.len() < limit)
        })?;
        Ok(out)
    }

    /// Indexes the media references of every stored message, once, for a store written before
    /// the index existed (a full scan of the messages, in batches); records that it was done.
    pub(super) fn index_media_refs(&self) -> Result<(), StoreError> {
        if self.kv.contains(Cf::Meta, INDEXED_KEY)? {
            return Ok(());
        }
        let mut from: Vec<u8> = Vec::new();
        loop {
            let mut batch = KvBatch::default();
            let mut seen = 0;
            let mut last = None;
            self.scan(Cf::Messages, b"", &from, |key, value| {
                index_message(&mut batch, key, value);
                seen += 1;
                last = Some(key.to_vec());
                Ok(seen < INDEX_BATCH)
            })?;
            let Some(mut last) = last else { break };
            self.kv.write(batch, self.sync)?;
            if seen < INDEX_BATCH {
                break;
            }
            last.push(0);
            from = last;
        }
        let mut done = KvBatch::default();
        done.put(Cf::Meta, INDEXED_KEY, Vec::new());
        self.kv.write(done, self.sync)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_are_found_once_each_and_look_alikes_are_not() {
        let a = "ab".repeat(32);
        let b = "0f".repeat(32);
        let text = format!(
            r#"{{"parts":[{{"content":"media+sha256://{a}"}},{{"uri":"media+sha256://{b}"}},{{"content":"media+sha256://{a}"}},{{"content":"media+sha256://{}"}},{{"content":"media+sha256://short"}}]}}"#,
            "AB".repeat(32)
        );
        let found = named_in(text.as_bytes());
        let mut want_a = [0u8; 32];
        hex::decode_to_slice(&a, &mut want_a).unwrap();
        let mut want_b = [0u8; 32];
        hex::decode_to_slice(&b, &mut want_b).unwrap();
        assert_eq!(found, vec![want_a, want_b]);
        assert!(named_in(b"media+sha256://").is_empty());
        assert!(named_in(b"").is_empty());
        assert!(named_in(b"mmmmedia+sha").is_empty());
    }
}
