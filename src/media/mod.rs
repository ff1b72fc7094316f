//! Media: large binary message parts kept in an object store instead of in stored messages.
//!
//! On ingest, [`Media::offload`] takes every inline `blob` part of at least the configured size
//! out of the interpreted messages (replacing its base64 data by a content address,
//! `media+sha256://<hex>`), and [`Media::save`] writes the blobs to the object store before the
//! request is handed to the writer: a message in RocksDB never refers to a blob that is not
//! durably stored. On export, [`Media::restore`] puts the original bytes back (checking their
//! hash), or [`show_references`] shows the references as `uri` parts.

mod gc;
pub(crate) mod parts;
mod reference;
mod store;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use base64::Engine;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use serde_json::Value;

pub use gc::{GcEpoch, SaveHold};
pub use parts::Blob;
pub use reference::MediaRef;

use crate::config::MediaConfig;
use crate::domain::{IdMap, MessageHash};
use crate::interpreter::Interpreted;
use crate::service_error::{ServiceError, ServiceErrorCode};

/// Why media could not be stored or restored.
#[derive(Debug, thiserror::Error)]
pub enum MediaError {
    /// The object store could not be built from the configuration.
    #[error("cannot open the media store {location}: {detail}")]
    Open {
        /// The configured store.
        location: String,
        /// What failed.
        detail: String,
    },
    /// The store failed or could not be reached; trying again later may work.
    #[error(
        "the media store {location} is unavailable ({operation} {path}: {detail}); retry later"
    )]
    Unavailable {
        /// The configured store.
        location: String,
        /// `read`, `check` or `write`.
        operation: &'static str,
        /// The object's path in the store.
        path: String,
        /// The store's error.
        detail: String,
    },
    /// A blob a stored message refers to is not in the store.
    #[error(
        "{reference} for run {run_id} is missing from the object store ({location}: {path} not \
         found); the history cannot be given with its original bytes (media=reference gives it \
         with references)"
    )]
    Missing {
        /// The reference.
        reference: MediaRef,
        /// The run whose history refers to it.
        run_id: String,
        /// The configured store.
        location: String,
        /// The object's path in the store.
        path: String,
    },
    /// The history's blobs add up to more than one `media=inline` answer may hold.
    #[error(
        "the history of run {run_id} holds {bytes} bytes of media, over the limit of {limit} \
         bytes one answer may inline (extensions.stepline_storage.media.max_inline_bytes); \
         ask with media=reference to get the blobs as references"
    )]
    InlineTooLarge {
        /// The run.
        run_id: String,
        /// Decoded bytes of the distinct blobs the history names.
        bytes: u64,
        /// The configured limit.
        limit: u64,
    },
    /// The store holds bytes that do not hash to the reference.
    #[error(
        "{reference} for run {run_id} is damaged in the object store ({location}: {path} holds \
         {size} bytes whose SHA-256 differs)"
    )]
    Corrupt {
        /// The reference.
        reference: MediaRef,
        /// The run whose history refers to it.
        run_id: String,
        /// The configured store.
        location: String,
        /// The object's path in the store.
        path: String,
        /// Size of what the store returned.
        size: usize,
    },
}

impl ServiceError for MediaError {
    fn error_code(&self) -> ServiceErrorCode {
        match self {
            Self::Unavailable { .. } => ServiceErrorCode::Unavailable,
            Self::InlineTooLarge { .. } => ServiceErrorCode::PayloadTooLarge,
            Self::Open { .. } | Self::Missing { .. } | Self::Corrupt { .. } => {
                ServiceErrorCode::Internal
            }
        }
    }

    fn retry_after(&self) -> Option<std::time::Duration> {
        matches!(self, Self::Unavailable { .. }).then(|| std::time::Duration::from_secs(1))
    }
}

/// Counters for `/metrics`.
#[derive(Debug, Default)]
pub struct MediaCounters {
    /// Blobs written to the store.
    pub stored: AtomicU64,
    /// Bytes written to the store.
    pub stored_bytes: AtomicU64,
    /// Blobs offloaded that the store already held (content addressing: no second write).
    pub reused: AtomicU64,
    /// Blobs read back for `media=inline` continuations.
    pub restored: AtomicU64,
    /// Bytes read back.
    pub restored_bytes: AtomicU64,
    /// Writes or reads that failed.
    pub failures: AtomicU64,
    /// Blobs removed because no stored message names them any more.
    pub removed: AtomicU64,
}

/// How many blobs one restore reads at once.
pub const RESTORE_CONCURRENCY: usize = 8;

/// The media store: an object store plus the size from which blobs move into it.
pub struct Media {
    store: Arc<dyn ObjectStore>,
    location: String,
    threshold: Option<u64>,
    max_inline_bytes: u64,
    counters: MediaCounters,
    /// Recent saves, kept apart from removals (see [`gc`]).
    guard: gc::SaveGuard,
}

impl Media {
    /// Opens the store `config` names; `sync` (the storage setting) makes a local directory
    /// fsync each blob before it counts as written.
    pub fn open(config: &MediaConfig, sync: bool) -> Result<Self, MediaError> {
        let location = config.location.to_string();
        let store = store::open(config, sync).map_err(|detail| MediaError::Open {
            location: location.clone(),
            detail,
        })?;
        Ok(Self::with_store(store, location, config.threshold)
            .with_max_inline_bytes(config.max_inline_bytes))
    }

    /// A media store over any object store (`threshold` `None`: nothing is offloaded).
    pub fn with_store(
        store: Arc<dyn ObjectStore>,
        location: impl Into<String>,
        threshold: Option<u64>,
    ) -> Self {
        Self {
            store,
            location: location.into(),
            threshold,
            max_inline_bytes: crate::config::DEFAULT_MEDIA_MAX_INLINE_BYTES,
            counters: MediaCounters::default(),
            guard: gc::SaveGuard::default(),
        }
    }

    /// Sets the most decoded blob bytes one [`Media::restore`] puts back.
    pub fn with_max_inline_bytes(mut self, bytes: u64) -> Self {
        self.max_inline_bytes = bytes;
        self
    }

    /// An in-memory store, for tests.
    pub fn in_memory(threshold: Option<u64>) -> Self {
        Self::with_store(
            Arc::new(object_store::memory::InMemory::new()),
            "memory://",
            threshold,
        )
    }

    /// The store's URL, for messages.
    pub fn location(&self) -> &str {
        &self.location
    }

    /// The counters.
    pub fn counters(&self) -> &MediaCounters {
        &self.counters
    }

    /// Takes the blobs at or above the threshold out of the interpreted messages (rewriting the
    /// message hashes the facts refer to) and returns them, one per reference. Plain CPU work.
    ///
    /// First, every part a sender made look like a stored reference is turned into a plain
    /// `uri` part ([`parts::neutralise`]), offloading on or off: only what this method moved
    /// to the store is ever restored.
    pub fn offload(&self, interpreted: &mut [Interpreted]) -> Vec<Blob> {
        take_out(interpreted, self.threshold)
    }

    /// Writes the blobs to the store, concurrently; a blob already there (same address and
    /// size) is not written again. Returns when every blob is durably stored.
    pub async fn save(&self, blobs: Vec<Blob>) -> Result<(), MediaError> {
        self.save_held(blobs).await.map(drop)
    }

    /// [`Media::save`], holding the blobs against removal (see `gc`) until the returned hold is
    /// dropped: keep it until the messages naming them are committed.
    pub async fn save_held(&self, blobs: Vec<Blob>) -> Result<SaveHold<'_>, MediaError> {
        let hold = self
            .guard
            .hold(blobs.iter().map(|b| b.reference.clone()).collect());
        // No removal runs while the blobs are written.
        let _saving = self.guard.saving().await;
        self.write_blobs(blobs).await?;
        Ok(hold)
    }

    async fn write_blobs(&self, blobs: Vec<Blob>) -> Result<(), MediaError> {
        let mut tasks = tokio::task::JoinSet::new();
        for blob in blobs {
            let store = self.store.clone();
            tasks.spawn(async move { save_one(store.as_ref(), blob).await });
        }
        let mut first_error = None;
        while let Some(joined) = tasks.join_next().await {
            let outcome = joined.unwrap_or_else(|e| {
                Err(("write", String::new(), format!("upload task failed: {e}")))
            });
            let c = &self.counters;
            match outcome {
                Ok(Saved::Written(bytes)) => {
                    c.stored.fetch_add(1, Ordering::Relaxed);
                    c.stored_bytes.fetch_add(bytes, Ordering::Relaxed);
                }
                Ok(Saved::AlreadyThere) => {
                    c.reused.fetch_add(1, Ordering::Relaxed);
                }
                Err((operation, path, detail)) => {
                    c.failures.fetch_add(1, Ordering::Relaxed);
                    first_error.get_or_insert(MediaError::Unavailable {
                        location: self.location.clone(),
                        operation,
                        path,
                        detail,
                    });
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Puts the original base64 data of every reference in `messages` (the history of `run_id`)
    /// back, reading the blobs [`RESTORE_CONCURRENCY`] at a time and checking each against its
    /// hash. When the distinct blobs add up to more than the `max_inline_bytes` limit, nothing
    /// is read: [`MediaError::InlineTooLarge`] tells the caller to ask for references instead.
    pub async fn restore(&self, run_id: &str, messages: &mut [Value]) -> Result<(), MediaError> {
        let wanted: BTreeMap<MediaRef, u64> = messages
            .iter()
            .flat_map(parts::references_with_size)
            .collect();
        if wanted.is_empty() {
            return Ok(());
        }
        let bytes = wanted
            .values()
            .fold(0u64, |total, &size| total.saturating_add(size));
        if bytes > self.max_inline_bytes {
            return Err(MediaError::InlineTooLarge {
                run_id: run_id.to_owned(),
                bytes,
                limit: self.max_inline_bytes,
            });
        }
        let slots = Arc::new(tokio::sync::Semaphore::new(RESTORE_CONCURRENCY));
        let mut tasks = tokio::task::JoinSet::new();
        for reference in wanted.into_keys() {
            let store = self.store.clone();
            let slots = slots.clone();
            tasks.spawn(async move {
                let _slot = slots.acquire_owned().await;
                let outcome = load_one(store.as_ref(), &reference).await;
                (reference, outcome)
            });
        }
        let mut data = HashMap::new();
        let mut first_error = None;
        while let Some(joined) = tasks.join_next().await {
            let Ok((reference, outcome)) = joined else {
                first_error.get_or_insert(MediaError::Unavailable {
                    location: self.location.clone(),
                    operation: "read",
                    path: String::new(),
                    detail: "download task failed".into(),
                });
                continue;
            };
            let path = reference.object_path().to_string();
            match outcome {
                Ok((size, text)) => {
                    self.counters.restored.fetch_add(1, Ordering::Relaxed);
                    self.counters
                        .restored_bytes
                        .fetch_add(size as u64, Ordering::Relaxed);
                    data.insert(reference, text);
                }
                Err(failure) => {
                    self.counters.failures.fetch_add(1, Ordering::Relaxed);
                    let location = self.location.clone();
                    let run_id = run_id.to_owned();
                    first_error.get_or_insert(match failure {
                        LoadFailure::NotFound => MediaError::Missing {
                            reference,
                            run_id,
                            location,
                            path,
                        },
                        LoadFailure::WrongBytes(size) => MediaError::Corrupt {
                            reference,
                            run_id,
                            location,
                            path,
                            size,
                        },
                        LoadFailure::Store(detail) => MediaError::Unavailable {
                            location,
                            operation: "read",
                            path,
                            detail,
                        },
                    });
                }
            }
        }
        if let Some(error) = first_error {
            return Err(error);
        }
        for message in messages {
            parts::inline(message, &data);
        }
        Ok(())
    }
}

/// Neutralises the parts a sender made look like stored references in interpreted messages
/// built on a path that does not pass [`Media::offload`] (message bodies rebuilt from log
/// events), renaming the hashes the fact refers to. Nothing is offloaded.
pub fn neutralise_interpreted(item: &mut Interpreted) {
    take_out(std::slice::from_mut(item), None);
}

/// [`Media::offload`] with the threshold given: `None` only neutralises forged references.
fn take_out(interpreted: &mut [Interpreted], offload_at: Option<u64>) -> Vec<Blob> {
    // With offloading off nothing reaches the threshold; forged references still go.
    let threshold = offload_at.unwrap_or(u64::MAX);
    let mut blobs = Vec::new();
    for item in interpreted {
        let mut renamed: IdMap<MessageHash, MessageHash> = IdMap::default();
        for (hash, body) in &mut item.messages {
            let neutralised = parts::neutralise(body);
            let offloaded = offload_at.is_some() && parts::offload(body, threshold, &mut blobs);
            if neutralised || offloaded {
                let new = MessageHash::of(body);
                renamed.insert(std::mem::replace(hash, new), new);
            }
        }
        // Shared input bodies are read only: one with a blob to take out (or a forged
        // reference to neutralise) is copied into `messages` under its new hash (the fact's
        // reference is renamed below).
        for m in item.shared.iter() {
            let offloads = offload_at.is_some() && parts::may_offload(&m.body, threshold);
            if !offloads && !parts::looks_stored(&m.body) {
                continue;
            }
            let mut body = m.body.clone();
            let neutralised = parts::neutralise(&mut body);
            let offloaded = offloads && parts::offload(&mut body, threshold, &mut blobs);
            if neutralised || offloaded {
                let new = MessageHash::of(&body);
                renamed.insert(m.reference.hash, new);
                item.messages.push((new, body));
            }
        }
        if renamed.is_empty() {
            continue;
        }
        let fact = &mut item.fact;
        // The input may be shared with the memo: copied on write.
        let input = fact.input.as_mut().map(std::sync::Arc::make_mut);
        for list in [input, fact.output.as_mut(), fact.all_messages.as_mut()]
            .into_iter()
            .flatten()
        {
            for r in list.iter_mut() {
                if let Some(new) = renamed.get(&r.hash) {
                    r.hash = *new;
                }
            }
        }
    }
    blobs.sort_by(|a, b| a.reference.cmp(&b.reference));
    blobs.dedup_by(|a, b| a.reference == b.reference);
    blobs
}

/// Whether any of `messages` names a blob in the media store.
pub fn holds_references<'a>(messages: impl IntoIterator<Item = &'a Value>) -> bool {
    messages
        .into_iter()
        .any(|message| parts::references(message).next().is_some())
}

/// Shows the media references in `messages` as `uri` parts (`media=reference`).
pub fn show_references(messages: &mut [Value]) {
    for message in messages {
        parts::as_uri(message);
    }
}

enum Saved {
    Written(u64),
    AlreadyThere,
}

async fn save_one(
    store: &dyn ObjectStore,
    blob: Blob,
) -> Result<Saved, (&'static str, String, String)> {
    let path = blob.reference.object_path();
    let size = blob.bytes.len() as u64;
    match store.head(&path).await {
        Ok(meta) if meta.size == size => return Ok(Saved::AlreadyThere),
        // A different size cannot be this blob: written again below.
        Ok(_) | Err(object_store::Error::NotFound { .. }) => {}
        Err(e) => return Err(("check", path.to_string(), e.to_string())),
    }
    store
        .put(&path, PutPayload::from(blob.bytes))
        .await
        .map_err(|e| ("write", path.to_string(), e.to_string()))?;
    Ok(Saved::Written(size))
}

enum LoadFailure {
    NotFound,
    WrongBytes(usize),
    Store(String),
}

/// Reads one blob and returns its size and base64 text.
async fn load_one(
    store: &dyn ObjectStore,
    reference: &MediaRef,
) -> Result<(usize, String), LoadFailure> {
    let path = reference.object_path();
    let bytes = match store.get(&path).await {
        Ok(result) => result.bytes().await,
        Err(e) => Err(e),
    }
    .map_err(|e| match e {
        object_store::Error::NotFound { .. } => LoadFailure::NotFound,
        other => LoadFailure::Store(other.to_string()),
    })?;
    if !reference.matches(&bytes) {
        return Err(LoadFailure::WrongBytes(bytes.len()));
    }
    Ok((
        bytes.len(),
        base64::engine::general_purpose::STANDARD.encode(&bytes),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::MessageRef;
    use crate::interpreter::{FactKind, SpanFact};
    use bytes::Bytes;
    use serde_json::json;

    fn picture(seed: u8, len: usize) -> (Vec<u8>, String) {
        let bytes: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(seed)).collect();
        let text = base64::engine::general_purpose::STANDARD.encode(&bytes);
        (bytes, text)
    }

    fn model_request(messages: Vec<Value>) -> Interpreted {
        let mut fact = SpanFact::new(
            FactKind::ModelRequest,
            "t".repeat(32),
            "s".repeat(16),
            "chat".into(),
        );
        fact.input = Some(Arc::new(messages.iter().map(MessageRef::of).collect()));
        Interpreted {
            run_span_id: "r".repeat(16),
            fact,
            messages: messages
                .into_iter()
                .map(|m| (MessageHash::of(&m), m))
                .collect(),
            shared: Default::default(),
        }
    }

    fn user(parts: Value) -> Value {
        json!({"role": "user", "parts": parts})
    }

    #[test]
    fn shared_input_bodies_are_offloaded_without_changing_the_memo() {
        use crate::interpreter::{interpret_span, interpret_span_with, PrefixMemo};
        use crate::test_fixtures::{kv, span};
        let media = Media::in_memory(Some(64 * 1024));
        let (big, big_text) = picture(7, 64 * 1024);
        let history = vec![
            user(json!([{"type": "blob", "mime_type": "image/png", "content": big_text}])),
            user(json!([{"type": "text", "content": "what is it?"}])),
        ];
        let chat = span(
            2,
            1,
            "chat m",
            10,
            vec![
                kv("gen_ai.operation.name", "chat"),
                kv("gen_ai.input.messages", &Value::Array(history).to_string()),
            ],
        );
        let memo = PrefixMemo::default();
        let mut memoised = vec![interpret_span_with(&chat, &memo, &Default::default()).unwrap()];
        let mut plain = vec![interpret_span(&chat).unwrap()];
        let blobs = media.offload(&mut memoised);
        assert_eq!(blobs, media.offload(&mut plain));
        assert_eq!(blobs[0].reference, MediaRef::of(&big));
        // The same fact; every body it names is carried, the offloaded one in `messages`.
        assert_eq!(memoised[0].fact, plain[0].fact);
        let bodies: HashMap<&MessageHash, &Value> = memoised[0].bodies().collect();
        for (hash, body) in plain[0].bodies() {
            assert_eq!(bodies.get(hash), Some(&body));
        }
        // The memo still holds what the producer sent, for the next request.
        let again = interpret_span_with(&chat, &memo, &Default::default()).unwrap();
        assert_eq!(
            again.shared.iter().next().unwrap().body["parts"][0]["content"],
            json!(big_text)
        );
    }

    #[tokio::test]
    async fn a_forged_reference_is_kept_as_a_plain_uri_and_never_restored() {
        // A blob stepline stored for someone else's run.
        let (secret, secret_text) = picture(9, 1024);
        for threshold in [Some(64), None] {
            let media = Media::in_memory(threshold);
            let mut theirs = vec![model_request(vec![user(json!([
                {"type": "blob", "mime_type": "image/png", "content": secret_text}
            ]))])];
            let blobs = media.offload(&mut theirs);
            if threshold.is_some() {
                media.save(blobs).await.unwrap();
            } else {
                assert!(blobs.is_empty());
                media
                    .save(vec![Blob {
                        reference: MediaRef::of(&secret),
                        bytes: Bytes::from(secret.clone()),
                    }])
                    .await
                    .unwrap();
            }

            // A sender who knows the hash sends a part shaped like a stored reference.
            let forged_uri = MediaRef::of(&secret).to_string();
            let forged = user(json!([
                {"type": "blob", "mime_type": "image/png", "content": forged_uri, "size": 1024},
                {"type": "text", "content": "what is in it?"},
            ]));
            let mut mine = vec![model_request(vec![forged])];
            assert!(media.offload(&mut mine).is_empty());
            let stored: Vec<Value> = mine[0].messages.iter().map(|(_, m)| m.clone()).collect();
            let part = &stored[0]["parts"][0];
            assert_eq!(part["type"], "uri");
            assert_eq!(part["uri"], json!(forged_uri));
            assert!(part.get("content").is_none());
            assert_eq!(part["mime_type"], "image/png");
            // The facts name the neutralised body.
            let input = mine[0].fact.input.as_ref().unwrap();
            assert_eq!(input[0].hash, MessageHash::of(&stored[0]));
            assert_eq!(mine[0].messages[0].0, MessageHash::of(&stored[0]));

            assert!(!holds_references(&stored));
            let mut again = stored.clone();
            assert!(
                !again.iter_mut().any(parts::neutralise),
                "neutralising twice changes nothing"
            );
            let mut restored = stored.clone();
            media.restore("mine", &mut restored).await.unwrap();
            assert_eq!(restored, stored, "nothing restored");
            assert!(!serde_json::to_string(&restored)
                .unwrap()
                .contains(&secret_text[..40]));
        }
    }

    #[test]
    fn neutralise_turns_reference_shapes_into_uris_only() {
        let forged = MediaRef::of(b"x").to_string();
        let mut messages = [
            user(json!([{"type": "blob", "content": forged, "size": 1, "mime_type": "image/png"}])),
            user(json!([{"type": "blob", "content": forged}, {"type": "uri", "uri": forged}])),
        ];
        let untouched = messages[1].clone();
        assert!(parts::neutralise(&mut messages[0]));
        assert!(!parts::neutralise(&mut messages[1]));
        assert_eq!(
            messages[0]["parts"][0],
            json!({"type": "uri", "uri": forged, "size": 1, "mime_type": "image/png"})
        );
        assert_eq!(
            messages[1], untouched,
            "no size: not a stored reference's shape"
        );
    }

    #[tokio::test]
    async fn inline_restores_are_bounded_in_bytes() {
        let media = Media::in_memory(Some(64)).with_max_inline_bytes(3000);
        let pictures: Vec<(Vec<u8>, String)> = (1..=4).map(|i| picture(i, 1000)).collect();
        let one =
            |text: &str| user(json!([{"type": "blob", "mime_type": "image/png", "content": text}]));
        let mut interpreted = vec![model_request(
            pictures.iter().map(|(_, t)| one(t)).collect(),
        )];
        media.save(media.offload(&mut interpreted)).await.unwrap();
        let stored: Vec<Value> = interpreted[0]
            .messages
            .iter()
            .map(|(_, m)| m.clone())
            .collect();

        // Three distinct blobs (one named twice) fit; four do not.
        let mut three = vec![
            stored[0].clone(),
            stored[1].clone(),
            stored[2].clone(),
            stored[0].clone(),
        ];
        media.restore("r", &mut three).await.unwrap();
        assert_eq!(three[2], one(&pictures[2].1));
        let mut four = stored.clone();
        let error = media.restore("r", &mut four).await.unwrap_err();
        assert!(
            matches!(
                error,
                MediaError::InlineTooLarge {
                    bytes: 4000,
                    limit: 3000,
                    ..
                }
            ),
            "{error:?}"
        );
        assert_eq!(error.error_code(), ServiceErrorCode::PayloadTooLarge);
        assert!(error.to_string().contains("media=reference"), "{error}");
        assert_eq!(four, stored, "nothing was read");
    }

    #[tokio::test]
    async fn threshold_dedupe_restore_and_missing_blob() {
        let media = Media::in_memory(Some(64 * 1024));
        let (big, big_text) = picture(3, 64 * 1024);
        let (_, small_text) = picture(5, 64 * 1024 - 1);
        let first = user(json!([
            {"type": "text", "content": "look"},
            {"type": "blob", "mime_type": "image/png", "modality": "image", "content": big_text},
            {"type": "blob", "mime_type": "image/png", "content": small_text},
        ]));
        let second = user(json!([{"type": "blob", "mime_type": "image/png", "content": big_text}]));
        let originals = vec![first.clone(), second.clone()];
        let mut interpreted = vec![model_request(originals.clone())];
        let blobs = media.offload(&mut interpreted);
        assert_eq!(blobs.len(), 1, "the same image twice is one blob");
        let reference = blobs[0].reference.clone();
        assert_eq!(reference, MediaRef::of(&big));

        // The messages now hold the reference; the facts refer to the new bodies.
        let item = &interpreted[0];
        let stored: Vec<Value> = item.messages.iter().map(|(_, m)| m.clone()).collect();
        assert_eq!(
            stored[0]["parts"][1]["content"],
            json!(reference.to_string())
        );
        assert_eq!(
            stored[0]["parts"][2], first["parts"][2],
            "below the threshold"
        );
        assert!(!serde_json::to_string(&stored)
            .unwrap()
            .contains(&big_text[..100]));
        for ((hash, body), r) in item
            .messages
            .iter()
            .zip(item.fact.input.as_ref().unwrap().iter())
        {
            assert_eq!(hash, &MessageHash::of(body));
            assert_eq!(&r.hash, hash);
        }

        media.save(blobs.clone()).await.unwrap();
        media.save(blobs).await.unwrap();
        let c = media.counters();
        assert_eq!(c.stored.load(Ordering::Relaxed), 1);
        assert_eq!(c.stored_bytes.load(Ordering::Relaxed), big.len() as u64);
        assert_eq!(
            c.reused.load(Ordering::Relaxed),
            1,
            "a second save writes nothing"
        );

        let mut restored = stored.clone();
        media.restore("run-1", &mut restored).await.unwrap();
        assert_eq!(restored, originals);

        let mut shown = stored.clone();
        show_references(&mut shown);
        assert_eq!(shown[1]["parts"][0]["uri"], json!(reference.to_string()));
        assert_eq!(shown[1]["parts"][0]["type"], "uri");

        media.store.delete(&reference.object_path()).await.unwrap();
        let mut again = stored.clone();
        let error = media.restore("run-1", &mut again).await.unwrap_err();
        assert!(matches!(error, MediaError::Missing { .. }), "{error:?}");
        assert_eq!(error.error_code(), ServiceErrorCode::Internal);
        let text = error.to_string();
        assert!(
            text.starts_with(&format!(
                "{reference} for run run-1 is missing from the object store (memory://"
            )),
            "{text}"
        );
        assert_eq!(again, stored, "nothing half-restored on error");
    }

    #[tokio::test]
    async fn wrong_bytes_are_refused_and_disabled_offloads_nothing() {
        let media = Media::in_memory(Some(10));
        let (_, text) = picture(7, 100);
        let mut interpreted = vec![model_request(vec![user(
            json!([{"type": "blob", "content": text}]),
        )])];
        let blobs = media.offload(&mut interpreted);
        let path = blobs[0].reference.object_path();
        media
            .store
            .put(&path, PutPayload::from(vec![0u8; 100]))
            .await
            .unwrap();
        media.save(blobs).await.unwrap();
        let mut messages = vec![interpreted[0].messages[0].1.clone()];
        let error = media.restore("r", &mut messages).await.unwrap_err();
        assert!(
            error.to_string().contains("is damaged in the object store"),
            "{error}"
        );

        let off = Media::in_memory(None);
        let mut interpreted = vec![model_request(vec![user(
            json!([{"type": "blob", "content": text}]),
        )])];
        let before = interpreted.clone();
        assert!(off.offload(&mut interpreted).is_empty());
        assert_eq!(interpreted, before);
    }

    #[tokio::test]
    async fn a_local_directory_store_writes_content_addressed_files() {
        let dir = tempfile::tempdir().unwrap();
        let config = MediaConfig {
            threshold: Some(8),
            location: crate::config::MediaLocation::Directory(dir.path().join("media")),
            options: Default::default(),
            ..Default::default()
        };
        let media = Media::open(&config, true).unwrap();
        let (bytes, text) = picture(11, 4096);
        let mut interpreted = vec![model_request(vec![user(
            json!([{"type": "blob", "content": text}]),
        )])];
        let blobs = media.offload(&mut interpreted);
        let hex = blobs[0].reference.hex().to_string();
        media.save(blobs).await.unwrap();
        let file = dir.path().join("media/sha256").join(&hex[..2]).join(&hex);
        assert_eq!(std::fs::read(file).unwrap(), bytes);
    }
}
