//! `repair=true`: closing dangling tool calls the way Pydantic AI does, with a synthesized tool
//! result whose content is fixed, so the repaired history is the same every time (caches stay
//! valid).

use std::sync::Arc;

use serde::Serialize;
use serde_json::{json, Value};

use super::parts::{self, Pairing};
use super::History;
use crate::domain::MessageHash;

/// The content of a synthesized result (Pydantic AI's `INTERRUPTED_TOOL_RETURN_CONTENT`).
pub const INTERRUPTED_CONTENT: &str = "The tool call was interrupted before a result was produced.";

/// A tool call that `repair=true` closed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct RepairedCall {
    /// The call id.
    pub tool_call_id: String,
    /// The tool.
    pub tool_name: String,
    /// Index (in the repaired internal history) of the message holding the synthesized result.
    pub message_index: usize,
}

impl History {
    /// Closes every call that has no result: right after the assistant message that made them, a
    /// `tool` message answers each with [`INTERRUPTED_CONTENT`] and outcome `interrupted`. Returns
    /// the calls it closed, in history order.
    pub fn repair(&mut self) -> Vec<RepairedCall> {
        let pairing = Pairing::of(&self.messages);
        if pairing.unanswered.is_empty() {
            return Vec::new();
        }
        let mut repaired = Vec::new();
        let mut messages = Vec::with_capacity(self.messages.len() + 1);
        let mut hashes = Vec::with_capacity(self.hashes.len() + 1);
        for (mi, (message, hash)) in self
            .messages
            .iter()
            .cloned()
            .zip(self.hashes.iter().cloned())
            .enumerate()
        {
            let closes: Vec<Value> = pairing
                .unanswered_in(mi)
                .filter_map(|p| parts::parts(&message).get(p))
                .map(|call| {
                    json!({
                        "type": "tool_call_response",
                        "id": parts::field(call, "id"),
                        "name": parts::field(call, "name"),
                        "response": INTERRUPTED_CONTENT,
                        "outcome": "interrupted",
                    })
                })
                .collect();
            messages.push(message);
            hashes.push(hash);
            if closes.is_empty() {
                continue;
            }
            let index = messages.len();
            for c in &closes {
                repaired.push(RepairedCall {
                    tool_call_id: parts::field(c, "id").to_string(),
                    tool_name: parts::field(c, "name").to_string(),
                    message_index: index,
                });
            }
            let synthesized = json!({"role": "tool", "parts": closes});
            hashes.push(MessageHash::of(&synthesized));
            messages.push(Arc::new(synthesized));
        }
        self.messages = messages.into();
        self.hashes = hashes.into();
        repaired
    }
}
