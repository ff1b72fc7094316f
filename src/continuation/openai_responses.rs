//! OpenAI Responses `instructions` + `input` items.
//!
//! Rules enforced: each `function_call{call_id,name,arguments}` (arguments as JSON text) keeps a
//! `function_call_output{call_id,output}`; unanswered calls and orphan outputs are dropped.
//! Reasoning items can only travel with the provider's own id and encrypted content, which OTel
//! does not carry, so thinking is dropped with a warning; outputs are text, so structured results
//! are stringified with a warning.

use serde_json::{json, Map, Value};

use super::parts::{self, Outcomes, Pairing};
use super::History;

const FORMAT: &str = "OpenAI Responses";

/// Renders `instructions` and `input`.
pub fn render(history: &History) -> (Map<String, Value>, Vec<String>) {
    let messages = &history.messages;
    let mut warnings = Vec::new();
    let pairing = Pairing::of(messages);
    pairing.warnings(messages, FORMAT, &mut warnings);
    let mut outcomes = Outcomes::new(history);
    let mut input: Vec<Value> = Vec::new();

    for (mi, message) in messages.iter().enumerate() {
        let role = parts::role(message);
        let mut content: Vec<Value> = Vec::new();
        let flush = |content: &mut Vec<Value>, input: &mut Vec<Value>| {
            if content.is_empty() {
                return;
            }
            let items = std::mem::take(content);
            if role == "assistant" {
                let text: Vec<&str> = items.iter().filter_map(|c| c["text"].as_str()).collect();
                input.push(json!({"role": "assistant", "content": text.join("\n\n")}));
            } else {
                let r = if role == "system" { "system" } else { "user" };
                let content = match items.as_slice() {
                    [only] if only["type"] == "input_text" => only["text"].clone(),
                    _ => Value::Array(items),
                };
                input.push(json!({"role": r, "content": content}));
            }
        };
        for (pi, part) in parts::parts(message).iter().enumerate() {
            match parts::kind(part) {
                "text" if role == "assistant" => {
                    content.push(json!({"type": "output_text", "text": parts::text(part)}))
                }
                "text" => content.push(json!({"type": "input_text", "text": parts::text(part)})),
                "tool_call" => {
                    if pairing.skip(mi, pi) {
                        continue;
                    }
                    flush(&mut content, &mut input);
                    input.push(json!({
                        "type": "function_call",
                        "call_id": parts::field(part, "id"),
                        "name": parts::field(part, "name"),
                        "arguments": parts::arguments_text(part),
                    }));
                }
                "tool_call_response" => {
                    let outcome = outcomes.next(part);
                    if pairing.skip(mi, pi) {
                        continue;
                    }
                    flush(&mut content, &mut input);
                    let text = parts::tool_result_text(
                        part,
                        outcome,
                        mi,
                        FORMAT,
                        "function_call_output items",
                        &mut warnings,
                    );
                    input.push(json!({
                        "type": "function_call_output",
                        "call_id": parts::field(part, "id"),
                        "output": text,
                    }));
                }
                "thinking" | "reasoning" => warnings.push(format!(
                    "message {mi}: thinking was dropped ({FORMAT} reasoning items need the provider's id and encrypted content)"
                )),
                "blob" | "uri" if role != "assistant" => {
                    if let Some(c) = media(part, mi, &mut warnings) {
                        content.push(c);
                    }
                }
                other => warnings.push(format!(
                    "message {mi}: {role} part type {other:?} has no {FORMAT} equivalent and was dropped"
                )),
            }
        }
        flush(&mut content, &mut input);
    }

    let mut fields = Map::new();
    fields.insert(
        "instructions".into(),
        parts::instructions_text(history).map_or(Value::Null, Value::String),
    );
    fields.insert("input".into(), Value::Array(input));
    (fields, warnings)
}

/// A user media part as an input content part.
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
    match (image, by_reference) {
        (true, true) => {
            warnings.push(format!(
                "message {mi}: image given only by reference ({data}); the provider must be able to fetch it"
            ));
            Some(json!({"type": "input_image", "image_url": data, "detail": "auto"}))
        }
        (true, false) => Some(json!({
            "type": "input_image",
            "image_url": format!("data:{mime};base64,{data}"),
            "detail": "auto",
        })),
        (false, true) => {
            warnings.push(format!(
                "message {mi}: file given only by reference ({data}); the provider must be able to fetch it"
            ));
            Some(json!({"type": "input_file", "file_url": data}))
        }
        (false, false) => Some(json!({
            "type": "input_file",
            "file_data": format!("data:{mime};base64,{data}"),
            "filename": "file",
        })),
    }
}
