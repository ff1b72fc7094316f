//! The canonical format: OTel GenAI messages plus system instructions.

use super::{json_writer, writer};
use super::{Fields, History, Out};

/// `messages` (written in place as stored: [`super::writer`]) and `system_instructions`.
pub fn render(history: &History, mut buf: Vec<u8>) -> (Fields<'_>, Vec<String>) {
    writer::room(&mut buf, history.messages.len(), 320);
    buf.push(b'[');
    for (i, message) in history.messages.iter().enumerate() {
        if i > 0 {
            buf.push(b',');
        }
        json_writer::write_value(&mut buf, message);
    }
    buf.push(b']');
    let instructions = match &history.system_instructions {
        Some(v) => Out::Raw(v),
        None => Out::Array(Vec::new()),
    };
    (
        vec![
            ("messages", Out::Written(buf)),
            ("system_instructions", instructions),
        ],
        Vec::new(),
    )
}
