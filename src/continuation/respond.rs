//! Answering a continuation request: the answer kept for the run's current revision when there
//! is one ([`RenderedCache`]), else the snapshot's history loaded, its media restored, rendered
//! in the asked format and kept.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use serde_json::{json, Value};

use super::context::ContextCache;
use super::history::{load, ContinuationError, History};
use super::rendered::{MediaMode, RenderedCache, Request};
use super::{json_writer, render_into, Format, Out};
use crate::media::{self, Media};
use crate::store::Store;

/// What answering continuations needs: the store, the caches in front of it and the media store.
pub struct Continuations {
    store: Arc<Store>,
    contexts: ContextCache,
    rendered: RenderedCache,
    media: Arc<Media>,
    sizes: AnswerSizes,
}

/// Bytes per message of the last answer rendered in each format: the next answer's buffer is
/// sized from it, instead of doubling its way up to a megabyte (copying it each time).
#[derive(Default)]
struct AnswerSizes([AtomicUsize; Format::NAMES.len()]);

impl AnswerSizes {
    /// Most bytes a buffer is sized for ahead.
    const MOST: usize = 64 << 20;

    /// The bytes to set aside for an answer in `format` to a history of `messages` (none when
    /// no answer in the format was noted yet: the renderer's own guess is taken then).
    fn expected(&self, format: Format, messages: usize) -> usize {
        match self.0[format as usize].load(Ordering::Relaxed) {
            0 => 0,
            per_message => per_message
                .saturating_mul(messages + 1)
                .saturating_add(1024)
                .min(Self::MOST),
        }
    }

    /// Notes the size of an answer in `format` to a history of `messages`.
    fn note(&self, format: Format, messages: usize, bytes: usize) {
        self.0[format as usize].store(bytes / (messages + 1) + 1, Ordering::Relaxed);
    }
}

/// What the blocking part of a request found: a kept answer, or the history to render.
enum Found {
    Answer(Bytes),
    History(Box<History>, Option<u64>),
}

impl Continuations {
    /// Continuations of the runs in `store`, media restored from `media`; the requests seen
    /// most recently before the store was last closed are taken as the recent ones.
    pub fn new(store: Arc<Store>, media: Arc<Media>) -> Self {
        let rendered = RenderedCache::default();
        match store.recent_request_lines() {
            Ok(lines) => {
                rendered.restore_recent_requests(lines.iter().filter_map(|l| Request::from_line(l)))
            }
            Err(e) => tracing::debug!(error = %e, "the recent continuation requests were not read"),
        }
        Self {
            store,
            contexts: ContextCache::default(),
            rendered,
            media,
            sizes: AnswerSizes::default(),
        }
    }

    /// Sets the byte budgets of the rendered-answer cache and the context cache (both empty:
    /// call before the first request; the recent requests are carried over).
    pub fn with_cache_budgets(mut self, rendered: usize, context: usize) -> Self {
        let recent = self.rendered.recent_requests();
        self.rendered = RenderedCache::with_budget(rendered);
        self.rendered.restore_recent_requests(recent);
        self.contexts = ContextCache::with_budget(context);
        self
    }

    /// The store.
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// Effects and provenance of recently continued runs.
    pub fn contexts(&self) -> &ContextCache {
        &self.contexts
    }

    /// The media store continuations restore media parts from.
    pub fn media(&self) -> &Media {
        &self.media
    }

    /// Rendered answers, and the requests seen most recently.
    pub fn rendered(&self) -> &RenderedCache {
        &self.rendered
    }

    /// The answer to `request` for the run `id` (a run id or an alias): a JSON object with the
    /// run id, the format, the snapshot, the unresolved effects, warnings, the repaired calls
    /// when asked, and the format's own fields.
    pub async fn respond(
        self: &Arc<Self>,
        id: &str,
        request: Request,
    ) -> Result<Bytes, ContinuationError> {
        let noted = self.rendered.note_request(request);
        // Kept for the load ahead at the next start, written while the answer is made; a write
        // that fails only loses that. On the blocking pool: a write may wait for the memtables
        // to come under their budget.
        let keep = async {
            if !noted {
                return;
            }
            let lines: Vec<String> = self
                .rendered
                .recent_requests()
                .iter()
                .map(Request::line)
                .collect();
            let store = self.store.clone();
            let kept = tokio::task::spawn_blocking(move || store.keep_recent_request_lines(&lines))
                .await
                .map_err(|e| e.to_string())
                .and_then(|kept| kept.map_err(|e| e.to_string()));
            if let Err(error) = kept {
                tracing::debug!(%error, "the recent continuation requests were not kept");
            }
        };
        let ((), answer) = tokio::join!(keep, self.answer(id, request));
        answer
    }

    /// The answer to `request`, without noting the request as a recent one.
    pub(super) async fn answer(
        self: &Arc<Self>,
        id: &str,
        request: Request,
    ) -> Result<Bytes, ContinuationError> {
        let this = self.clone();
        let id = id.to_string();
        let found = tokio::task::spawn_blocking(move || this.kept_or_loaded(&id, request))
            .await
            .map_err(|e| ContinuationError::Task(e.to_string()))??;
        let (mut history, revision) = match found {
            Found::Answer(body) => return Ok(body),
            Found::History(history, revision) => (history, revision),
        };
        // The loaded history may be shared with the store's history cache: media goes into a
        // copy, made only when some message names a blob.
        let holds_media = history.holds_media();
        // An answer with blobs read from the media store is not kept: it depends on the media
        // store too (a blob gone missing must give its error on the next request as well).
        let keep = revision.filter(|_| !(holds_media && request.media == MediaMode::Inline));
        if holds_media {
            let mut messages: Vec<Value> =
                history.messages.iter().map(|m| Value::clone(m)).collect();
            match request.media {
                MediaMode::Inline => {
                    self.media
                        .restore(&history.run.run_id, &mut messages)
                        .await?;
                }
                MediaMode::Reference => media::show_references(&mut messages),
            }
            history.messages = messages.into_iter().map(Arc::new).collect();
        }
        // The answer is handed over as soon as it is written; what it was rendered from (the
        // history, when this request holds the only copy) is freed after that, on the rendering
        // thread: freeing is not the caller's wait. The service (and so the store) is let go
        // before the answer is handed over, so a caller that then closes the store finds no
        // other holder.
        let this = self.clone();
        let (tx, rx) = tokio::sync::oneshot::channel();
        tokio::task::spawn_blocking(move || {
            let run_id = history.run.run_id.clone();
            let messages = history.messages.len();
            let expected = this.sizes.expected(request.format, messages);
            answer(&mut history, request, expected, move |mut body| {
                this.sizes.note(request.format, messages, body.len());
                // A kept answer holds no more than its bytes (a guess too large is given back).
                if body.capacity() > body.len() + body.len() / 4 {
                    body.shrink_to_fit();
                }
                let body = Bytes::from(body);
                if let Some(revision) = keep {
                    this.rendered.put(&run_id, revision, request, body.clone());
                }
                drop(this);
                // The requester may be gone (its connection closed): nothing to do then.
                let _ = tx.send(body);
            });
        });
        rx.await
            .map_err(|_| ContinuationError::Task("the continuation was not rendered".into()))
    }

    /// The kept answer for the run's current revision, else the history to render and the
    /// revision it is at least as new as (none when the run has no revision yet).
    fn kept_or_loaded(&self, id: &str, request: Request) -> Result<Found, ContinuationError> {
        let run_id = self
            .store
            .resolve_run(id)?
            .ok_or_else(|| ContinuationError::NoRun(format!("run {id:?} not found")))?;
        // Read before anything else of the run, so what is rendered is at least this new and
        // may be kept under it (a run without one is rendered each time).
        let revision = self.store.run_meta(&run_id)?.map(|m| m.revision);
        if let Some(body) = revision.and_then(|r| self.rendered.get(&run_id, r, &request)) {
            return Ok(Found::Answer(body));
        }
        let run = self
            .store
            .run(&run_id)?
            .ok_or_else(|| ContinuationError::NoRun(format!("run {id:?} not found")))?;
        let history = load(&self.store, &self.contexts, run, request.selector())?;
        Ok(Found::History(Box::new(history), revision))
    }
}

/// Renders the answer to `request` from the history of its snapshot (repairing it first when
/// asked) and gives it to `deliver`, written into a buffer of at least `capacity` bytes.
fn answer(history: &mut History, request: Request, capacity: usize, deliver: impl FnOnce(Vec<u8>)) {
    let repaired = request.repair.then(|| history.repair());
    let format = request.format;
    // The answer is written into the buffer the renderer writes its long array into.
    let (fields, mut warnings) = render_into(format, history, Vec::with_capacity(capacity));
    // What interpretation could only guess (tool spans joined to calls by order) applies too.
    warnings.extend(history.run.warnings.iter().cloned());
    let unresolved = &history.unresolved;
    let meta = &history.snapshot.meta;
    let mut body = vec![
        ("run_id", Out::Str(&history.run.run_id)),
        ("format", Out::Str(format.as_str())),
        (
            "snapshot",
            Out::Value(json!({
                "seq": meta.seq,
                "step_index": meta.step_index,
                "state": meta.state,
                "source": meta.source,
                "message_count": meta.message_count,
                "timestamp": meta.timestamp,
            })),
        ),
        ("unresolved_effects", Out::Value(json!(unresolved))),
        ("warnings", Out::Value(json!(warnings))),
    ];
    if let Some(repaired) = repaired {
        body.push(("repaired", Out::Value(json!(repaired))));
    }
    body.extend(fields);
    deliver(json_writer::object_in_written(body, capacity));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::continuation::{prefetch, Format};
    use crate::exporter::Outbox;
    use crate::ingest::Ingest;
    use crate::test_fixtures::{delegate_scenario, request};

    struct Setup {
        store: Arc<Store>,
        ingest: Ingest,
        _dir: tempfile::TempDir,
    }

    fn setup() -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(dir.path(), false).unwrap());
        let ingest = Ingest::new(store.clone(), Arc::new(Outbox::disabled()));
        Setup {
            store,
            ingest,
            _dir: dir,
        }
    }

    fn continuations(store: &Arc<Store>) -> Arc<Continuations> {
        Arc::new(Continuations::new(
            store.clone(),
            Arc::new(Media::in_memory(None)),
        ))
    }

    /// The answer a service with empty caches gives.
    async fn fresh(store: &Arc<Store>, request: Request) -> Bytes {
        continuations(store)
            .respond("outer-call", request)
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn a_kept_answer_is_served_until_the_run_changes() {
        let s = setup();
        let spans = delegate_scenario();
        // The outer run's model request, its tool call not answered yet.
        s.ingest
            .export_traces(request(vec![spans[0].clone()]))
            .await
            .unwrap();
        let service = continuations(&s.store);
        let asked = Request {
            include_interrupted: true,
            ..Request::latest(Format::OpenAiChat)
        };
        let first = service.respond("outer-call", asked).await.unwrap();
        assert_eq!(first, fresh(&s.store, asked).await);
        assert!(service.rendered().held() >= first.len());
        let again = service.respond("outer-call", asked).await.unwrap();
        assert_eq!(again.as_ptr(), first.as_ptr(), "the kept answer itself");
        // Another request for the same run is rendered, not taken from the first.
        let otel = Request {
            format: Format::Otel,
            ..asked
        };
        assert_ne!(service.respond("outer-call", otel).await.unwrap(), first);

        // The tool answers: the run changes, and so does the answer.
        s.ingest
            .export_traces(request(vec![spans[3].clone()]))
            .await
            .unwrap();
        let after = service.respond("outer-call", asked).await.unwrap();
        assert_ne!(after, first);
        assert_eq!(after, fresh(&s.store, asked).await);
        let value: serde_json::Value = serde_json::from_slice(&after).unwrap();
        assert_eq!(value["messages"].as_array().map(Vec::len), Some(3));
    }

    #[tokio::test]
    async fn loading_ahead_renders_the_recent_requests() {
        let s = setup();
        s.ingest
            .export_traces(request(delegate_scenario()))
            .await
            .unwrap();
        let service = continuations(&s.store);
        let gemini = Request::latest(Format::Gemini);
        let asked = service.respond("outer-call", gemini).await.unwrap();
        service.rendered().clear();
        s.store.clear_history_cache();
        service.contexts().clear();
        let run_id = s.store.resolve_run("outer-call").unwrap().unwrap();
        assert!(prefetch::load_ahead(&service, &run_id, 0).await.unwrap());
        let held = service.rendered().held();
        assert_eq!(held, asked.len(), "the recent request, rendered ahead");
        let answered = service.respond("outer-call", gemini).await.unwrap();
        assert_eq!(answered, asked);
        assert_eq!(service.rendered().held(), held, "served from what was kept");
        // Too short a run for the threshold: nothing loaded.
        service.rendered().clear();
        assert!(!prefetch::load_ahead(&service, &run_id, 1_000)
            .await
            .unwrap());
        assert_eq!(service.rendered().held(), 0);
    }

    #[test]
    fn answer_buffers_are_sized_from_the_last_answer_of_the_format() {
        let sizes = AnswerSizes::default();
        assert_eq!(
            sizes.expected(Format::Otel, 1000),
            0,
            "nothing known yet: the renderer's guess"
        );
        sizes.note(Format::Otel, 2000, 700_000);
        let next = sizes.expected(Format::Otel, 2002);
        assert!((700_000..800_000).contains(&next), "{next}");
        let short = sizes.expected(Format::Otel, 4);
        assert!(
            short < 4_000,
            "a short history gets a small buffer: {short}"
        );
        assert_eq!(sizes.expected(Format::Gemini, 2000), 0, "per format");
        assert_eq!(
            sizes.expected(Format::Otel, usize::MAX - 1),
            AnswerSizes::MOST,
            "bounded"
        );
    }

    #[tokio::test]
    async fn answers_sized_from_an_earlier_answer_are_the_fresh_ones() {
        let s = setup();
        let spans = delegate_scenario();
        s.ingest
            .export_traces(request(vec![spans[0].clone()]))
            .await
            .unwrap();
        let service = continuations(&s.store);
        let asked = Request {
            include_interrupted: true,
            ..Request::latest(Format::OpenAiChat)
        };
        let first = service.respond("outer-call", asked).await.unwrap();
        s.ingest
            .export_traces(request(spans[1..].to_vec()))
            .await
            .unwrap();
        let long = service.respond("outer-call", asked).await.unwrap();
        assert_ne!(long, first, "the run changed");
        assert_eq!(long, fresh(&s.store, asked).await);
        // Sized from the answer before: the same bytes, and a buffer of about their length.
        service.rendered().clear();
        let again = service.respond("outer-call", asked).await.unwrap();
        assert_eq!(again, long);
        let expected = service.sizes.expected(asked.format, 8);
        assert!(expected < 1024 + 9 * (long.len() + 1), "{expected}");
        // The history is freed after the answer is handed over, but nothing holds the store by
        // then: it can be closed and opened again at once.
        drop(service);
        drop(s.ingest);
        assert!(Arc::try_unwrap(s.store).is_ok(), "the store is still held");
    }

    #[tokio::test]
    async fn an_unknown_run_is_not_found() {
        let s = setup();
        let service = continuations(&s.store);
        let e = service
            .respond("nope", Request::latest(Format::Otel))
            .await
            .unwrap_err();
        assert!(matches!(e, ContinuationError::NoRun(_)), "{e}");
        assert!(e.to_string().contains("\"nope\" not found"), "{e}");
    }

    #[tokio::test]
    async fn an_answer_with_media_inline_is_neither_kept_nor_rendered_ahead() {
        use crate::test_fixtures::{kv, span};
        use base64::Engine;
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(dir.path(), false).unwrap());
        let media = Arc::new(Media::in_memory(Some(16)));
        let ingest =
            Ingest::new(store.clone(), Arc::new(Outbox::disabled())).with_media(media.clone());
        let picture = base64::engine::general_purpose::STANDARD.encode([7u8; 64]);
        let input = serde_json::json!([{"role": "user", "parts": [
            {"type": "blob", "mime_type": "image/png", "modality": "image", "content": picture}
        ]}]);
        let output = serde_json::json!([{"role": "assistant", "parts": [
            {"type": "text", "content": "a square"}
        ]}]);
        let chat = span(
            2,
            1,
            "chat m",
            10,
            vec![
                kv("gen_ai.operation.name", "chat"),
                kv("gen_ai.agent.call.id", "media-run"),
                kv("gen_ai.input.messages", &input.to_string()),
                kv("gen_ai.output.messages", &output.to_string()),
            ],
        );
        ingest.export_traces(request(vec![chat])).await.unwrap();
        let service = Arc::new(Continuations::new(store.clone(), media));
        let inline = Request::latest(Format::Otel);
        let body = service.respond("media-run", inline).await.unwrap();
        assert!(
            String::from_utf8_lossy(&body).contains(&picture),
            "the blob is restored"
        );
        assert_eq!(service.rendered().held(), 0, "not kept");
        let reference = Request {
            media: MediaMode::Reference,
            ..inline
        };
        let shown = service.respond("media-run", reference).await.unwrap();
        assert!(String::from_utf8_lossy(&shown).contains("media+sha256://"));
        assert_eq!(service.rendered().held(), shown.len(), "kept");

        // Ahead of a request, only the answer that would be kept is rendered: no blob is read.
        service.rendered().clear();
        let restored = || {
            service
                .media()
                .counters()
                .restored
                .load(std::sync::atomic::Ordering::Relaxed)
        };
        let before = restored();
        assert!(before > 0);
        let run_id = store.resolve_run("media-run").unwrap().unwrap();
        assert!(prefetch::load_ahead(&service, &run_id, 0).await.unwrap());
        assert_eq!(service.rendered().held(), shown.len());
        assert_eq!(
            restored(),
            before,
            "the inline answer was not rendered ahead"
        );
    }
}
