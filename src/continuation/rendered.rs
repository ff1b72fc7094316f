//! Rendered continuations, kept as the bytes of their answer so a repeated request for the same
//! point of a run is served without rendering it again.
//!
//! An answer is kept under its run's revision ([`RunMeta::revision`](crate::interpreter::RunMeta),
//! raised by every write of the run's derived state, its run record included) and the request
//! that asked for it ([`Request`]): it is used only while the revision it was rendered at is
//! still the run's current one, so a kept answer is never older than a fresh render would be.
//! A run's answers of an older revision are dropped when one of a newer revision is kept. An
//! answer with media restored from the media store is not kept (it depends on that store too).
//!
//! The cache also remembers the last few requests for a run's latest snapshot
//! ([`RenderedCache::recent_requests`]): the formats orchestrators continue with, which the
//! prefetch renders ahead for a run that went quiet, and the load ahead at start renders for
//! the runs active then (the requests are kept in the store, [`Request::line`], for that). The
//! answers are bounded by a byte budget (by default [`RENDERED_CACHE_BYTES`]) in a
//! [`ByteCache`], which evicts by recency and reuse; in memory only.

use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::Mutex;

use bytes::Bytes;

use super::{Format, Selector};
use crate::cache_budget::{ByteCache, Equivalent};

/// Most bytes of rendered answers [`RenderedCache`] holds over all runs.
pub const RENDERED_CACHE_BYTES: usize = 64 << 20;

/// How many distinct requests for a latest snapshot [`RenderedCache::recent_requests`] keeps.
const RECENT_REQUESTS: usize = 4;

/// How a continuation gives media parts whose data is in the media store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MediaMode {
    /// The original base64 data, as the framework sent it (default).
    Inline,
    /// `media+sha256://` references, as `uri` parts.
    Reference,
}

/// What a continuation request asks for: everything its answer depends on besides the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Request {
    /// The output format.
    pub format: Format,
    /// A specific snapshot seq (none: the latest one `include_interrupted` allows).
    pub at: Option<u32>,
    /// Allow the latest snapshot even if it is interrupted.
    pub include_interrupted: bool,
    /// Close dangling tool calls with synthesized results.
    pub repair: bool,
    /// How media parts are given.
    pub media: MediaMode,
}

impl Request {
    /// A request for the latest complete snapshot in `format`, media inline, nothing repaired.
    pub fn latest(format: Format) -> Self {
        Self {
            format,
            at: None,
            include_interrupted: false,
            repair: false,
            media: MediaMode::Inline,
        }
    }

    /// The request as one line of the store's record of recent requests (only requests for a
    /// latest snapshot are kept there): `<format> latest <include_interrupted> <repair>
    /// <media>`, e.g. `pydantic-ai latest 0 1 inline`.
    pub fn line(&self) -> String {
        let flag = |b: bool| if b { "1" } else { "0" };
        let media = match self.media {
            MediaMode::Inline => "inline",
            MediaMode::Reference => "reference",
        };
        format!(
            "{} latest {} {} {media}",
            self.format.as_str(),
            flag(self.include_interrupted),
            flag(self.repair),
        )
    }

    /// The request a [`Request::line`] names; none for any other line (a format this build
    /// does not know, say).
    pub fn from_line(line: &str) -> Option<Self> {
        let flag = |w: &str| match w {
            "0" => Some(false),
            "1" => Some(true),
            _ => None,
        };
        let mut words = line.split(' ');
        let format = Format::parse(words.next()?)?;
        if words.next()? != "latest" {
            return None;
        }
        let include_interrupted = flag(words.next()?)?;
        let repair = flag(words.next()?)?;
        let media = match words.next()? {
            "inline" => MediaMode::Inline,
            "reference" => MediaMode::Reference,
            _ => return None,
        };
        words.next().is_none().then_some(Self {
            format,
            at: None,
            include_interrupted,
            repair,
            media,
        })
    }

    /// Which snapshot to load, and what of the run to load with it.
    pub fn selector(&self) -> Selector {
        Selector {
            at: self.at,
            include_interrupted: self.include_interrupted,
            repair: self.repair,
            provenance: self.format.needs_provenance(),
        }
    }
}

/// The key of a kept answer: its run and request.
#[derive(Clone, PartialEq, Eq)]
struct RunRequest {
    run: String,
    request: Request,
}

impl Hash for RunRequest {
    fn hash<H: Hasher>(&self, state: &mut H) {
        RunRequestRef {
            run: &self.run,
            request: &self.request,
        }
        .hash(state);
    }
}

/// A [`RunRequest`] looked up without allocating its run id.
struct RunRequestRef<'a> {
    run: &'a str,
    request: &'a Request,
}

impl Hash for RunRequestRef<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.run.hash(state);
        self.request.hash(state);
    }
}

impl Equivalent<RunRequest> for RunRequestRef<'_> {
    fn equivalent(&self, key: &RunRequest) -> bool {
        key.run == self.run && key.request == *self.request
    }
}

/// The revision of one run's kept answers and the requests they answer (all kept answers of a
/// run are of one revision).
struct RunAnswers {
    revision: u64,
    requests: HashSet<Request>,
}

struct Entries {
    answers: ByteCache<RunRequest, Bytes>,
    runs: HashMap<String, RunAnswers>,
    recent: Vec<Request>,
}

impl Entries {
    fn new(budget: usize) -> Self {
        Self {
            answers: ByteCache::new(budget),
            runs: HashMap::new(),
            recent: Vec::new(),
        }
    }

    /// Takes the answers that left the cache out of their runs' request sets.
    fn forget(&mut self, left: &[(RunRequest, Bytes)]) {
        for (key, _) in left {
            if let Some(run) = self.runs.get_mut(key.run.as_str()) {
                run.requests.remove(&key.request);
                if run.requests.is_empty() {
                    self.runs.remove(key.run.as_str());
                }
            }
        }
    }
}

/// Rendered continuation answers by run, revision and request.
pub struct RenderedCache {
    entries: Mutex<Entries>,
    budget: usize,
}

impl Default for RenderedCache {
    fn default() -> Self {
        Self::with_budget(RENDERED_CACHE_BYTES)
    }
}

impl RenderedCache {
    /// A cache holding at most `budget` bytes of answers.
    pub fn with_budget(budget: usize) -> Self {
        Self {
            entries: Mutex::new(Entries::new(budget)),
            budget,
        }
    }

    /// The answer to `request` for `run_id` rendered at `revision`, if kept.
    pub fn get(&self, run_id: &str, revision: u64, request: &Request) -> Option<Bytes> {
        let entries = self.entries.lock().ok()?;
        if entries.runs.get(run_id)?.revision != revision {
            return None;
        }
        entries
            .answers
            .get(&RunRequestRef {
                run: run_id,
                request,
            })
            .cloned()
    }

    /// Keeps the answer to `request` for `run_id`, rendered from the run at `revision` or
    /// later. Answers of an older revision of the run are dropped; an answer of an older
    /// revision than the kept ones, or larger than a quarter of the budget, is not kept.
    pub fn put(&self, run_id: &str, revision: u64, request: Request, body: Bytes) {
        if body.len() > self.budget / 4 {
            return;
        }
        let Ok(mut guard) = self.entries.lock() else {
            return;
        };
        let entries = &mut *guard;
        let run = match entries.runs.get_mut(run_id) {
            Some(run) => run,
            None => entries
                .runs
                .entry(run_id.to_string())
                .or_insert_with(|| RunAnswers {
                    revision,
                    requests: HashSet::new(),
                }),
        };
        if revision < run.revision {
            return;
        }
        if revision > run.revision {
            for old in run.requests.drain() {
                entries.answers.remove(&RunRequestRef {
                    run: run_id,
                    request: &old,
                });
            }
            run.revision = revision;
        }
        if !run.requests.insert(request) {
            entries.answers.remove(&RunRequestRef {
                run: run_id,
                request: &request,
            });
        }
        let key = RunRequest {
            run: run_id.to_string(),
            request,
        };
        let bytes = body.len();
        let left = entries.answers.insert(key, body, bytes);
        entries.forget(&left);
    }

    /// Notes a request for the latest snapshot of some run (requests naming a snapshot with
    /// `at` are not noted): the most recent [`RECENT_REQUESTS`] distinct ones are kept. True
    /// when it was not among them (the set changed, not only its order).
    pub fn note_request(&self, request: Request) -> bool {
        if request.at.is_some() {
            return false;
        }
        let Ok(mut entries) = self.entries.lock() else {
            return false;
        };
        let known = entries.recent.contains(&request);
        entries.recent.retain(|r| *r != request);
        entries.recent.insert(0, request);
        entries.recent.truncate(RECENT_REQUESTS);
        !known
    }

    /// Takes `requests` (newest first, as [`RenderedCache::recent_requests`] gives them) as the
    /// recent requests, e.g. those kept before a restart; requests naming a snapshot are
    /// passed over, and at most [`RECENT_REQUESTS`] distinct ones are kept.
    pub fn restore_recent_requests(&self, requests: impl IntoIterator<Item = Request>) {
        let Ok(mut entries) = self.entries.lock() else {
            return;
        };
        entries.recent.clear();
        for request in requests {
            if request.at.is_none()
                && !entries.recent.contains(&request)
                && entries.recent.len() < RECENT_REQUESTS
            {
                entries.recent.push(request);
            }
        }
    }

    /// The requests for a latest snapshot seen most recently, newest first.
    pub fn recent_requests(&self) -> Vec<Request> {
        self.entries
            .lock()
            .map(|e| e.recent.clone())
            .unwrap_or_default()
    }

    /// Bytes of answers held over all runs.
    pub fn held(&self) -> usize {
        self.entries.lock().map(|e| e.answers.bytes()).unwrap_or(0)
    }

    /// The byte budget.
    pub fn budget(&self) -> usize {
        self.budget
    }

    /// Drops every kept answer, keeping the recent requests (for benchmarks measuring reads
    /// that render).
    pub fn clear(&self) {
        if let Ok(mut entries) = self.entries.lock() {
            entries.runs.clear();
            entries.answers.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_request_for_a_latest_snapshot_reads_back_from_its_line() {
        let mut all = 0;
        for name in Format::NAMES {
            for include_interrupted in [false, true] {
                for repair in [false, true] {
                    for media in [MediaMode::Inline, MediaMode::Reference] {
                        let request = Request {
                            format: Format::parse(name).unwrap(),
                            at: None,
                            include_interrupted,
                            repair,
                            media,
                        };
                        let line = request.line();
                        assert!(
                            line.len() <= crate::store::RECENT_REQUEST_LINE_BYTES,
                            "{line}"
                        );
                        assert!(line.bytes().all(|b| (b' '..=b'~').contains(&b)), "{line}");
                        assert_eq!(Request::from_line(&line), Some(request), "{line}");
                        all += 1;
                    }
                }
            }
        }
        assert_eq!(all, Format::NAMES.len() * 8);
        for other in [
            "",
            "pydantic-ai",
            "pydantic-ai latest 0 0",
            "pydantic-ai latest 0 0 inline extra",
            "pydantic-ai at 0 0 inline",
            "pydantic-ai latest 2 0 inline",
            "pydantic-ai latest 0 0 base64",
            "langgraph latest 0 0 inline",
            "pydantic-ai  latest 0 0 inline",
        ] {
            assert_eq!(Request::from_line(other), None, "{other:?}");
        }
    }

    #[test]
    fn restored_requests_are_distinct_for_latest_snapshots_and_bounded() {
        let cache = RenderedCache::default();
        let at = Request {
            at: Some(3),
            ..Request::latest(Format::Otel)
        };
        let formats = [
            Format::Gemini,
            Format::Gemini,
            Format::Otel,
            Format::Anthropic,
            Format::Strands,
            Format::VercelAi,
        ];
        cache.restore_recent_requests(
            std::iter::once(at).chain(formats.into_iter().map(Request::latest)),
        );
        let kept: Vec<Format> = cache.recent_requests().iter().map(|r| r.format).collect();
        assert_eq!(
            kept,
            [
                Format::Gemini,
                Format::Otel,
                Format::Anthropic,
                Format::Strands
            ]
        );
        // A request already among them changes the order only; a new one changes the set.
        assert!(!cache.note_request(Request::latest(Format::Strands)));
        assert!(cache.note_request(Request::latest(Format::PydanticAi)));
        assert!(!cache.note_request(at));
    }

    fn body(n: usize) -> Bytes {
        Bytes::from(vec![b'x'; n])
    }

    #[test]
    fn an_answer_is_served_only_at_its_revision() {
        let cache = RenderedCache::with_budget(1 << 20);
        let chat = Request::latest(Format::OpenAiChat);
        cache.put("r", 5, chat, body(10));
        assert_eq!(cache.get("r", 5, &chat), Some(body(10)));
        assert_eq!(cache.get("r", 6, &chat), None, "the run changed since");
        assert_eq!(cache.get("other", 5, &chat), None);
        let otel = Request::latest(Format::Otel);
        assert_eq!(cache.get("r", 5, &otel), None, "another format");
        let repaired = Request {
            repair: true,
            ..chat
        };
        assert_eq!(cache.get("r", 5, &repaired), None, "another request");
    }

    #[test]
    fn a_newer_revision_drops_the_older_answers_and_an_older_one_is_not_kept() {
        let cache = RenderedCache::with_budget(1 << 20);
        let chat = Request::latest(Format::OpenAiChat);
        let otel = Request::latest(Format::Otel);
        cache.put("r", 5, chat, body(10));
        cache.put("r", 5, otel, body(20));
        assert_eq!(cache.held(), 30);
        cache.put("r", 7, otel, body(25));
        assert_eq!(cache.held(), 25);
        assert_eq!(cache.get("r", 5, &chat), None);
        cache.put("r", 6, chat, body(10));
        assert_eq!(cache.get("r", 6, &chat), None, "older than what is kept");
        assert_eq!(cache.held(), 25);
        cache.put("r", 7, otel, body(5));
        assert_eq!(cache.held(), 5, "a replaced answer frees its bytes");
    }

    #[test]
    fn a_used_answer_outlives_unused_ones_and_big_ones_are_not_kept() {
        let cache = RenderedCache::with_budget(100);
        let chat = Request::latest(Format::OpenAiChat);
        cache.put("a", 1, chat, body(20));
        cache.put("b", 1, chat, body(20));
        cache.put("c", 1, chat, body(20));
        assert!(cache.get("a", 1, &chat).is_some());
        cache.put("d", 1, chat, body(25));
        cache.put("e", 1, chat, body(25));
        assert!(cache.held() <= 100);
        assert!(cache.get("a", 1, &chat).is_some());
        assert!(cache.get("e", 1, &chat).is_some());
        let kept: usize = ["a", "b", "c", "d", "e"]
            .iter()
            .filter_map(|run| cache.get(run, 1, &chat))
            .map(|answer| answer.len())
            .sum();
        assert_eq!(kept, cache.held(), "what is held is what is served");
        {
            let entries = cache.entries.lock().unwrap();
            let indexed: usize = entries.runs.values().map(|r| r.requests.len()).sum();
            assert_eq!(
                indexed,
                entries.answers.len(),
                "the run index follows evictions"
            );
        }
        cache.put("f", 1, chat, body(26));
        assert!(
            cache.get("f", 1, &chat).is_none(),
            "over a quarter of the budget"
        );
        cache.clear();
        assert_eq!(cache.held(), 0);
        assert!(cache.get("a", 1, &chat).is_none());
    }

    #[test]
    fn recent_requests_are_distinct_newest_first_and_bounded() {
        let cache = RenderedCache::default();
        let at = Request {
            at: Some(3),
            ..Request::latest(Format::Otel)
        };
        cache.note_request(at);
        assert!(
            cache.recent_requests().is_empty(),
            "a fixed snapshot is not noted"
        );
        for format in [
            Format::Otel,
            Format::Gemini,
            Format::Otel,
            Format::Anthropic,
            Format::Strands,
            Format::PydanticAi,
        ] {
            cache.note_request(Request::latest(format));
        }
        let formats: Vec<Format> = cache.recent_requests().iter().map(|r| r.format).collect();
        assert_eq!(
            formats,
            [
                Format::PydanticAi,
                Format::Strands,
                Format::Anthropic,
                Format::Otel
            ]
        );
        cache.clear();
        assert_eq!(cache.recent_requests().len(), 4, "kept across clear");
    }
}
