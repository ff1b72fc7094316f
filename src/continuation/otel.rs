//! The canonical format: OTel GenAI messages plus system instructions.

use serde_json::{Map, Value};

use super::History;

/// `messages` and `system_instructions`, as stored.
pub fn render(history: &History) -> (Map<String, Value>, Vec<String>) {
    let mut out = Map::new();
    out.insert("messages".into(), Value::Array(history.messages.to_vec()));
    out.insert(
        "system_instructions".into(),
        history
            .system_instructions
            .clone()
            .unwrap_or(Value::Array(Vec::new())),
    );
    (out, Vec::new())
}
