//! What the in-memory caches share to stay within a byte budget: [`LruOrder`], the
//! least-recently-used order of a cache's entries with O(log n) use and eviction, and
//! [`json_bytes`], an estimate of the heap bytes a JSON value holds.
//!
//! Each cache keeps its entries in its own maps (keyed the way it looks them up) plus a tick per
//! entry; the [`LruOrder`] maps ticks back to keys, so the oldest entry is found without a scan
//! and a use moves an entry without cloning its key.

use std::collections::BTreeMap;
use std::mem::size_of;

use serde_json::Value;

/// The use order of a cache's entries: tick → key, oldest first.
#[derive(Debug)]
pub struct LruOrder<K> {
    order: BTreeMap<u64, K>,
    next: u64,
}

impl<K> Default for LruOrder<K> {
    fn default() -> Self {
        Self {
            order: BTreeMap::new(),
            next: 0,
        }
    }
}

impl<K> LruOrder<K> {
    /// Adds `key` as the most recently used entry; returns its tick.
    pub fn push(&mut self, key: K) -> u64 {
        self.next += 1;
        self.order.insert(self.next, key);
        self.next
    }

    /// Marks the entry at `tick` used now; returns its new tick (`tick` itself when there is no
    /// such entry).
    pub fn touch(&mut self, tick: u64) -> u64 {
        match self.order.remove(&tick) {
            Some(key) => self.push(key),
            None => tick,
        }
    }

    /// Forgets the entry at `tick`.
    pub fn remove(&mut self, tick: u64) -> Option<K> {
        self.order.remove(&tick)
    }

    /// Takes the least recently used entry's key out.
    pub fn pop_oldest(&mut self) -> Option<K> {
        self.order.pop_first().map(|(_, key)| key)
    }

    /// Forgets every entry.
    pub fn clear(&mut self) {
        self.order.clear();
    }

    /// Entries in the order.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// True when the order is empty.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
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
    fn order_evicts_least_recently_used_first() {
        let mut order = LruOrder::default();
        let a = order.push("a");
        let b = order.push("b");
        let _c = order.push("c");
        let a = order.touch(a);
        assert_eq!(order.pop_oldest(), Some("b"));
        assert_eq!(order.touch(b), b, "gone entries are not revived");
        assert_eq!(order.pop_oldest(), Some("c"));
        assert_eq!(order.remove(a), Some("a"));
        assert!(order.is_empty());
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
