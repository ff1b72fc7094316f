//! Removing blobs no stored message names any more.
//!
//! The rule: when a deletion removes a message naming a blob, the blob becomes a candidate
//! (`store::media_refs`); the writer checks each candidate against the index of the messages
//! that still name it, and gives the ones no message names. [`Media::remove_unreferenced`]
//! deletes those from the object store, except a blob some request saved (or found saved) for
//! messages not committed when the check began ([`Media::gc_epoch`]), or since: that request's
//! commit may name it again. A request holds its blobs ([`SaveHold`]) from before it saves
//! them until its messages are committed; saving and removing exclude each other, so a save
//! either comes before a removal (and is seen by it) or after (and writes the blob again).

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use object_store::ObjectStoreExt;

use super::{Media, MediaError, MediaRef};

/// Blobs being saved or waiting for their messages' commit, and the lock that keeps saves and
/// removals apart.
#[derive(Debug, Default)]
pub(super) struct SaveGuard {
    state: Mutex<GuardState>,
    removing: tokio::sync::RwLock<()>,
}

#[derive(Debug, Default)]
struct GuardState {
    /// Holds per blob.
    held: HashMap<MediaRef, usize>,
    /// Blobs held since the open epoch began (recorded only while one is open).
    since: HashSet<MediaRef>,
    /// True while a collection is under way.
    open: bool,
}

/// What a collection must spare: the blobs held when it began (see [`Media::gc_epoch`]).
#[derive(Debug, Default)]
pub struct GcEpoch {
    held: HashSet<MediaRef>,
}

/// A request's hold on the blobs it saved, until its messages are committed (drop it then).
#[derive(Debug)]
pub struct SaveHold<'a> {
    guard: &'a SaveGuard,
    refs: Vec<MediaRef>,
}

impl Drop for SaveHold<'_> {
    fn drop(&mut self) {
        let mut state = self.guard.lock();
        for r in &self.refs {
            if let Some(n) = state.held.get_mut(r) {
                *n -= 1;
                if *n == 0 {
                    state.held.remove(r);
                }
            }
        }
    }
}

impl SaveGuard {
    fn lock(&self) -> std::sync::MutexGuard<'_, GuardState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Holds `refs` from now until the returned hold is dropped.
    pub(super) fn hold(&self, refs: Vec<MediaRef>) -> SaveHold<'_> {
        let mut state = self.lock();
        for r in &refs {
            *state.held.entry(r.clone()).or_default() += 1;
            if state.open {
                state.since.insert(r.clone());
            }
        }
        drop(state);
        SaveHold { guard: self, refs }
    }

    /// Waits until no removal runs; saves keep removals out while the returned guard lives.
    pub(super) async fn saving(&self) -> tokio::sync::RwLockReadGuard<'_, ()> {
        self.removing.read().await
    }

    fn spared(&self, epoch: &GcEpoch, r: &MediaRef) -> bool {
        let state = self.lock();
        epoch.held.contains(r) || state.held.contains_key(r) || state.since.contains(r)
    }
}

impl Media {
    /// Begins a collection: call before the writer checks the candidates, and give the result
    /// to [`Media::remove_unreferenced`].
    pub fn gc_epoch(&self) -> GcEpoch {
        let mut state = self.guard.lock();
        state.open = true;
        state.since.clear();
        GcEpoch {
            held: state.held.keys().cloned().collect(),
        }
    }

    /// Removes the blobs of `digests` (SHA-256 digests no stored message names) from the object
    /// store, except those held by a request when `epoch` began or since. Ends the collection.
    /// Gives the digests that are gone (removed now, or absent already); the others stay
    /// candidates.
    pub async fn remove_unreferenced(
        &self,
        digests: &[[u8; 32]],
        epoch: &GcEpoch,
    ) -> Result<Vec<[u8; 32]>, MediaError> {
        let _exclusive = self.guard.removing.write().await;
        let outcome = self.remove_all(digests, epoch).await;
        let mut state = self.guard.lock();
        state.open = false;
        state.since.clear();
        outcome
    }

    async fn remove_all(
        &self,
        digests: &[[u8; 32]],
        epoch: &GcEpoch,
    ) -> Result<Vec<[u8; 32]>, MediaError> {
        let mut gone = Vec::new();
        for digest in digests {
            let text = format!("{}{}", super::reference::SCHEME, hex::encode(digest));
            let Some(reference) = MediaRef::parse(&text) else {
                continue;
            };
            if self.guard.spared(epoch, &reference) {
                continue;
            }
            let path = reference.object_path();
            match self.store.delete(&path).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {
                    self.counters
                        .removed
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    gone.push(*digest);
                }
                Err(e) => {
                    return Err(MediaError::Unavailable {
                        location: self.location.clone(),
                        operation: "delete",
                        path: path.to_string(),
                        detail: e.to_string(),
                    })
                }
            }
        }
        Ok(gone)
    }

    /// True when the object store holds the blob of `reference` (for checks and tests).
    pub async fn holds(&self, reference: &MediaRef) -> Result<bool, MediaError> {
        match self.store.head(&reference.object_path()).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(MediaError::Unavailable {
                location: self.location.clone(),
                operation: "check",
                path: reference.object_path().to_string(),
                detail: e.to_string(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::media::Blob;
    use bytes::Bytes;

    fn blob(seed: u8) -> Blob {
        let bytes: Vec<u8> = (0..100u8).map(|i| i.wrapping_mul(seed)).collect();
        Blob {
            reference: MediaRef::of(&bytes),
            bytes: Bytes::from(bytes),
        }
    }

    fn digest(r: &MediaRef) -> [u8; 32] {
        let mut d = [0u8; 32];
        hex::decode_to_slice(r.hex(), &mut d).unwrap();
        d
    }

    #[test]
    fn the_store_spells_the_scheme_the_media_store_writes() {
        assert_eq!(
            crate::store::media_refs::MEDIA_SCHEME,
            super::super::reference::SCHEME.as_bytes()
        );
    }

    #[tokio::test]
    async fn a_blob_held_by_a_request_is_spared_and_a_free_one_is_removed() {
        let media = Media::in_memory(Some(10));
        let (free, held_before, held_during) = (blob(3), blob(5), blob(7));
        media
            .save(vec![free.clone(), held_before.clone(), held_during.clone()])
            .await
            .unwrap();
        // A request saved `held_before` and has not committed yet when the collection begins;
        // another saves `held_during` after it began (and commits before the removal).
        let hold = media.guard.hold(vec![held_before.reference.clone()]);
        let epoch = media.gc_epoch();
        drop(hold);
        drop(media.guard.hold(vec![held_during.reference.clone()]));
        let all = [&free, &held_before, &held_during].map(|b| digest(&b.reference));
        let gone = media.remove_unreferenced(&all, &epoch).await.unwrap();
        assert_eq!(gone, vec![digest(&free.reference)]);
        assert!(!media.holds(&free.reference).await.unwrap());
        assert!(media.holds(&held_before.reference).await.unwrap());
        assert!(media.holds(&held_during.reference).await.unwrap());
        // The next collection finds them free; absent blobs count as gone.
        let epoch = media.gc_epoch();
        let gone = media.remove_unreferenced(&all, &epoch).await.unwrap();
        assert_eq!(gone, all.to_vec());
        assert!(!media.holds(&held_before.reference).await.unwrap());
    }
}
