//! Anthropic Messages: top-level `system` + `messages`.
//!
//! Rules enforced: roles user/assistant only (system text goes to the top-level `system`);
//! consecutive same-role turns merge; the `tool_result` blocks of a user turn come first; every
//! `tool_use` is answered in the next user turn (unanswered calls and orphan results are dropped);
//! the history starts with a user turn. Thinking needs its byte-exact `signature`: without one it
//! is dropped, with a warning.

use serde_json::Value;

use super::parts::{self, PartFields};
use super::{Fields, History, Out};
use crate::obj;

const FORMAT: &str = "Anthropic Messages";

/// Renders `system` (omitted when there is none) and `messages`.
pub fn render(history: &History) -> (Fields<'_>, Vec<String>) {
    let messages = &history.messages;
    let mut warnings = Vec::new();
    let (pairing, outcomes) = parts::tool_calls(history);
    pairing.warnings(messages, FORMAT, &mut warnings);

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
                    .map(|p| parts::text(p).into_owned())
                    .filter(|t| !t.is_empty()),
            );
            continue;
        }
        let assistant = role == "assistant";
        let mut blocks: Vec<Out> = Vec::new();
        for (pi, part) in parts::parts(message).iter().enumerate() {
            let f = PartFields::of(part);
            match f.kind {
                "text" => {
                    let t = f.text();
                    if !t.is_empty() {
                        blocks.push(obj! {"type" => "text", "text" => parts::cow_out(t)});
                    }
                }
                "tool_call" if assistant => {
                    if !pairing.skip(mi, pi) {
                        blocks.push(obj! {
                            "type" => "tool_use",
                            "id" => f.id_str(),
                            "name" => f.name_str().unwrap_or(""),
                            "input" => parts::arguments_object(part),
                        });
                    }
                }
                "tool_call_response" if !assistant => {
                    let outcome = outcomes.of(mi, pi);
                    if pairing.skip(mi, pi) {
                        continue;
                    }
                    let (text, _) = parts::result_text(f.result());
                    let mut block = obj! {
                        "type" => "tool_result",
                        "tool_use_id" => f.id_str(),
                    };
                    // Text blocks must not be empty: an empty result has no content.
                    if !text.is_empty() {
                        let text = obj! {"type" => "text", "text" => parts::cow_out(text)};
                        block.set("content", vec![text]);
                    }
                    block.set("is_error", outcome.is_error());
                    blocks.push(block);
                }
                "thinking" | "reasoning" if assistant => {
                    let signature = parts::field(part, "signature");
                    if signature.is_empty() {
                        warnings.push(format!(
                            "message {mi}: thinking without a signature was dropped ({FORMAT} needs the byte-exact signature)"
                        ));
                    } else {
                        blocks.push(obj! {
                            "type" => "thinking",
                            "thinking" => parts::cow_out(f.text()),
                            "signature" => signature,
                        });
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
        obj! {"type" => "text", "text" => "..."},
        "a user turn \"...\"",
        FORMAT,
        &mut warnings,
    );

    let out: Vec<Out> = turns
        .into_iter()
        .map(|(role, blocks)| {
            // tool_result blocks first, others in their order.
            let (mut results, rest): (Vec<Out>, Vec<Out>) = blocks
                .into_iter()
                .partition(|b| b.get("type") == Some(&Out::Str("tool_result")));
            results.extend(rest);
            obj! {"role" => role, "content" => results}
        })
        .collect();

    let mut fields = Vec::new();
    if !system.is_empty() {
        fields.push(("system", Out::String(system.join("\n\n"))));
    }
    fields.push(("messages", Out::Array(out)));
    (fields, warnings)
}

/// A user media part as an image or document block.
fn media<'a>(part: &'a Value, mi: usize, warnings: &mut Vec<String>) -> Option<Out<'a>> {
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
        return Some(obj! {"type" => block, "source" => obj! {"type" => "url", "url" => data}});
    }
    Some(obj! {
        "type" => block,
        "source" => obj! {"type" => "base64", "media_type" => mime, "data" => data},
    })
}
