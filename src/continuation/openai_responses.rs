//! OpenAI Responses `instructions` + `input` items.
//!
//! Rules enforced: each `function_call{call_id,name,arguments}` (arguments as JSON text) keeps a
//! `function_call_output{call_id,output}`; unanswered calls and orphan outputs are dropped.
//! Reasoning items can only travel with the provider's own id and encrypted content, which OTel
//! does not carry, so thinking is dropped with a warning; outputs are text, so structured results
//! are stringified with a warning.

use serde_json::Value;

use super::parts::{self, PartFields};
use super::{Fields, History, Out};
use crate::obj;

const FORMAT: &str = "OpenAI Responses";

/// Renders `instructions` and `input`.
pub fn render<'h>(history: &'h History) -> (Fields<'h>, Vec<String>) {
    let messages = &history.messages;
    let mut warnings = Vec::new();
    let (pairing, outcomes) = parts::tool_calls(history);
    pairing.warnings(messages, FORMAT, &mut warnings);
    let mut input: Vec<Out> = Vec::new();

    for (mi, message) in messages.iter().enumerate() {
        let role = parts::role(message);
        let mut content: Vec<Out> = Vec::new();
        let flush = |content: &mut Vec<Out<'h>>, input: &mut Vec<Out<'h>>| {
            if content.is_empty() {
                return;
            }
            let mut items = std::mem::take(content);
            if role == "assistant" {
                let text = match items.as_mut_slice() {
                    [only] => only.take("text"),
                    _ => Out::String(
                        items
                            .iter()
                            .filter_map(|c| c.get("text").and_then(Out::as_str))
                            .collect::<Vec<_>>()
                            .join("\n\n"),
                    ),
                };
                input.push(obj! {"role" => "assistant", "content" => text});
            } else {
                let r = if role == "system" { "system" } else { "user" };
                let content = match items.as_mut_slice() {
                    [only] if only.get("type") == Some(&Out::Str("input_text")) => {
                        only.take("text")
                    }
                    _ => Out::Array(items),
                };
                input.push(obj! {"role" => r, "content" => content});
            }
        };
        for (pi, part) in parts::parts(message).iter().enumerate() {
            let f = PartFields::of(part);
            match f.kind {
                "text" if role == "assistant" => {
                    content.push(obj! {"type" => "output_text", "text" => parts::cow_out(f.text())})
                }
                "text" => {
                    content.push(obj! {"type" => "input_text", "text" => parts::cow_out(f.text())})
                }
                "tool_call" => {
                    if pairing.skip(mi, pi) {
                        continue;
                    }
                    flush(&mut content, &mut input);
                    input.push(obj! {
                        "type" => "function_call",
                        "call_id" => f.id_str(),
                        "name" => f.name_str().unwrap_or(""),
                        "arguments" => parts::arguments_text(part),
                    });
                }
                "tool_call_response" => {
                    let outcome = outcomes.of(mi, pi);
                    if pairing.skip(mi, pi) {
                        continue;
                    }
                    flush(&mut content, &mut input);
                    let text = parts::tool_result_text(
                        &f,
                        outcome,
                        mi,
                        FORMAT,
                        "function_call_output items",
                        &mut warnings,
                    );
                    input.push(obj! {
                        "type" => "function_call_output",
                        "call_id" => f.id_str(),
                        "output" => text,
                    });
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

    (
        vec![
            ("instructions", parts::instructions_text(history).into()),
            ("input", Out::Array(input)),
        ],
        warnings,
    )
}

/// A user media part as an input content part.
fn media<'a>(part: &'a Value, mi: usize, warnings: &mut Vec<String>) -> Option<Out<'a>> {
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
            Some(obj! {"type" => "input_image", "image_url" => data, "detail" => "auto"})
        }
        (true, false) => Some(obj! {
            "type" => "input_image",
            "image_url" => format!("data:{mime};base64,{data}"),
            "detail" => "auto",
        }),
        (false, true) => {
            warnings.push(format!(
                "message {mi}: file given only by reference ({data}); the provider must be able to fetch it"
            ));
            Some(obj! {"type" => "input_file", "file_url" => data})
        }
        (false, false) => Some(obj! {
            "type" => "input_file",
            "file_data" => format!("data:{mime};base64,{data}"),
            "filename" => "file",
        }),
    }
}
