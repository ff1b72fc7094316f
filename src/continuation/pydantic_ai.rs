//! Pydantic AI `ModelMessage` JSON, loadable with `ModelMessagesTypeAdapter`.
//!
//! Consecutive non-assistant OTel messages make one `ModelRequest` (Pydantic AI splits a request
//! into one message per role); each assistant message is one `ModelResponse`. Timestamps are always
//! emitted (an omitted one would default to "now" on load): a request's is the start of the first
//! model request that sent it, a response's the end of the model request that produced it.

use rustc_hash::FxHashMap;
use serde_json::Value;

use super::parts::{self, PartFields};
use super::{Fields, History, Out};
use crate::domain::MessageHash;
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
        if let Out::Object(fields) = message {
            fields.reserve(3);
        }
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
                "timestamp" => Out::Timestamp(at),
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
        let stamp = Out::Timestamp(at);
        let (parts_out, _, _) = request.get_or_insert_with(|| (Vec::new(), at, index));
        let fields: Vec<(PartFields, &Value)> =
            parts.iter().map(|p| (PartFields::of(p), p)).collect();
        // A user message with media was one multimodal user prompt (a list of text and media).
        let multimodal =
            role == "user" && fields.iter().any(|(f, _)| matches!(f.kind, "blob" | "uri"));
        let mut prompt_items: Vec<Out> = Vec::new();
        for (f, part) in fields {
            match f.kind {
                "text" if multimodal => prompt_items.push(text_of(&f)),
                "blob" | "uri" if multimodal => match media_content(part) {
                    Some(content) => prompt_items.push(content),
                    None => warnings.push(format!(
                        "message {index}: {} part without data or uri was dropped",
                        f.kind
                    )),
                },
                "text" if role == "system" => parts_out.push(obj! {
                    "part_kind" => "system-prompt",
                    "content" => text_of(&f),
                    "timestamp" => stamp.clone(),
                }),
                "text" => parts_out.push(obj! {
                    "part_kind" => "user-prompt",
                    "content" => text_of(&f),
                    "timestamp" => stamp.clone(),
                }),
                "tool_call_response" => {
                    let id = f.id_str();
                    let n = seen_returns.entry(id).or_insert(0);
                    let effect = effects.of_call(id, *n);
                    *n += 1;
                    let tool_name = f
                        .name_str()
                        .or(effect.map(|e| e.tool_name.as_str()))
                        .unwrap_or("");
                    // A synthesized result (repair=true) says its own outcome.
                    let (outcome, retry) = match (f.outcome, effect) {
                        (Some(outcome), _) => (outcome, None),
                        (None, Some(e)) if e.retry.is_some() => ("retried", e.retry.as_ref()),
                        (None, e) if e.is_some_and(|e| e.error.is_some()) => ("failed", None),
                        (None, _) => ("success", None),
                    };
                    let mut p = obj! {
                        "part_kind" => "tool-return",
                        "tool_name" => tool_name,
                        "content" => f.result(),
                        "tool_call_id" => id,
                        "timestamp" => stamp.clone(),
                        "outcome" => outcome,
                    };
                    if let Some(retry) = retry {
                        p.set("retry", retry);
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
                        "message {index}: {} part without data or uri was dropped",
                        f.kind
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
    let mut parts_out = Vec::with_capacity(parts.len());
    for part in parts {
        let f = PartFields::of(part);
        match f.kind {
            "text" => parts_out.push(obj! {"part_kind" => "text", "content" => text_of(&f)}),
            "tool_call" => parts_out.push(obj! {
                "part_kind" => "tool-call",
                "tool_name" => f.name.map_or(Out::Str(""), Out::Raw),
                "args" => f.arguments,
                "tool_call_id" => f.id.map_or(Out::Str(""), Out::Raw),
            }),
            "reasoning" | "thinking" => {
                parts_out.push(obj! {"part_kind" => "thinking", "content" => text_of(&f)})
            }
            other => warnings.push(format!(
                "message {index}: part type {other:?} has no Pydantic AI response equivalent and was dropped"
            )),
        }
    }
    let mut m = obj! {
        "kind" => "response",
        "parts" => parts_out,
        "timestamp" => Out::Timestamp(producer.map(|p| p.end_ns).unwrap_or(fallback_ns)),
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

fn text_of<'h>(part: &PartFields<'h>) -> Out<'h> {
    part.content.map_or(Out::Str(""), Out::Raw)
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

/// Pydantic AI keeps instructions as one string on each request: the texts of the parts joined
/// (borrowed when there is one, as there mostly is; null when there are none).
fn instructions_text(parts: Option<&Value>) -> Out<'_> {
    let mut texts = parts
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|p| p.get("content").and_then(Value::as_str));
    let Some(first) = texts.next() else {
        return Out::Null;
    };
    match texts.next() {
        None => Out::Str(first),
        Some(second) => {
            let mut joined = [first, second].join("\n\n");
            for text in texts {
                joined.push_str("\n\n");
                joined.push_str(text);
            }
            Out::String(joined)
        }
    }
}
