//! Message bodies: `run key` `hash` (binary) → the message's canonical JSON, each distinct
//! message once per run.

use serde_json::Value;

use super::core::{decode, Store, WriteBatch};
use super::error::StoreError;
use super::history_cache::message_bytes;
use super::keys::{self, cf, RunKey};
use super::media_refs::MEDIA_SCHEME;
use crate::domain::{IdMap, MessageHash};
use crate::records::json;

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
        let key = keys::message_key(run, hash);
        let bytes = json::encode_value(body).map_err(|e| StoreError::Encode {
            cf: cf::MESSAGES,
            reason: e.reason,
        })?;
        // The blobs it names, for the media store's garbage collection.
        super::media_refs::index_message(&mut self.batch, &key, &bytes);
        self.batch.put(cf::MESSAGES, &key, bytes);
        Ok(())
    }
}

impl Store {
    /// True when the run has the message body.
    pub fn has_message(&self, run_id: &str, hash: &MessageHash) -> Result<bool, StoreError> {
        let Some(run) = self.run_key(run_id)? else {
            return Ok(false);
        };
        self.kv
            .contains(cf::MESSAGES, &keys::message_key(run, hash))
    }

    /// Message bodies of a run, in the order of `hashes`. A missing one is an error, never a
    /// silently different history.
    pub fn messages(&self, run_id: &str, hashes: &[MessageHash]) -> Result<Vec<Value>, StoreError> {
        Ok(self.read_messages(run_id, hashes, false)?.bodies)
    }

    /// [`Store::messages`], with what the history cache keeps of them besides: their estimated
    /// bytes (the sum of [`message_bytes`] over them) and whether one may name a blob, both
    /// found on the threads that decode them.
    pub fn messages_sized(
        &self,
        run_id: &str,
        hashes: &[MessageHash],
    ) -> Result<Bodies, StoreError> {
        self.read_messages(run_id, hashes, true)
    }

    /// The bodies; when `sized`, also their estimated bytes and whether one may name a blob
    /// (else 0 and false: [`Store::messages`] gives the bodies alone).
    fn read_messages(
        &self,
        run_id: &str,
        hashes: &[MessageHash],
        sized: bool,
    ) -> Result<Bodies, StoreError> {
        let missing = |hash: &MessageHash| StoreError::MissingMessage {
            run_id: run_id.to_string(),
            hash: hash.to_string(),
        };
        let Some(run) = self.run_key(run_id)? else {
            return match hashes.first() {
                Some(hash) => Err(missing(hash)),
                None => Ok(Bodies::default()),
            };
        };
        let found = if hashes.len() >= SCAN_FROM {
            self.scan_messages(run, hashes, sized)?
        } else {
            self.get_messages(run, hashes, sized)?
        };
        let bodies = hashes
            .iter()
            .zip(found.bodies)
            .map(|(hash, body)| body.ok_or_else(|| missing(hash)))
            .collect::<Result<Vec<Value>, StoreError>>()?;
        Ok(Bodies {
            bodies,
            bytes: found.bytes,
            may_name_media: found.may_name_media,
        })
    }

    /// One lookup per message.
    fn get_messages(
        &self,
        run: RunKey,
        hashes: &[MessageHash],
        sized: bool,
    ) -> Result<Decoded, StoreError> {
        let keys: Vec<Vec<u8>> = hashes.iter().map(|h| keys::message_key(run, h)).collect();
        let stored = self.kv.multi_get(cf::MESSAGES, &keys)?;
        let stored: Vec<Option<&[u8]>> = stored.iter().map(|b| b.as_deref()).collect();
        decode_some(&stored, sized)
    }

    /// One scan of the run's messages, decoding those the history holds.
    fn scan_messages(
        &self,
        run: RunKey,
        hashes: &[MessageHash],
        sized: bool,
    ) -> Result<Decoded, StoreError> {
        // Where each wanted hash goes (a message may appear more than once in a history).
        let mut wanted: IdMap<MessageHash, Vec<usize>> = IdMap::default();
        for (at, hash) in hashes.iter().enumerate() {
            wanted.entry(*hash).or_default().push(at);
        }
        // The bodies are copied out of the scan, then decoded in history order (so each
        // decoded message lies near the next one in memory, which rendering reads in that
        // order), on two threads when there are many.
        let mut found: Vec<(Vec<usize>, Vec<u8>)> = Vec::with_capacity(wanted.len());
        self.scan(cf::MESSAGES, &run.0, &run.0, |key, value| {
            if wanted.is_empty() {
                return Ok(false);
            }
            if let Some(at) =
                MessageHash::from_slice(&key[run.0.len()..]).and_then(|hash| wanted.remove(&hash))
            {
                found.push((at, value.to_vec()));
            }
            Ok(true)
        })?;
        let mut ordered: Vec<Option<&[u8]>> = vec![None; hashes.len()];
        for (at, bytes) in &found {
            for &i in at {
                ordered[i] = Some(bytes);
            }
        }
        decode_all(&ordered, sized)
    }
}

/// Message bodies read for a history, in its order.
#[derive(Debug, Default)]
pub struct Bodies {
    /// The decoded bodies.
    pub bodies: Vec<Value>,
    /// Their estimated bytes, as the history cache counts them.
    pub bytes: usize,
    /// False when no body's stored JSON holds [`MEDIA_SCHEME`]: none names a blob of the media
    /// store (true says only that one may: a look-alike in a text counts too).
    pub may_name_media: bool,
}

/// What [`decode_all`] gives: the bodies found (none stays none), their estimated bytes and
/// whether one may name a blob.
struct Decoded {
    bodies: Vec<Option<Value>>,
    bytes: usize,
    may_name_media: bool,
}

/// From this many bodies, half are decoded on a second thread (decoding is most of a long
/// history's cold read).
const PARALLEL_FROM: usize = 512;

/// Decodes the bodies in order (none stays none); when `sized`, also estimates their bytes and
/// looks for the media scheme in their stored bytes (what the history cache keeps of them).
fn decode_some(bodies: &[Option<&[u8]>], sized: bool) -> Result<Decoded, StoreError> {
    let mut bytes = 0;
    let mut may_name_media = false;
    let scheme = memchr::memmem::Finder::new(MEDIA_SCHEME);
    let decoded = bodies
        .iter()
        .map(|body| {
            let Some(body) = body else {
                return Ok(None);
            };
            let value: Value = decode(cf::MESSAGES, body)?;
            if sized {
                may_name_media = may_name_media || scheme.find(body).is_some();
                bytes += message_bytes(&value);
            }
            Ok(Some(value))
        })
        .collect::<Result<Vec<_>, StoreError>>()?;
    Ok(Decoded {
        bodies: decoded,
        bytes,
        may_name_media,
    })
}

/// Decodes the bodies in order (none stays none), with their estimated bytes when `sized`.
fn decode_all(bodies: &[Option<&[u8]>], sized: bool) -> Result<Decoded, StoreError> {
    if bodies.len() < PARALLEL_FROM {
        return decode_some(bodies, sized);
    }
    let (first, second) = bodies.split_at(bodies.len() / 2);
    std::thread::scope(|scope| {
        let other = std::thread::Builder::new()
            .name("stepline-decode".into())
            .spawn_scoped(scope, || decode_some(second, sized));
        let mut out = decode_some(first, sized)?;
        let rest = match other {
            Ok(handle) => handle.join().map_err(|_| StoreError::Corrupt {
                cf: cf::MESSAGES,
                reason: "the decoding thread failed".into(),
            })??,
            // No second thread to be had: decode here.
            Err(_) => decode_some(second, sized)?,
        };
        out.bodies.extend(rest.bodies);
        out.bytes += rest.bytes;
        out.may_name_media |= rest.may_name_media;
        Ok(out)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn message(n: usize) -> Value {
        json!({"role": "user", "parts": [{"type": "text", "content": format!("message {n}")}]})
    }

    #[test]
    fn histories_read_in_order_whether_looked_up_scanned_or_decoded_on_two_threads() {
        let store = Store::in_memory();
        let bodies: Vec<Value> = (0..PARALLEL_FROM + 100).map(message).collect();
        let mut batch = store.batch();
        for body in &bodies {
            batch
                .put_message("run", &MessageHash::of(body), body)
                .unwrap();
        }
        // Another run's messages lie next to this one's and are not read.
        batch
            .put_message("other", &MessageHash::of(&message(0)), &json!("other"))
            .unwrap();
        store.commit(batch).unwrap();
        for len in [3, SCAN_FROM, PARALLEL_FROM + 100] {
            // A history in its own order, with a message that appears twice.
            let mut history: Vec<&Value> = bodies[..len].iter().rev().collect();
            history.push(&bodies[1]);
            let hashes: Vec<MessageHash> = history.iter().map(|b| MessageHash::of(b)).collect();
            let read = store.messages("run", &hashes).unwrap();
            assert_eq!(read.iter().collect::<Vec<_>>(), history, "{len} messages");
        }
        // A missing body is an error naming it, on either path.
        for len in [3, PARALLEL_FROM] {
            let mut hashes: Vec<MessageHash> = bodies[..len].iter().map(MessageHash::of).collect();
            let absent = MessageHash::of(&message(usize::MAX));
            hashes.push(absent);
            let error = store.messages("run", &hashes).unwrap_err().to_string();
            assert!(error.contains(&absent.to_string()), "{error}");
        }
        assert!(store
            .messages("no-such-run", &[MessageHash::of(&message(0))])
            .is_err());
        // Sized, the same bodies and the bytes the history cache counts for them, on every path.
        for len in [3, SCAN_FROM, PARALLEL_FROM + 100] {
            let hashes: Vec<MessageHash> = bodies[..len].iter().map(MessageHash::of).collect();
            let Bodies {
                bodies: read,
                bytes,
                may_name_media,
            } = store.messages_sized("run", &hashes).unwrap();
            assert_eq!(read, bodies[..len], "{len} messages");
            assert!(!may_name_media, "no body holds the media scheme");
            assert_eq!(
                bytes,
                read.iter().map(message_bytes).sum::<usize>(),
                "{len}"
            );
            assert!(bytes > 0);
        }
    }

    #[test]
    fn a_history_with_the_media_scheme_in_a_body_may_name_media_on_every_path() {
        let store = Store::in_memory();
        let reference = format!("media+sha256://{}", "ab".repeat(32));
        let named = json!({"role": "user", "parts": [
            {"type": "blob", "content": reference, "size": 3}]});
        let mut bodies: Vec<Value> = (0..PARALLEL_FROM + 10).map(message).collect();
        bodies.push(named);
        let mut batch = store.batch();
        for body in &bodies {
            batch
                .put_message("run", &MessageHash::of(body), body)
                .unwrap();
        }
        store.commit(batch).unwrap();
        let named = bodies.len() - 1;
        // Short (looked up), scanned, and decoded on two threads (the body in the second half).
        for len in [3, SCAN_FROM, PARALLEL_FROM + 10] {
            let mut hashes: Vec<MessageHash> = bodies[..len].iter().map(MessageHash::of).collect();
            assert!(!store.messages_sized("run", &hashes).unwrap().may_name_media);
            hashes.push(MessageHash::of(&bodies[named]));
            let read = store.messages_sized("run", &hashes).unwrap();
            assert!(
                read.may_name_media,
                "{len} messages and the one naming a blob"
            );
            assert_eq!(read.bodies.last(), Some(&bodies[named]));
        }
    }
}
