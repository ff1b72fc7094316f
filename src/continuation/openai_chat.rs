//! OpenAI Chat Completions `messages`.
//!
//! Rules enforced: system instructions first as a `system` message; every `assistant.tool_calls[]`
//! id is answered by `tool` messages placed right after that assistant message (other messages
//! that arrive while calls are open are moved after the answers); unanswered calls and orphan
//! results are dropped; assistant `content` is null only with tool calls. Chat Completions has no
//! reasoning input, so thinking is dropped; tool messages carry text only, so structured results
//! are stringified; both are reported in warnings.

use serde_json::Value;

use super::parts::{self, Pairing, PartFields};
use super::{Fields, History, Out};
use crate::obj;

const FORMAT: &str = "OpenAI Chat Completions";

/// Renders `messages`.
pub fn render(history: &History) -> (Fields<'_>, Vec<String>) {
    let messages = &history.messages;
    let mut warnings = Vec::new();
    let (pairing, outcomes) = parts::tool_calls(history);
    pairing.warnings(messages, FORMAT, &mut warnings);

    let mut out: Vec<Out> = Vec::new();
    if let Some(text) = parts::instructions_text(history) {
        out.push(obj! {"role" => "system", "content" => text});
    }
    // Messages that arrive while the last assistant's calls are still unanswered.
    let mut deferred: Vec<Out> = Vec::new();
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
        let mut content: Vec<Out> = Vec::new();
        for (pi, part) in parts::parts(message).iter().enumerate() {
            let f = PartFields::of(part);
            match f.kind {
                "tool_call_response" => {
                    let outcome = outcomes.of(mi, pi);
                    if pairing.skip(mi, pi) {
                        continue;
                    }
                    let text = parts::tool_result_text(
                        &f,
                        outcome,
                        mi,
                        FORMAT,
                        "tool messages",
                        &mut warnings,
                    );
                    out.push(obj! {
                        "role" => "tool",
                        "tool_call_id" => f.id_str(),
                        "content" => text,
                    });
                    open = open.saturating_sub(1);
                }
                "text" => content.push(obj! {"type" => "text", "text" => parts::cow_out(f.text())}),
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
        let body = match content.as_mut_slice() {
            [only] if only.get("type") == Some(&Out::Str("text")) => only.take("text"),
            _ if role == "system" => Out::String(
                content
                    .iter()
                    .filter_map(|c| c.get("text").and_then(Out::as_str))
                    .collect::<Vec<_>>()
                    .join("\n\n"),
            ),
            _ => Out::Array(content),
        };
        let m = obj! {"role" => role, "content" => body};
        if open > 0 {
            deferred.push(m);
        } else {
            out.append(&mut deferred);
            out.push(m);
        }
    }
    out.append(&mut deferred);

    (vec![("messages", Out::Array(out))], warnings)
}

fn assistant<'a>(
    message: &'a Value,
    mi: usize,
    pairing: &Pairing,
    warnings: &mut Vec<String>,
) -> (Option<Out<'a>>, usize) {
    let mut texts: Vec<std::borrow::Cow<'a, str>> = Vec::new();
    let mut calls: Vec<Out> = Vec::new();
    for (pi, part) in parts::parts(message).iter().enumerate() {
        let f = PartFields::of(part);
        match f.kind {
            "text" => texts.push(f.text()),
            "tool_call" if !pairing.skip(mi, pi) => calls.push(obj! {
                "id" => f.id_str(),
                "type" => "function",
                "function" => obj! {
                    "name" => f.name_str().unwrap_or(""),
                    "arguments" => parts::arguments_text(part),
                },
            }),
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
    let content = match texts.len() {
        0 => Out::Null,
        1 => parts::cow_out(texts.swap_remove(0)),
        _ => Out::String(texts.join("\n\n")),
    };
    let mut m = obj! {"role" => "assistant", "content" => content};
    if !calls.is_empty() {
        m.set("tool_calls", calls);
    }
    (Some(m), n)
}

/// A user media part as a content part.
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
    if by_reference {
        if image {
            warnings.push(format!(
                "message {mi}: image given only by reference ({data}); the provider must be able to fetch it"
            ));
            return Some(obj! {"type" => "image_url", "image_url" => obj! {"url" => data}});
        }
        warnings.push(format!(
            "message {mi}: {mime} given only by reference cannot be sent to {FORMAT} and was dropped"
        ));
        return None;
    }
    if image {
        let url = format!("data:{mime};base64,{data}");
        return Some(obj! {"type" => "image_url", "image_url" => obj! {"url" => url}});
    }
    match mime {
        "audio/wav" | "audio/x-wav" | "audio/mpeg" | "audio/mp3" => {
            let format = if mime.ends_with("wav") { "wav" } else { "mp3" };
            Some(obj! {
                "type" => "input_audio",
                "input_audio" => obj! {"data" => data, "format" => format},
            })
        }
        "application/pdf" => Some(obj! {"type" => "file", "file" => obj! {
            "file_data" => format!("data:{mime};base64,{data}"),
            "filename" => "document.pdf",
        }}),
        _ => {
            warnings.push(format!(
                "message {mi}: {mime} content cannot be sent to {FORMAT} and was dropped"
            ));
            None
        }
    }
}
