//! The validity walk's state part way through a history, kept in a run's stored state so a
//! history that extends another is judged from where the other ended. The walk itself is
//! `interpreter::validity`.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The walk part way through a history, so a history that extends another one is judged from
/// where the other one ended instead of from its first message.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WalkState {
    /// Messages walked.
    pub(crate) index: usize,
    /// Calls open so far, in the order they were made.
    #[serde(default, skip_serializing_if = "OpenCalls::is_empty")]
    pub(crate) open: OpenCalls,
    /// Why the history is invalid, once it is (nothing after it matters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) invalid: Option<String>,
}

/// Open tool calls in the order they were made, found by id in constant time and removed in
/// logarithmic time. Serialised as the list of ids, in order.
#[derive(Debug, Clone, Default)]
pub(crate) struct OpenCalls {
    /// Order number of the next call opened.
    next: u64,
    /// Open ids by order number.
    by_order: BTreeMap<u64, String>,
    /// Order number by open id.
    by_id: HashMap<String, u64>,
}

impl OpenCalls {
    pub(crate) fn is_empty(&self) -> bool {
        self.by_order.is_empty()
    }

    /// Opens `id`; false when it is open already.
    pub(crate) fn push(&mut self, id: &str) -> bool {
        if self.by_id.contains_key(id) {
            return false;
        }
        self.by_id.insert(id.to_string(), self.next);
        self.by_order.insert(self.next, id.to_string());
        self.next += 1;
        true
    }

    /// Closes `id`; false when it is not open.
    pub(crate) fn remove(&mut self, id: &str) -> bool {
        match self.by_id.remove(id) {
            Some(order) => {
                self.by_order.remove(&order);
                true
            }
            None => false,
        }
    }

    /// The open ids, in the order they were made.
    pub(crate) fn ids(&self) -> Vec<String> {
        self.by_order.values().cloned().collect()
    }
}

impl PartialEq for OpenCalls {
    fn eq(&self, other: &Self) -> bool {
        self.by_order.len() == other.by_order.len()
            && self.by_order.values().eq(other.by_order.values())
    }
}

impl Eq for OpenCalls {}

impl Serialize for OpenCalls {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.by_order.values())
    }
}

impl<'de> Deserialize<'de> for OpenCalls {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let ids = Vec::<String>::deserialize(deserializer)?;
        let mut open = OpenCalls::default();
        for id in &ids {
            open.push(id);
        }
        Ok(open)
    }
}
