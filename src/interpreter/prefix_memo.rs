//! A memo of the last message history interpreted per run, so a span that carries the previous
//! span's history plus a few messages parses and hashes only the new ones.
//!
//! Agent frameworks send the whole conversation so far on every model request as one JSON array
//! string (`gen_ai.input.messages`): at step 1,000 it holds 2,000 messages, 1,998 of them exactly
//! the bytes of the previous request's array. The memo keeps, per run key, the raw bytes of the
//! last array up to the end of its last element together with what interpreting each element
//! gave (hash, shape, body). A new string whose first bytes are exactly those bytes, followed by
//! JSON whitespace and `,` (more elements) or `]` (none), reuses the memoised results and parses
//! only the rest.
//!
//! Why the result equals a full parse: the prefix is compared byte for byte (no hash that could
//! collide), JSON elements are parsed independently of one another (the same bytes give the same
//! value, at the same nesting depth, whatever follows), and the rest is parsed as an array of its
//! own that must hold at least one element and end the input, which is exactly what the grammar
//! of the whole array asks of it (`[a, ]` and trailing garbage stay errors). Anything else (no
//! entry, different bytes, a parse error, a message without role and parts) is a miss, and the
//! caller interprets the string in full as before.
//!
//! Message bodies are shared ([`Arc`]) between the memo and the interpretations that reuse them,
//! never copied. The memo is only a shortcut for interpretation: it says nothing about what the
//! store holds, so the writer still decides from the store which bodies to write.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::Value;

use crate::cache_budget::{json_bytes, ByteCache, ENTRY_OVERHEAD};
use crate::domain::MessageRef;

/// Most messages the memo holds over all its entries.
pub const MEMO_MESSAGES: usize = 100_000;
/// Default byte budget of a memo (raw bytes plus the estimated bytes of the interpreted
/// messages, over all entries), unless [`set_default_budget`] changed it: the prefix memo's
/// share (15%) of the default cache budget (`crate::config::DEFAULT_CACHE_BUDGET`).
pub const MEMO_BYTES: usize = (48 << 20) * 15 / 100;

/// The byte budget [`PrefixMemo::default`] gives a memo.
static DEFAULT_BUDGET: AtomicUsize = AtomicUsize::new(MEMO_BYTES);

/// Estimated bytes held by every memo of the process (for metrics).
static PROCESS_BYTES: AtomicUsize = AtomicUsize::new(0);

/// Sets the byte budget of the memos made from now on with [`PrefixMemo::default`] (the
/// service sets it from `processors.stepline.memory.prefix_memo` before building the ingest).
pub fn set_default_budget(bytes: usize) {
    DEFAULT_BUDGET.store(bytes, Ordering::Relaxed);
}

/// The byte budget [`PrefixMemo::default`] gives a memo.
pub fn default_budget() -> usize {
    DEFAULT_BUDGET.load(Ordering::Relaxed)
}

/// Estimated bytes held by every memo of the process.
pub fn process_bytes() -> usize {
    PROCESS_BYTES.load(Ordering::Relaxed)
}

/// Estimated bytes of one interpreted message beside its raw JSON.
fn message_bytes(message: &MemoMessage) -> usize {
    json_bytes(&message.body) + 2 * std::mem::size_of::<MessageRef>()
}

/// One interpreted element of a memoised history.
#[derive(Debug)]
pub struct MemoMessage {
    /// Its hash and shape.
    pub reference: MessageRef,
    /// Its body.
    pub body: Value,
}

/// Consecutive elements of a history, and the index of the first of them in the history.
#[derive(Debug)]
struct Segment {
    first: usize,
    messages: Vec<MemoMessage>,
}

/// The first messages of a history, interpreted once and shared: cloning is cheap (one pointer),
/// bodies are never copied, and extending a list nobody else holds pushes one segment in place
/// (a step of a long run costs what it adds, not what the run holds).
#[derive(Debug, Clone, Default)]
pub struct SharedMessages {
    segments: Arc<Vec<Arc<Segment>>>,
    len: usize,
}

impl SharedMessages {
    /// Messages held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no message is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The messages, in order.
    pub fn iter(&self) -> impl Iterator<Item = &MemoMessage> + '_ {
        self.segments.iter().flat_map(|s| s.messages.iter())
    }

    /// The messages from index `from` on, with their index; the segments before the one that
    /// holds it are skipped by a binary search, not walked.
    pub fn iter_from(&self, from: usize) -> impl Iterator<Item = (usize, &MemoMessage)> + '_ {
        let start = self
            .segments
            .partition_point(|s| s.first + s.messages.len() <= from);
        self.segments[start..].iter().flat_map(move |s| {
            let first = s.first;
            s.messages
                .iter()
                .enumerate()
                .skip(from.saturating_sub(first))
                .map(move |(i, m)| (first + i, m))
        })
    }

    /// The messages, followed by `messages` when there are any; in place unless another list
    /// still holds the segments (then their pointers are copied, never the messages).
    fn extended(mut self, messages: Vec<MemoMessage>) -> SharedMessages {
        if !messages.is_empty() {
            let segment = Segment {
                first: self.len,
                messages,
            };
            self.len += segment.messages.len();
            Arc::make_mut(&mut self.segments).push(Arc::new(segment));
        }
        self
    }
}

impl PartialEq for SharedMessages {
    /// Equal when they hold the same messages (references and bodies) in the same order.
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len
            && self
                .iter()
                .zip(other.iter())
                .all(|(a, b)| a.reference == b.reference && a.body == b.body)
    }
}

/// What reading a message array through the memo gave: every message, the memoised ones and the
/// ones parsed now, as one shared history.
#[derive(Debug)]
pub struct MemoRead {
    /// The array's messages, in order.
    pub messages: SharedMessages,
    /// Their references, in order (shared with the memo, which extends the list in place for
    /// the next read when nobody else holds it any more).
    pub references: Arc<Vec<MessageRef>>,
    /// How many of them were reused from the memo (the others were parsed and hashed now).
    pub reused: usize,
}

/// A memoised history: the raw bytes its messages were parsed from (from the start of the string
/// to the end of its last element, in one buffer), its messages and their references.
struct Entry {
    raw: String,
    messages: SharedMessages,
    references: Arc<Vec<MessageRef>>,
    /// Estimated bytes of the interpreted messages (not the raw bytes).
    message_bytes: usize,
}

impl Entry {
    /// Estimated bytes held: raw bytes, interpreted messages, bookkeeping.
    fn bytes(&self) -> usize {
        ENTRY_OVERHEAD + self.raw.capacity() + self.message_bytes
    }
}

/// The memo: the last history read per key in a [`ByteCache`], bounded by [`MEMO_MESSAGES`]
/// and a byte budget ([`MEMO_BYTES`] by default) over all keys. Safe to share between threads;
/// the lock is held only to look an entry up or put one in, never while parsing or hashing.
pub struct PrefixMemo {
    inner: Mutex<Lru>,
    max_messages: usize,
    max_bytes: usize,
}

/// The entries and what they hold. An entry weighs its estimated bytes, but at least
/// `per_message` for each of its messages, so a cache of `max_bytes` holds at most
/// `max_messages` messages too.
struct Lru {
    entries: ByteCache<String, Entry>,
    per_message: usize,
    messages: usize,
    bytes: usize,
}

impl Lru {
    fn new(max_messages: usize, max_bytes: usize) -> Self {
        Self {
            entries: ByteCache::new(max_bytes),
            per_message: max_bytes.div_ceil(max_messages.max(1)),
            messages: 0,
            bytes: 0,
        }
    }

    /// Uncounts an entry taken out.
    fn forget(&mut self, entry: &Entry) {
        let bytes = entry.bytes();
        self.messages = self.messages.saturating_sub(entry.messages.len);
        self.bytes = self.bytes.saturating_sub(bytes);
        release(bytes);
    }

    /// Counts an entry put in.
    fn count(&mut self, entry: &Entry) {
        let bytes = entry.bytes();
        self.messages += entry.messages.len;
        self.bytes += bytes;
        PROCESS_BYTES.fetch_add(bytes, Ordering::Relaxed);
    }

    /// What `entry` weighs in the cache.
    fn weight(&self, entry: &Entry) -> usize {
        entry
            .bytes()
            .max(entry.messages.len.saturating_mul(self.per_message))
    }
}

impl Drop for Lru {
    fn drop(&mut self) {
        release(self.bytes);
    }
}

/// Uncounts `bytes` from the process total.
fn release(bytes: usize) {
    let _ = PROCESS_BYTES.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
        Some(held.saturating_sub(bytes))
    });
}

impl Default for PrefixMemo {
    fn default() -> Self {
        Self::new(MEMO_MESSAGES, default_budget())
    }
}

fn is_json_whitespace(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\r')
}

/// The end of the last element of a string holding a non-empty JSON array (the byte after it).
fn end_of_last_element(raw: &str) -> Option<usize> {
    let inner = raw
        .trim_end_matches(is_json_whitespace)
        .strip_suffix(']')?
        .trim_end_matches(is_json_whitespace);
    Some(inner.len())
}

/// Interprets parsed elements: each is mapped to its message body, `None` when one is not a
/// message (`map` gives none).
fn interpret(items: Vec<Value>, map: impl Fn(Value) -> Option<Value>) -> Option<Vec<MemoMessage>> {
    items
        .into_iter()
        .map(|item| {
            let body = map(item)?;
            Some(MemoMessage {
                reference: MessageRef::of(&body),
                body,
            })
        })
        .collect()
}

impl PrefixMemo {
    /// An empty memo holding at most `max_messages` messages and `max_bytes` estimated bytes.
    pub fn new(max_messages: usize, max_bytes: usize) -> Self {
        Self {
            inner: Mutex::new(Lru::new(max_messages, max_bytes)),
            max_messages,
            max_bytes,
        }
    }

    /// Reads the JSON array of messages `raw` for `key`, reusing the memoised history of `key`
    /// when `raw` extends it, and keeps the result for the next read. `None` when `raw` is not a
    /// non-empty array of elements `accept`ed (the caller then interprets it in full, which
    /// also gives the reason).
    pub fn read(&self, key: &str, raw: &str, accept: impl Fn(&Value) -> bool) -> Option<MemoRead> {
        self.read_mapped(key, raw, |item| accept(&item).then_some(item))
    }

    /// [`Self::read`] for histories whose elements are mapped to messages one by one (a
    /// provider's message shape to the canonical one): `map` gives an element's message body,
    /// or `None` when the element is not usable (the caller then interprets `raw` in full). The
    /// mapping must depend on the element alone, as the memo keeps what it gave.
    pub fn read_mapped(
        &self,
        key: &str,
        raw: &str,
        map: impl Fn(Value) -> Option<Value>,
    ) -> Option<MemoRead> {
        // Taken out while extending, so its raw bytes, segment list and reference list are not
        // shared and grow in place.
        let (read, kept, message_bytes) = match self.take(key) {
            Some(previous) => match Self::extend(previous, raw, &map) {
                Some(extended) => extended,
                None => Self::parse(raw, &map)?,
            },
            None => Self::parse(raw, &map)?,
        };
        self.put(
            key,
            kept,
            read.messages.clone(),
            read.references.clone(),
            message_bytes,
        );
        Some(read)
    }

    /// Reads `raw` for `key` as [`Self::read`] does when `raw` extends the memoised history of
    /// `key`, and then forgets `key`: for the last history of a run (an agent run's whole
    /// conversation), which no later read extends. `None` when the memo holds nothing for `key`
    /// or `raw` does not extend it (nothing is parsed then: the caller reads `raw` in full).
    pub fn read_last(
        &self,
        key: &str,
        raw: &str,
        accept: impl Fn(&Value) -> bool,
    ) -> Option<MemoRead> {
        let previous = self.take(key)?;
        let map = |item: Value| accept(&item).then_some(item);
        Self::extend(previous, raw, &map).map(|(read, _, _)| read)
    }

    /// `previous` followed by the elements of `raw` after it, when `raw` extends it; with the raw
    /// bytes of the extended history.
    fn extend(
        previous: Entry,
        raw: &str,
        map: &impl Fn(Value) -> Option<Value>,
    ) -> Option<(MemoRead, String, usize)> {
        let Entry {
            raw: mut kept,
            messages: previous,
            mut references,
            message_bytes: previous_bytes,
            ..
        } = previous;
        if references.len() != previous.len() || !raw.as_bytes().starts_with(kept.as_bytes()) {
            return None;
        }
        let at = kept.len();
        let rest = raw.get(at..)?;
        let after = rest.trim_start_matches(is_json_whitespace);
        if let Some(end) = after.strip_prefix(']') {
            // The same history again (a retried or duplicated span).
            return end
                .trim_start_matches(is_json_whitespace)
                .is_empty()
                .then(|| {
                    let read = MemoRead {
                        reused: previous.len(),
                        messages: previous,
                        references,
                    };
                    (read, kept, previous_bytes)
                });
        }
        let more = after.strip_prefix(',')?;
        let Ok(Value::Array(items)) = serde_json::from_str::<Value>(&format!("[{more}")) else {
            return None;
        };
        if items.is_empty() {
            return None; // `[a, ]` is not JSON
        }
        let messages = interpret(items, map)?;
        let added_bytes: usize = messages.iter().map(message_bytes).sum();
        let end = at + end_of_last_element(rest)?;
        kept.push_str(raw.get(at..end)?);
        // In place unless an interpretation still holds the list (then it is copied).
        Arc::make_mut(&mut references).extend(messages.iter().map(|m| m.reference.clone()));
        let read = MemoRead {
            reused: previous.len(),
            messages: previous.extended(messages),
            references,
        };
        Some((read, kept, previous_bytes + added_bytes))
    }

    /// Every element of `raw`, parsed and hashed now; with the raw bytes of the history.
    fn parse(
        raw: &str,
        map: &impl Fn(Value) -> Option<Value>,
    ) -> Option<(MemoRead, String, usize)> {
        let Ok(Value::Array(items)) = serde_json::from_str::<Value>(raw) else {
            return None;
        };
        if items.is_empty() {
            return None;
        }
        let messages = interpret(items, map)?;
        let message_bytes: usize = messages.iter().map(message_bytes).sum();
        let kept = raw.get(..end_of_last_element(raw)?)?.to_string();
        let references = messages.iter().map(|m| m.reference.clone()).collect();
        let read = MemoRead {
            messages: SharedMessages::default().extended(messages),
            references: Arc::new(references),
            reused: 0,
        };
        Some((read, kept, message_bytes))
    }

    /// Takes the entry of `key` out of the memo (it is put back, extended, by [`Self::put`]).
    fn take(&self, key: &str) -> Option<Entry> {
        let mut lru = self.inner.lock().ok()?;
        let (_, entry) = lru.entries.remove(key)?;
        lru.forget(&entry);
        Some(entry)
    }

    fn put(
        &self,
        key: &str,
        raw: String,
        messages: SharedMessages,
        references: Arc<Vec<MessageRef>>,
        message_bytes: usize,
    ) {
        let entry = Entry {
            raw,
            messages,
            references,
            message_bytes,
        };
        if entry.messages.len > self.max_messages || entry.bytes() > self.max_bytes {
            return;
        }
        let Ok(mut lru) = self.inner.lock() else {
            return;
        };
        let weight = lru.weight(&entry);
        lru.count(&entry);
        let left = lru.entries.insert(key.to_string(), entry, weight);
        for (_, gone) in &left {
            lru.forget(gone);
        }
        // What left is freed after the lock.
        drop(lru);
    }

    /// Messages held over all entries.
    pub fn messages(&self) -> usize {
        self.inner.lock().map(|l| l.messages).unwrap_or(0)
    }

    /// Keeps entries up to `bytes` and drops the others (the budget stays): for the idle task,
    /// once ingest went quiet. Gives the estimated bytes dropped.
    pub fn trim(&self, bytes: usize) -> usize {
        let Ok(mut inner) = self.inner.lock() else {
            return 0;
        };
        let before = inner.bytes;
        let left = inner.entries.set_budget(bytes.min(self.max_bytes));
        for (_, entry) in &left {
            inner.forget(entry);
        }
        let _ = inner.entries.set_budget(self.max_bytes);
        let dropped = before.saturating_sub(inner.bytes);
        // The entries are dropped after the lock is let go.
        drop(inner);
        drop(left);
        dropped
    }

    /// The byte budget.
    pub fn budget(&self) -> usize {
        self.max_bytes
    }

    /// Estimated bytes held over all entries (raw bytes and interpreted messages).
    pub fn bytes(&self) -> usize {
        self.inner.lock().map(|l| l.bytes).unwrap_or(0)
    }

    /// True when the memo holds a history for `key`.
    pub fn holds(&self, key: &str) -> bool {
        self.inner
            .lock()
            .map(|l| l.entries.contains(key))
            .unwrap_or(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn message(role: &str, text: &str) -> Value {
        json!({"role": role, "parts": [{"type": "text", "content": text}]})
    }

    fn is_message(v: &Value) -> bool {
        v.get("role").is_some_and(Value::is_string) && v.get("parts").is_some_and(Value::is_array)
    }

    /// What a full parse of `raw` gives: references and bodies, in order.
    fn full(raw: &str) -> (Vec<MessageRef>, Vec<Value>) {
        let Ok(Value::Array(items)) = serde_json::from_str::<Value>(raw) else {
            panic!("not an array: {raw}");
        };
        (items.iter().map(MessageRef::of).collect(), items)
    }

    /// The memo's read of `raw` equals the full parse; returns how many messages it reused.
    fn read_as_full(memo: &PrefixMemo, key: &str, raw: &str) -> usize {
        let read = memo
            .read(key, raw, is_message)
            .expect("an array of messages");
        let (references, bodies) = full(raw);
        assert_eq!(*read.references, references, "{raw}");
        let memo_refs: Vec<MessageRef> =
            read.messages.iter().map(|m| m.reference.clone()).collect();
        assert_eq!(memo_refs, references);
        let memo_bodies: Vec<Value> = read.messages.iter().map(|m| m.body.clone()).collect();
        assert_eq!(memo_bodies, bodies);
        read.reused
    }

    fn array(messages: &[Value]) -> String {
        Value::Array(messages.to_vec()).to_string()
    }

    #[test]
    fn an_extended_history_reuses_the_memoised_messages() {
        let memo = PrefixMemo::default();
        let mut history = vec![message("user", "go")];
        assert_eq!(read_as_full(&memo, "run", &array(&history)), 0);
        for k in 0..5 {
            let previous = history.len();
            history.push(message("assistant", &format!("step {k}")));
            history.push(message("user", &format!("answer {k}")));
            assert_eq!(read_as_full(&memo, "run", &array(&history)), previous);
        }
        // The same history again (a retried span) reuses everything.
        assert_eq!(read_as_full(&memo, "run", &array(&history)), history.len());
        // Another key does not see this run's history.
        assert_eq!(read_as_full(&memo, "other", &array(&history)), 0);
    }

    #[test]
    fn the_last_read_of_a_run_reuses_its_history_and_forgets_it() {
        let memo = PrefixMemo::default();
        let first = [message("user", "a"), message("assistant", "b")];
        let all = [first.to_vec(), vec![message("user", "c")]].concat();
        // Nothing memoised: nothing is parsed.
        assert!(memo.read_last("k", &array(&all), is_message).is_none());
        read_as_full(&memo, "k", &array(&first));
        let read = memo
            .read_last("k", &array(&all), is_message)
            .expect("extends the memoised history");
        assert_eq!(read.reused, 2);
        let (references, bodies) = full(&array(&all));
        assert_eq!(*read.references, references);
        let read_bodies: Vec<Value> = read.messages.iter().map(|m| m.body.clone()).collect();
        assert_eq!(read_bodies, bodies);
        assert!(!memo.holds("k"));
        assert_eq!((memo.messages(), memo.bytes()), (0, 0));
        // A history that does not extend the memoised one is a miss, and forgets it too.
        read_as_full(&memo, "k", &array(&first));
        let other = [message("user", "x"), message("user", "c")];
        assert!(memo.read_last("k", &array(&other), is_message).is_none());
        assert!(!memo.holds("k"));
    }

    #[test]
    fn messages_from_an_index_are_found_across_segments() {
        let memo = PrefixMemo::default();
        let mut history = vec![message("user", "go")];
        for k in 0..6 {
            for j in 0..=k {
                history.push(message("assistant", &format!("step {k}.{j}")));
            }
            memo.read("run", &array(&history), is_message).unwrap();
        }
        let read = memo.read("run", &array(&history), is_message).unwrap();
        let all: Vec<(usize, &MemoMessage)> = read.messages.iter().enumerate().collect();
        assert_eq!(all.len(), history.len());
        for from in 0..=history.len() + 1 {
            let found: Vec<usize> = read.messages.iter_from(from).map(|(i, _)| i).collect();
            let expected: Vec<usize> = all.iter().skip(from).map(|(i, _)| *i).collect();
            assert_eq!(found, expected, "from {from}");
            for (i, m) in read.messages.iter_from(from) {
                assert!(std::ptr::eq(m, all[i].1));
            }
        }
    }

    #[test]
    fn a_history_held_by_nobody_else_is_extended_in_place() {
        let memo = PrefixMemo::default();
        let mut history = vec![message("user", "go")];
        let first = memo.read("run", &array(&history), is_message).unwrap();
        let segments = Arc::as_ptr(&first.messages.segments);
        drop(first);
        for k in 0..3 {
            history.push(message("assistant", &format!("step {k}")));
            let next = memo.read("run", &array(&history), is_message).unwrap();
            assert_eq!(Arc::as_ptr(&next.messages.segments), segments);
            assert_eq!(next.reused, history.len() - 1);
        }
    }

    #[test]
    fn whitespace_between_elements_is_followed_exactly() {
        let memo = PrefixMemo::default();
        let a = r#" [ {"role":"user","parts":[]} ,
            {"role":"assistant","parts":[{"type":"text","content":"x"}]} ] "#;
        assert_eq!(read_as_full(&memo, "k", a), 0);
        let b = r#" [ {"role":"user","parts":[]} ,
            {"role":"assistant","parts":[{"type":"text","content":"x"}]}	,
            {"role":"user","parts":[]}]"#;
        assert_eq!(read_as_full(&memo, "k", b), 2);
    }

    #[test]
    fn a_changed_prefix_is_a_miss_and_parsed_in_full() {
        let memo = PrefixMemo::default();
        let first = vec![message("user", "go"), message("assistant", "hi")];
        read_as_full(&memo, "run", &array(&first));
        // A rewritten history (compaction): the first message differs.
        let rewritten = vec![
            message("user", "summary"),
            message("assistant", "hi"),
            message("user", "more"),
        ];
        assert_eq!(read_as_full(&memo, "run", &array(&rewritten)), 0);
        // A shorter history than the memoised one.
        assert_eq!(read_as_full(&memo, "run", &array(&rewritten[..1])), 0);
    }

    #[test]
    fn changed_bytes_of_equal_length_are_a_miss() {
        let memo = PrefixMemo::default();
        let first = vec![message("user", "hello"), message("assistant", "there")];
        let raw = array(&first);
        read_as_full(&memo, "run", &raw);
        let mut next = array(&[first.clone(), vec![message("user", "more")]].concat());
        assert!(next.starts_with(&raw[..raw.len() - 1]));
        // One byte inside the memoised prefix changes, the length stays.
        next = next.replacen("hello", "hellp", 1);
        assert_eq!(
            next.len(),
            array(&[first, vec![message("user", "more")]].concat()).len()
        );
        assert_eq!(read_as_full(&memo, "run", &next), 0);
        let read = memo.read("run", &next, is_message).unwrap();
        assert_eq!(
            read.messages.iter().next().unwrap().body["parts"][0]["content"],
            "hellp"
        );
    }

    #[test]
    fn what_a_full_parse_refuses_the_memo_refuses() {
        let memo = PrefixMemo::default();
        let first = array(&[message("user", "go")]);
        read_as_full(&memo, "run", &first);
        let open = &first[..first.len() - 1];
        for bad in [
            format!("{open}, ]"),
            format!("{open}]]"),
            format!("{open}] x"),
            format!("{open},"),
            format!("{open}, {{\"role\":\"user\"}}]"),
            format!("{open} {}]", message("user", "no comma")),
        ] {
            assert!(memo.read("run", &bad, is_message).is_none(), "{bad}");
            let accepted = matches!(
                serde_json::from_str::<Value>(&bad),
                Ok(Value::Array(items)) if !items.is_empty() && items.iter().all(is_message)
            );
            assert!(!accepted, "{bad}");
            // A refused read leaves nothing memoised for the key: the next one parses in full.
            assert_eq!(read_as_full(&memo, "run", &first), 0);
        }
        assert!(memo.read("run", "[]", is_message).is_none());
        assert!(memo.read("run", "{}", is_message).is_none());
    }

    #[test]
    fn a_history_still_held_elsewhere_is_copied_not_changed() {
        let memo = PrefixMemo::default();
        let mut history = vec![message("user", "go")];
        let held = memo.read("run", &array(&history), is_message).unwrap();
        history.push(message("assistant", "hi"));
        let next = memo.read("run", &array(&history), is_message).unwrap();
        assert_eq!(held.references.len(), 1);
        assert_eq!(next.references.len(), 2);
        assert_eq!(held.messages.len(), 1);
        assert_eq!(next.reused, 1);
    }

    #[test]
    fn the_memo_stays_within_its_bounds_least_recently_used_first_out() {
        let memo = PrefixMemo::new(5, 1 << 20);
        let two = array(&[message("user", "a"), message("assistant", "b")]);
        read_as_full(&memo, "a", &two);
        read_as_full(&memo, "b", &two);
        assert_eq!(memo.messages(), 4);
        // Reading `a` again makes `b` the least recently used.
        assert_eq!(read_as_full(&memo, "a", &two), 2);
        read_as_full(&memo, "c", &two);
        assert!(memo.messages() <= 5);
        assert!(memo.holds("a") && memo.holds("c") && !memo.holds("b"));
        // A history larger than the whole memo is read but not kept.
        let six: Vec<Value> = (0..6).map(|i| message("user", &i.to_string())).collect();
        assert_eq!(read_as_full(&memo, "big", &array(&six)), 0);
        assert!(!memo.holds("big"));
        assert!(memo.messages() <= 5);

        // The byte budget too: room for one entry, not two.
        let one = {
            let memo = PrefixMemo::new(100, 1 << 20);
            read_as_full(&memo, "a", &two);
            memo.bytes()
        };
        assert!(
            one > two.len(),
            "the interpreted messages count, not only the raw bytes"
        );
        let memo = PrefixMemo::new(100, one + one / 2);
        read_as_full(&memo, "a", &two);
        read_as_full(&memo, "b", &two);
        assert!(!memo.holds("a") && memo.holds("b"));
        assert!(memo.bytes() <= one + one / 2);

        // Many keys: the budget holds throughout and the count matches the entries.
        let memo = PrefixMemo::new(100_000, 50 * one);
        for k in 0..5_000 {
            read_as_full(&memo, &format!("run-{k}"), &two);
            assert!(memo.bytes() <= 50 * one);
        }
        assert_eq!(memo.bytes(), 50 * one);
    }
}
