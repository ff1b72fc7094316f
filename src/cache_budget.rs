//! What the in-memory caches share to stay within a byte budget: [`ByteCache`], a cache of
//! entries weighed in estimated bytes that evicts the least recently used ones (as a clock
//! approximates it, from `quick_cache`) to stay within its budget, and [`json_bytes`], an
//! estimate of the heap bytes a JSON value holds.
//!
//! Each cache of the service wraps one [`ByteCache`] behind its own lock and keeps, beside it,
//! whatever small index or count it needs: every operation that can take entries out
//! ([`ByteCache::insert`], [`ByteCache::set_budget`]) hands them back, so such an index is
//! updated with every eviction.

use std::hash::Hash;
use std::mem::size_of;

use quick_cache::unsync::Cache;
pub use quick_cache::Equivalent;
use quick_cache::{DefaultHashBuilder, Lifecycle, OptionsBuilder, Weighter};
use serde_json::Value;

/// A value with the weight (estimated bytes) it was put in with.
struct Weighed<V> {
    weight: u64,
    value: V,
}

/// Weighs an entry by the bytes it was put in with.
#[derive(Clone, Copy, Default)]
struct ByBytes;

impl<K, V> Weighter<K, Weighed<V>> for ByBytes {
    fn weight(&self, _key: &K, value: &Weighed<V>) -> u64 {
        value.weight
    }
}

/// Collects what an operation evicted, so the caller can uncount it.
#[derive(Clone, Copy, Default)]
struct Collect;

impl<K, V> Lifecycle<K, Weighed<V>> for Collect {
    type RequestState = Vec<(K, V)>;

    fn on_evict(&self, state: &mut Self::RequestState, key: K, value: Weighed<V>) {
        state.push((key, value.value));
    }
}

/// Entries a cache expects per byte of budget, for sizing its memory of recently evicted keys
/// (one per 4 KiB of budget, between 16 and 65,536).
fn estimated_items(budget: usize) -> usize {
    (budget / 4096).clamp(16, 1 << 16)
}

/// A cache of values weighed in estimated bytes, holding at most its byte budget over all
/// entries, built on `quick_cache` (CLOCK-Pro: entries used since the clock last passed them
/// are kept, the others go first). An entry over (nearly) the whole budget is not kept. Not
/// synchronised: the owner keeps it behind a lock.
pub struct ByteCache<K, V> {
    cache: Cache<K, Weighed<V>, ByBytes, DefaultHashBuilder, Collect>,
    budget: usize,
}

impl<K: Eq + Hash, V> ByteCache<K, V> {
    /// An empty cache holding at most `budget` estimated bytes.
    pub fn new(budget: usize) -> Self {
        Self {
            cache: Self::build(budget),
            budget,
        }
    }

    fn build(budget: usize) -> Cache<K, Weighed<V>, ByBytes, DefaultHashBuilder, Collect> {
        let mut options = OptionsBuilder::new();
        options
            .estimated_items_capacity(estimated_items(budget))
            .weight_capacity(budget as u64);
        match options.build() {
            Ok(options) => {
                Cache::with_options(options, ByBytes, DefaultHashBuilder::default(), Collect)
            }
            // Only a zero item estimate is refused, and the estimate is at least 16.
            Err(_) => Cache::with(
                16,
                budget as u64,
                ByBytes,
                DefaultHashBuilder::default(),
                Collect,
            ),
        }
    }

    /// The value of `key`, marked used.
    pub fn get<Q>(&self, key: &Q) -> Option<&V>
    where
        Q: Hash + Equivalent<K> + ?Sized,
    {
        self.cache.get(key).map(|w| &w.value)
    }

    /// The value of `key`, not marked used.
    pub fn peek<Q>(&self, key: &Q) -> Option<&V>
    where
        Q: Hash + Equivalent<K> + ?Sized,
    {
        self.cache.peek(key).map(|w| &w.value)
    }

    /// True when `key` is held.
    pub fn contains<Q>(&self, key: &Q) -> bool
    where
        Q: Hash + Equivalent<K> + ?Sized,
    {
        self.cache.contains_key(key)
    }

    /// Takes the entry of `key` out.
    pub fn remove<Q>(&mut self, key: &Q) -> Option<(K, V)>
    where
        Q: Hash + Equivalent<K> + ?Sized,
    {
        self.cache.remove(key).map(|(k, w)| (k, w.value))
    }

    /// Puts `value` in as the entry of `key`, weighing `bytes` (at least 1), and evicts entries
    /// down to the budget. Returns every entry that left the cache: the one `key` held before,
    /// the ones evicted, and `value` itself when it is too heavy to be kept.
    ///
    /// The new entry counts as used once: the caches of the service mostly put an entry in
    /// under a new key (a run's next history, its next chain) in place of one just used, so a
    /// new entry is given the standing of a used one, and entries never used again since go
    /// first (least recently used first, as a clock approximates it).
    #[must_use = "the entries that left the cache are to be uncounted by the caller"]
    pub fn insert(&mut self, key: K, value: V, bytes: usize) -> Vec<(K, V)>
    where
        K: Clone,
    {
        let mut left = Vec::new();
        if let Some((old_key, old)) = self.cache.remove(&key) {
            left.push((old_key, old.value));
        }
        let weight = bytes.max(1) as u64;
        self.cache
            .insert_with_lifecycle(key.clone(), Weighed { weight, value }, &mut left);
        let _ = self.cache.get(&key);
        left
    }

    /// Sets the byte budget, evicting down to it now; returns the entries evicted.
    #[must_use = "the entries that left the cache are to be uncounted by the caller"]
    pub fn set_budget(&mut self, budget: usize) -> Vec<(K, V)> {
        let old = std::mem::replace(&mut self.cache, Self::build(budget));
        self.budget = budget;
        let mut left = Vec::new();
        let mut old = old;
        for (key, held) in old.drain() {
            self.cache.insert_with_lifecycle(key, held, &mut left);
        }
        left
    }

    /// Drops every entry.
    pub fn clear(&mut self) {
        self.cache.clear();
    }

    /// Every entry, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> + '_ {
        self.cache.iter().map(|(k, w)| (k, &w.value))
    }

    /// Estimated bytes held over all entries.
    pub fn bytes(&self) -> usize {
        usize::try_from(self.cache.weight()).unwrap_or(usize::MAX)
    }

    /// The byte budget.
    pub fn budget(&self) -> usize {
        self.budget
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.cache.len()
    }

    /// True when nothing is held.
    pub fn is_empty(&self) -> bool {
        self.cache.is_empty()
    }
}

/// Bookkeeping bytes counted per map entry on top of its key and value (hash table slot,
/// order index node).
pub const ENTRY_OVERHEAD: usize = 64;

/// An estimate of the bytes `value` occupies: each node's own size plus its strings' and
/// containers' heap allocations. Walks the value without recursion, so any depth is fine.
pub fn json_bytes(value: &Value) -> usize {
    let mut total = 0;
    let mut stack = vec![value];
    while let Some(value) = stack.pop() {
        total += size_of::<Value>();
        match value {
            Value::String(s) => total += s.capacity(),
            Value::Array(items) => {
                total += items.capacity() * size_of::<Value>();
                // Each element's own size is counted when it is popped.
                total = total.saturating_sub(items.len() * size_of::<Value>());
                stack.extend(items.iter());
            }
            Value::Object(map) => {
                // A map entry: the key string, its allocation and the node holding both.
                for (key, member) in map {
                    total += size_of::<String>() + key.capacity() + 2 * size_of::<usize>();
                    stack.push(member);
                }
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_cache_stays_within_its_budget_and_hands_back_what_left() {
        let mut cache: ByteCache<String, usize> = ByteCache::new(10_000);
        let mut held = 0usize;
        for n in 0..1_000usize {
            held += 100 + n % 50;
            for (_, size) in cache.insert(format!("k{n}"), 100 + n % 50, 100 + n % 50) {
                held -= size;
            }
            assert!(cache.bytes() <= cache.budget());
            assert_eq!(cache.bytes(), held, "every entry that left was handed back");
        }
        assert!(cache.bytes() > cache.budget() / 2, "the budget is used");
        assert_eq!(cache.iter().map(|(_, s)| s).sum::<usize>(), held);
        // A key used again outlives keys put in after it and never used.
        let _ = cache.insert("hot".to_string(), 100, 100);
        for n in 0..1_000usize {
            assert_eq!(cache.get("hot"), Some(&100), "round {n}");
            let _ = cache.insert(format!("cold{n}"), 100, 100);
        }
        // Replacing a key hands the old value back; a too heavy value is handed back itself.
        assert_eq!(
            cache.insert("hot".to_string(), 7, 100),
            vec![("hot".to_string(), 100)]
        );
        let heavy = cache.insert("heavy".to_string(), 1, 20_000);
        assert_eq!(heavy, vec![("heavy".to_string(), 1)]);
        assert!(!cache.contains("heavy"));
        assert_eq!(cache.peek("hot"), Some(&7));
        assert_eq!(cache.remove("hot"), Some(("hot".to_string(), 7)));
        // A smaller budget evicts now and says what went.
        let before = cache.bytes();
        let left: usize = cache.set_budget(1_000).iter().map(|(_, s)| s).sum();
        assert!(cache.bytes() <= 1_000);
        assert_eq!(cache.bytes() + left, before);
        let mut none: ByteCache<String, usize> = ByteCache::new(0);
        assert_eq!(
            none.insert("a".to_string(), 1, 1).len(),
            1,
            "a zero budget keeps nothing"
        );
        assert!(none.is_empty());
    }

    #[test]
    fn json_bytes_grows_with_content_and_handles_any_depth() {
        let small = json_bytes(&json!({"a": "b"}));
        let large = json_bytes(&json!({"a": "b".repeat(10_000)}));
        assert!(large >= small + 9_999);
        let many = json_bytes(&Value::Array(vec![json!(1); 1000]));
        assert!(many >= 1000 * size_of::<Value>());
        let mut deep = json!(null);
        for _ in 0..100_000 {
            deep = Value::Array(vec![deep]);
        }
        assert!(json_bytes(&deep) >= 100_000 * size_of::<Value>());
        // Dropping a deep value recurses in serde_json; take it apart iteratively.
        let mut at = deep;
        while let Value::Array(mut items) = at {
            at = items.pop().unwrap_or(Value::Null);
        }
    }
}
