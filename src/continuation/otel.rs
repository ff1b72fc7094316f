//! The canonical format: OTel GenAI messages plus system instructions.

use super::{Fields, History, Out};

/// `messages` and `system_instructions`, as stored.
pub fn render(history: &History) -> (Fields<'_>, Vec<String>) {
    let messages = history.messages.iter().map(|m| Out::Raw(m)).collect();
    let instructions = match &history.system_instructions {
        Some(v) => Out::Raw(v),
        None => Out::Array(Vec::new()),
    };
    (
        vec![
            ("messages", Out::Array(messages)),
            ("system_instructions", instructions),
        ],
        Vec::new(),
    )
}
