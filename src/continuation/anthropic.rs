//! Anthropic Messages: top-level `system` + `messages`.
//!
//! Rules enforced: roles user/assistant only (system text goes to the top-level `system`);
//! consecutive same-role turns merge; the `tool_result` blocks of a user turn come first; every
//! `tool_use` is answered in the next user turn (unanswered calls and orphan results are dropped);
//! the history starts with a user turn. Thinking needs its byte-exact `signature`: without one it
//! is dropped, with a warning.

use serde_json::{json, Map, Value};

use super::parts::{self, Outcomes, Pairing};
use super::History;

const FORMAT: &str = "Anthropic Messages";

/// Renders `system` (omitted when there is none) and `messages`.
pub fn render(history: &History) -> (Map<String, Value>, Vec<String>) {
    let messages = &history.messages;
    let mut warnings = Vec::new();
    let pairing = Pairing::of(messages);
    pairing.warnings(messages, FORMAT, &mut warnings);
    let mut outcomes = Outcomes::new(history);

    let mut system: Vec<String> = parts::instructions_text(history).into_iter().collect();
    let mut turns: parts::Turns = Vec::new();

    for (mi, message) in messages.iter().enumerate() {
        let role = parts::role(message);
        if role == "system" {
            if !turns.is_empty() {
                warnings.push(format!(
                    "message {mi}: a system message inside the conversation was moved to the top-level system"
                ));
            }
            system.extend(
                parts::parts(message)
                    .iter()
                    .map(parts::text)
                    .filter(|t| !t.is_empty()),
            );
            continue;
        }
        let assistant = role == "assistant";
        let mut blocks: Vec<Value> = Vec::new();
        for (pi, part) in parts::parts(message).iter().enumerate() {
            match parts::kind(part) {
                "text" => {
                    let t = parts::text(part);
                    if !t.is_empty() {
                        blocks.push(json!({"type": "text", "text": t}));
                    }
                }
                "tool_call" if assistant => {
                    if !pairing.skip(mi, pi) {
                        blocks.push(json!({
                            "type": "tool_use",
                            "id": parts::field(part, "id"),
                            "name": parts::field(part, "name"),
                            "input": parts::arguments_object(part),
                        }));
                    }
                }
                "tool_call_response" if !assistant => {
                    let outcome = outcomes.next(part);
                    if pairing.skip(mi, pi) {
                        continue;
                    }
                    let (text, _) = parts::result_text(&parts::tool_result(part));
                    let mut block = Map::new();
                    block.insert("type".into(), json!("tool_result"));
                    block.insert("tool_use_id".into(), json!(parts::field(part, "id")));
                    // Text blocks must not be empty: an empty result has no content.
                    if !text.is_empty() {
                        block.insert("content".into(), json!([{"type": "text", "text": text}]));
                    }
                    block.insert("is_error".into(), json!(outcome.is_error()));
                    blocks.push(Value::Object(block));
                }
                "thinking" | "reasoning" if assistant => {
                    let signature = parts::field(part, "signature");
                    if signature.is_empty() {
                        warnings.push(format!(
                            "message {mi}: thinking without a signature was dropped ({FORMAT} needs the byte-exact signature)"
                        ));
                    } else {
                        blocks.push(json!({
                            "type": "thinking",
                            "thinking": parts::text(part),
                            "signature": signature,
                        }));
                    }
                }
                "blob" | "uri" if !assistant => {
                    if let Some(b) = media(part, mi, &mut warnings) {
                        blocks.push(b);
                    }
                }
                other => warnings.push(format!(
                    "message {mi}: {role} part type {other:?} has no {FORMAT} equivalent and was dropped"
                )),
            }
        }
        if blocks.is_empty() {
            continue;
        }
        let role = if assistant { "assistant" } else { "user" };
        parts::push_turn(&mut turns, role, blocks);
    }
    parts::start_with_user(
        &mut turns,
        "assistant",
        json!({"type": "text", "text": "..."}),
        "a user turn \"...\"",
        FORMAT,
        &mut warnings,
    );

    let out: Vec<Value> = turns
        .into_iter()
        .map(|(role, blocks)| {
            // tool_result blocks first, others in their order.
            let (mut results, rest): (Vec<Value>, Vec<Value>) =
                blocks.into_iter().partition(|b| b["type"] == "tool_result");
            results.extend(rest);
            json!({"role": role, "content": results})
        })
        .collect();

    let mut fields = Map::new();
    if !system.is_empty() {
        fields.insert("system".into(), Value::String(system.join("\n\n")));
    }
    fields.insert("messages".into(), Value::Array(out));
    (fields, warnings)
}

/// A user media part as an image or document block.
fn media(part: &Value, mi: usize, warnings: &mut Vec<String>) -> Option<Value> {
    let (mime, data) = parts::media(part);
    if data.is_empty() {
        warnings.push(format!(
            "message {mi}: media part without data or uri was dropped"
        ));
        return None;
    }
    let by_reference = parts::kind(part) == "uri";
    let block = if mime.starts_with("image/") || parts::field(part, "modality") == "image" {
        "image"
    } else if mime == "application/pdf" {
        "document"
    } else {
        warnings.push(format!(
            "message {mi}: {mime} content cannot be sent to {FORMAT} and was dropped"
        ));
        return None;
    };
    if by_reference {
        warnings.push(format!(
            "message {mi}: {block} given only by reference ({data}); the provider must be able to fetch it"
        ));
        return Some(json!({"type": block, "source": {"type": "url", "url": data}}));
    }
    Some(json!({"type": block, "source": {"type": "base64", "media_type": mime, "data": data}}))
}
