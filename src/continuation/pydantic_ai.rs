//! Pydantic AI `ModelMessage` JSON, loadable with `ModelMessagesTypeAdapter`.
//!
//! Consecutive non-assistant OTel messages make one `ModelRequest` (Pydantic AI splits a request
//! into one message per role); each assistant message is one `ModelResponse`. Timestamps are always
//! emitted (an omitted one would default to "now" on load): a request's is the start of the first
//! model request that sent it, a response's the end of the model request that produced it.

use rustc_hash::FxHashMap;
use serde_json::Value;

use super::parts;
use super::{Fields, History, Out};
use crate::domain::{format_timestamp, MessageHash};
use crate::obj;

/// What every message of the run carries besides its parts.
struct Common<'h> {
    history: &'h History,
    conversation: Option<&'h str>,
}

impl<'h> Common<'h> {
    /// Adds `instructions` (requests only: those in force when the request was sent), `run_id`
    /// (of the run the message at `index` was made in) and `conversation_id` to a message.
    fn stamp(&self, message: &mut Out<'h>, index: usize, request: bool) {
        if request {
            let instructions = instructions_text(self.history.instructions_at(index));
            message.set("instructions", instructions);
        }
        if let Some(id) = self.history.run_alias_at(index) {
            message.set("run_id", id);
        }
        if let Some(c) = self.conversation {
            message.set("conversation_id", c);
        }
    }
}

/// Renders `messages` as a list of `ModelMessage`.
pub fn render<'h>(history: &'h History) -> (Fields<'h>, Vec<String>) {
    let mut warnings = Vec::new();
    let common = Common {
        history,
        conversation: history.run.conversation_id.as_deref(),
    };
    let fallback_ns = history.models().last().map(|m| m.end_ns).unwrap_or(0);
    let effects = &history.effects;
    let mut seen_returns: FxHashMap<&str, usize> = FxHashMap::default();

    let mut out: Vec<Out> = Vec::new();
    // A request's parts, its time and the index of its first message.
    let mut request: Option<(Vec<Out>, u64, usize)> = None;
    let flush = |request: &mut Option<(Vec<Out<'h>>, u64, usize)>, out: &mut Vec<Out<'h>>| {
        if let Some((parts, at, first)) = request.take() {
            let mut m = obj! {
                "kind" => "request",
                "parts" => parts,
                "timestamp" => format_timestamp(at),
            };
            common.stamp(&mut m, first, true);
            out.push(m);
        }
    };

    for (index, (message, hash)) in history
        .messages
        .iter()
        .zip(history.hashes.iter())
        .enumerate()
    {
        let role = message
            .get("role")
            .and_then(Value::as_str)
            .unwrap_or("user");
        let parts = parts::parts(message);
        if role == "assistant" {
            flush(&mut request, &mut out);
            let mut m = response(history, hash, parts, index, &mut warnings, fallback_ns);
            common.stamp(&mut m, index, false);
            out.push(m);
            continue;
        }
        let at = history.first_sent(hash).unwrap_or(fallback_ns);
        let stamp = format_timestamp(at);
        let (parts_out, _, _) = request.get_or_insert_with(|| (Vec::new(), at, index));
        // A user message with media was one multimodal user prompt (a list of text and media).
        let multimodal = role == "user"
            && parts
                .iter()
                .any(|p| matches!(p.get("type").and_then(Value::as_str), Some("blob" | "uri")));
        let mut prompt_items: Vec<Out> = Vec::new();
        for part in parts {
            let kind = part.get("type").and_then(Value::as_str).unwrap_or("");
            match kind {
                "text" if multimodal => prompt_items.push(text_of(part)),
                "blob" | "uri" if multimodal => match media_content(part) {
                    Some(content) => prompt_items.push(content),
                    None => warnings.push(format!(
                        "message {index}: {kind} part without data or uri was dropped"
                    )),
                },
                "text" if role == "system" => parts_out.push(obj! {
                    "part_kind" => "system-prompt",
                    "content" => text_of(part),
                    "timestamp" => stamp.clone(),
                }),
                "text" => parts_out.push(obj! {
                    "part_kind" => "user-prompt",
                    "content" => text_of(part),
                    "timestamp" => stamp.clone(),
                }),
                "tool_call_response" => {
                    let id = part.get("id").and_then(Value::as_str).unwrap_or("");
                    let n = seen_returns.entry(id).or_insert(0);
                    let effect = effects.of_call(id, *n);
                    *n += 1;
                    let tool_name = part
                        .get("name")
                        .and_then(Value::as_str)
                        .or(effect.map(|e| e.tool_name.as_str()))
                        .unwrap_or("");
                    let mut p = obj! {
                        "part_kind" => "tool-return",
                        "tool_name" => tool_name,
                        "content" => parts::tool_result(part),
                        "tool_call_id" => id,
                        "timestamp" => stamp.clone(),
                    };
                    // A synthesized result (repair=true) says its own outcome.
                    if let Some(outcome) = part.get("outcome").and_then(Value::as_str) {
                        p.set("outcome", outcome);
                        parts_out.push(p);
                        continue;
                    }
                    match effect.and_then(|e| e.retry.as_ref()) {
                        Some(retry) => {
                            p.set("outcome", "retried");
                            p.set("retry", retry);
                        }
                        None => {
                            let failed = effect.is_some_and(|e| e.error.is_some());
                            p.set("outcome", if failed { "failed" } else { "success" });
                        }
                    }
                    parts_out.push(p);
                }
                "blob" | "uri" => match media_content(part) {
                    Some(content) => parts_out.push(obj! {
                        "part_kind" => "user-prompt",
                        "content" => vec![content],
                        "timestamp" => stamp.clone(),
                    }),
                    None => warnings.push(format!(
                        "message {index}: {kind} part without data or uri was dropped"
                    )),
                },
                other => warnings.push(format!(
                    "message {index}: part type {other:?} has no Pydantic AI request equivalent and was dropped"
                )),
            }
        }
        if !prompt_items.is_empty() {
            parts_out.push(obj! {
                "part_kind" => "user-prompt",
                "content" => prompt_items,
                "timestamp" => stamp,
            });
        }
    }
    flush(&mut request, &mut out);

    (vec![("messages", Out::Array(out))], warnings)
}

/// A `ModelResponse` for an assistant message: model name, usage and time from the model request
/// that produced it.
fn response<'h>(
    history: &'h History,
    hash: &MessageHash,
    parts: &'h [Value],
    index: usize,
    warnings: &mut Vec<String>,
    fallback_ns: u64,
) -> Out<'h> {
    let producer = history.producer_of(hash);
    let mut parts_out = Vec::new();
    for part in parts {
        match part.get("type").and_then(Value::as_str).unwrap_or("") {
            "text" => parts_out.push(obj! {"part_kind" => "text", "content" => text_of(part)}),
            "tool_call" => parts_out.push(obj! {
                "part_kind" => "tool-call",
                "tool_name" => part.get("name").map_or(Out::Str(""), Out::Raw),
                "args" => part.get("arguments"),
                "tool_call_id" => part.get("id").map_or(Out::Str(""), Out::Raw),
            }),
            "reasoning" | "thinking" => {
                parts_out.push(obj! {"part_kind" => "thinking", "content" => text_of(part)})
            }
            other => warnings.push(format!(
                "message {index}: part type {other:?} has no Pydantic AI response equivalent and was dropped"
            )),
        }
    }
    let mut m = obj! {
        "kind" => "response",
        "parts" => parts_out,
        "timestamp" => format_timestamp(producer.map(|p| p.end_ns).unwrap_or(fallback_ns)),
    };
    if let Some(p) = producer {
        if let Some(model) = &p.model {
            m.set("model_name", model.as_str());
        }
        m.set(
            "usage",
            obj! {
                "input_tokens" => p.input_tokens.unwrap_or(0),
                "output_tokens" => p.output_tokens.unwrap_or(0),
            },
        );
    }
    m
}

fn text_of(part: &Value) -> Out<'_> {
    part.get("content").map_or(Out::Str(""), Out::Raw)
}

/// A `blob` or `uri` part as Pydantic AI user content (`BinaryContent` / `ImageUrl`...).
fn media_content(part: &Value) -> Option<Out<'_>> {
    let mime = part.get("mime_type").and_then(Value::as_str);
    let modality = part.get("modality").and_then(Value::as_str).unwrap_or("");
    if let Some(data) = part.get("content").and_then(Value::as_str) {
        return Some(obj! {
            "kind" => "binary",
            "data" => data,
            "media_type" => mime.unwrap_or("application/octet-stream"),
        });
    }
    let uri = part.get("uri").and_then(Value::as_str)?;
    let kind = match modality {
        "image" => "image-url",
        "audio" => "audio-url",
        "video" => "video-url",
        _ => "document-url",
    };
    Some(obj! {"kind" => kind, "url" => uri})
}

/// Pydantic AI keeps instructions as one string on each request.
fn instructions_text(parts: Option<&Value>) -> Option<String> {
    let texts: Vec<&str> = parts?
        .as_array()?
        .iter()
        .filter_map(|p| p.get("content").and_then(Value::as_str))
        .collect();
    (!texts.is_empty()).then(|| texts.join("\n\n"))
}
