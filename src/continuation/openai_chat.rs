//! OpenAI Chat Completions `messages`.
//!
//! Rules enforced: system instructions first as a `system` message; every `assistant.tool_calls[]`
//! id is answered by `tool` messages placed right after that assistant message (other messages
//! that arrive while calls are open are moved after the answers); unanswered calls and orphan
//! results are dropped; assistant `content` is null only with tool calls. Chat Completions has no
//! reasoning input, so thinking is dropped; tool messages carry text only, so structured results
//! are stringified; both are reported in warnings.

use serde_json::{json, Map, Value};

use super::parts::{self, Outcomes, Pairing};
use super::History;

const FORMAT: &str = "OpenAI Chat Completions";

/// Renders `messages`.
pub fn render(history: &History) -> (Map<String, Value>, Vec<String>) {
    let messages = &history.messages;
    let mut warnings = Vec::new();
    let pairing = Pairing::of(messages);
    pairing.warnings(messages, FORMAT, &mut warnings);
    let mut outcomes = Outcomes::new(history);

    let mut out: Vec<Value> = Vec::new();
    if let Some(text) = parts::instructions_text(history) {
        out.push(json!({"role": "system", "content": text}));
    }
    // Messages that arrive while the last assistant's calls are still unanswered.
    let mut deferred: Vec<Value> = Vec::new();
    let mut open = 0usize;

    for (mi, message) in messages.iter().enumerate() {
        let role = parts::role(message);
        if role == "assistant" {
            out.append(&mut deferred);
            let (rendered, calls) = assistant(message, mi, &pairing, &mut warnings);
            if let Some(m) = rendered {
                out.push(m);
            }
            open = calls;
            continue;
        }
        let mut content: Vec<Value> = Vec::new();
        for (pi, part) in parts::parts(message).iter().enumerate() {
            match parts::kind(part) {
                "tool_call_response" => {
                    let outcome = outcomes.next(part);
                    if pairing.skip(mi, pi) {
                        continue;
                    }
                    let text = parts::tool_result_text(
                        part,
                        outcome,
                        mi,
                        FORMAT,
                        "tool messages",
                        &mut warnings,
                    );
                    out.push(json!({
                        "role": "tool",
                        "tool_call_id": parts::field(part, "id"),
                        "content": text,
                    }));
                    open = open.saturating_sub(1);
                }
                "text" => content.push(json!({"type": "text", "text": parts::text(part)})),
                "blob" | "uri" => {
                    if let Some(c) = media(part, mi, &mut warnings) {
                        content.push(c);
                    }
                }
                other => warnings.push(format!(
                    "message {mi}: part type {other:?} has no {FORMAT} equivalent and was dropped"
                )),
            }
        }
        if content.is_empty() {
            continue;
        }
        let role = if role == "system" { "system" } else { "user" };
        let body = match content.as_slice() {
            [only] if only["type"] == "text" => only["text"].clone(),
            _ if role == "system" => Value::String(
                content
                    .iter()
                    .filter_map(|c| c["text"].as_str())
                    .collect::<Vec<_>>()
                    .join("\n\n"),
            ),
            _ => Value::Array(content),
        };
        let m = json!({"role": role, "content": body});
        if open > 0 {
            deferred.push(m);
        } else {
            out.append(&mut deferred);
            out.push(m);
        }
    }
    out.append(&mut deferred);

    let mut fields = Map::new();
    fields.insert("messages".into(), Value::Array(out));
    (fields, warnings)
}

/// An assistant message and the number of tool calls it keeps.
fn assistant(
    message: &Value,
    mi: usize,
    pairing: &Pairing,
    warnings: &mut Vec<String>,
) -> (Option<Value>, usize) {
    let mut texts: Vec<String> = Vec::new();
    let mut calls: Vec<Value> = Vec::new();
    for (pi, part) in parts::parts(message).iter().enumerate() {
        match parts::kind(part) {
            "text" => texts.push(parts::text(part)),
            "tool_call" if !pairing.skip(mi, pi) => calls.push(json!({
                "id": parts::field(part, "id"),
                "type": "function",
                "function": {
                    "name": parts::field(part, "name"),
                    "arguments": parts::arguments_text(part),
                },
            })),
            "tool_call" => {}
            "thinking" | "reasoning" => warnings.push(format!(
                "message {mi}: thinking was dropped ({FORMAT} takes no reasoning input)"
            )),
            other => warnings.push(format!(
                "message {mi}: assistant part type {other:?} has no {FORMAT} equivalent and was dropped"
            )),
        }
    }
    if texts.is_empty() && calls.is_empty() {
        warnings.push(format!(
            "message {mi}: assistant message has nothing {FORMAT} can carry and was dropped"
        ));
        return (None, 0);
    }
    let n = calls.len();
    let mut m = Map::new();
    m.insert("role".into(), json!("assistant"));
    m.insert(
        "content".into(),
        if texts.is_empty() {
            Value::Null
        } else {
            Value::String(texts.join("\n\n"))
        },
    );
    if !calls.is_empty() {
        m.insert("tool_calls".into(), Value::Array(calls));
    }
    (Some(Value::Object(m)), n)
}

/// A user media part as a content part.
fn media(part: &Value, mi: usize, warnings: &mut Vec<String>) -> Option<Value> {
    let (mime, data) = parts::media(part);
    if data.is_empty() {
        warnings.push(format!(
            "message {mi}: media part without data or uri was dropped"
        ));
        return None;
    }
    let by_reference = parts::kind(part) == "uri";
    let image = mime.starts_with("image/") || parts::field(part, "modality") == "image";
    if by_reference {
        if image {
            warnings.push(format!(
                "message {mi}: image given only by reference ({data}); the provider must be able to fetch it"
            ));
            return Some(json!({"type": "image_url", "image_url": {"url": data}}));
        }
        warnings.push(format!(
            "message {mi}: {mime} given only by reference cannot be sent to {FORMAT} and was dropped"
        ));
        return None;
    }
    if image {
        return Some(
            json!({"type": "image_url", "image_url": {"url": format!("data:{mime};base64,{data}")}}),
        );
    }
    match mime {
        "audio/wav" | "audio/x-wav" | "audio/mpeg" | "audio/mp3" => {
            let format = if mime.ends_with("wav") { "wav" } else { "mp3" };
            Some(json!({"type": "input_audio", "input_audio": {"data": data, "format": format}}))
        }
        "application/pdf" => Some(json!({"type": "file", "file": {
            "file_data": format!("data:{mime};base64,{data}"),
            "filename": "document.pdf",
        }})),
        _ => {
            warnings.push(format!(
                "message {mi}: {mime} content cannot be sent to {FORMAT} and was dropped"
            ));
            None
        }
    }
}
