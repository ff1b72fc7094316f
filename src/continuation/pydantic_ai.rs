//! Pydantic AI `ModelMessage` JSON, loadable with `ModelMessagesTypeAdapter`.
//!
//! Consecutive non-assistant OTel messages make one `ModelRequest` (Pydantic AI splits a request
//! into one message per role); each assistant message is one `ModelResponse`. Timestamps are always
//! emitted (an omitted one would default to "now" on load): a request's is the start of the first
//! model request that sent it, a response's the end of the model request that produced it.

use std::collections::HashMap;

use serde_json::Value;

use super::json_writer;
use super::parts::{self, PartFields};
use super::writer::{self, Commas, Key, Obj};
use super::{Fields, History, Out};
use crate::domain::MessageHash;
use crate::{key, obj};

/// Renders `messages` as a list of `ModelMessage`, written in place ([`super::writer`]): each
/// message goes to the buffer as it is read, with no tree of the whole answer in between.
pub fn render(history: &History, mut buf: Vec<u8>) -> (Fields<'_>, Vec<String>) {
    let mut warnings = Vec::new();
    writer::room(&mut buf, history.messages.len(), 512);
    buf.push(b'[');
    let mut writer = Writer {
        history,
        conversation: history.run.conversation_id.as_deref(),
        fallback_ns: history.models().last().map(|m| m.end_ns).unwrap_or(0),
        seen_returns: HashMap::with_capacity(history.messages.len()),
        buf: &mut buf,
        messages: Commas::default(),
        request: None,
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
            writer.close_request();
            writer.response(hash, parts, index, &mut warnings);
        } else {
            writer.request_message(role, hash, parts, index, &mut warnings);
        }
    }
    writer.close_request();
    buf.push(b']');
    (vec![("messages", Out::Written(buf))], warnings)
}

/// The request being written: its parts array is open.
struct OpenRequest {
    /// Its time: when its first message was first sent.
    at: u64,
    /// The index of its first message.
    first: usize,
    /// The commas between its parts.
    parts: Commas,
}

/// Writes the `ModelMessage` list: consecutive non-assistant messages into one open request,
/// each assistant message as a response.
struct Writer<'h, 'b> {
    history: &'h History,
    conversation: Option<&'h str>,
    /// The time of a message no model request explains: the end of the last model request.
    fallback_ns: u64,
    /// Tool returns seen so far per call id (the n-th return matches the n-th ledger entry).
    seen_returns: HashMap<&'h str, usize>,
    buf: &'b mut Vec<u8>,
    messages: Commas,
    request: Option<OpenRequest>,
}

impl<'h> Writer<'h, '_> {
    /// Ends the open request, if any: its time, the instructions in force when it was sent,
    /// and what every message carries.
    fn close_request(&mut self) {
        let Some(request) = self.request.take() else {
            return;
        };
        self.buf.extend_from_slice(b"],");
        self.buf.extend_from_slice(key!("timestamp").as_bytes());
        json_writer::write_timestamp(self.buf, request.at);
        self.buf.push(b',');
        self.buf.extend_from_slice(key!("instructions").as_bytes());
        write_instructions(self.buf, self.history.instructions_at(request.first));
        self.stamp(request.first);
        self.buf.push(b'}');
    }

    /// `run_id` (of the run the message at `index` was made in) and `conversation_id`, as
    /// fields after others of an open message.
    fn stamp(&mut self, index: usize) {
        if let Some(id) = self.history.run_alias_at(index) {
            self.buf.push(b',');
            self.buf.extend_from_slice(key!("run_id").as_bytes());
            json_writer::write_str(self.buf, id);
        }
        if let Some(c) = self.conversation {
            self.buf.push(b',');
            self.buf
                .extend_from_slice(key!("conversation_id").as_bytes());
            json_writer::write_str(self.buf, c);
        }
    }

    /// The parts of a non-assistant message, into the open request (opened first if none is).
    fn request_message(
        &mut self,
        role: &str,
        hash: &MessageHash,
        parts: &'h [Value],
        index: usize,
        warnings: &mut Vec<String>,
    ) {
        let history = self.history;
        let at = history.first_sent(hash).unwrap_or(self.fallback_ns);
        let mut request = match self.request.take() {
            Some(open) => open,
            None => {
                self.messages.next(self.buf);
                let mut m = Obj::open(self.buf);
                m.str(key!("kind"), "request");
                m.key(key!("parts")).push(b'[');
                OpenRequest {
                    at,
                    first: index,
                    parts: Commas::default(),
                }
            }
        };
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
                "text" => {
                    let kind = if role == "system" {
                        "system-prompt"
                    } else {
                        "user-prompt"
                    };
                    request.parts.next(self.buf);
                    let mut p = Obj::open(self.buf);
                    p.str(key!("part_kind"), kind);
                    write_text(&mut p, &f);
                    p.timestamp(key!("timestamp"), at);
                    p.close();
                }
                "tool_call_response" => {
                    let id = f.id_str();
                    let n = self.seen_returns.entry(id).or_insert(0);
                    let effect = history.effects.of_call(id, *n);
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
                    request.parts.next(self.buf);
                    let mut p = Obj::open(self.buf);
                    p.str(key!("part_kind"), "tool-return");
                    p.str(key!("tool_name"), tool_name);
                    p.value(key!("content"), f.result());
                    p.str(key!("tool_call_id"), id);
                    p.timestamp(key!("timestamp"), at);
                    p.str(key!("outcome"), outcome);
                    if let Some(retry) = retry {
                        p.value(key!("retry"), retry);
                    }
                    p.close();
                }
                "blob" | "uri" => match media_content(part) {
                    Some(content) => {
                        request.parts.next(self.buf);
                        let mut p = Obj::open(self.buf);
                        p.str(key!("part_kind"), "user-prompt");
                        let c = p.key(key!("content"));
                        c.push(b'[');
                        json_writer::write_out(c, &content);
                        c.push(b']');
                        p.timestamp(key!("timestamp"), at);
                        p.close();
                    }
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
            request.parts.next(self.buf);
            let mut p = Obj::open(self.buf);
            p.str(key!("part_kind"), "user-prompt");
            p.out(key!("content"), &Out::Array(prompt_items));
            p.timestamp(key!("timestamp"), at);
            p.close();
        }
        self.request = Some(request);
    }

    /// A `ModelResponse` for an assistant message: model name, usage and time from the model
    /// request that produced it.
    fn response(
        &mut self,
        hash: &MessageHash,
        parts: &'h [Value],
        index: usize,
        warnings: &mut Vec<String>,
    ) {
        let producer = self.history.producer_of(hash);
        self.messages.next(self.buf);
        let mut m = Obj::open(self.buf);
        m.str(key!("kind"), "response");
        let buf = m.key(key!("parts"));
        buf.push(b'[');
        let mut commas = Commas::default();
        for part in parts {
            let f = PartFields::of(part);
            let kind = match f.kind {
                "text" => "text",
                "tool_call" => "tool-call",
                "reasoning" | "thinking" => "thinking",
                other => {
                    warnings.push(format!(
                        "message {index}: part type {other:?} has no Pydantic AI response equivalent and was dropped"
                    ));
                    continue;
                }
            };
            commas.next(buf);
            let mut p = Obj::open(buf);
            p.str(key!("part_kind"), kind);
            if kind == "tool-call" {
                write_or_empty(&mut p, key!("tool_name"), f.name);
                match f.arguments {
                    Some(args) => p.value(key!("args"), args),
                    None => p.null(key!("args")),
                }
                write_or_empty(&mut p, key!("tool_call_id"), f.id);
            } else {
                write_text(&mut p, &f);
            }
            p.close();
        }
        buf.push(b']');
        m.timestamp(
            key!("timestamp"),
            producer.map(|p| p.end_ns).unwrap_or(self.fallback_ns),
        );
        if let Some(p) = producer {
            if let Some(model) = &p.model {
                m.str(key!("model_name"), model);
            }
            let usage = m.key(key!("usage"));
            let mut u = Obj::open(usage);
            u.u64(key!("input_tokens"), p.input_tokens.unwrap_or(0));
            u.u64(key!("output_tokens"), p.output_tokens.unwrap_or(0));
            u.close();
        }
        self.stamp(index);
        self.buf.push(b'}');
    }
}

/// A part's `content` field: its text (any JSON value the part holds, as it is), empty if none.
fn write_text(obj: &mut Obj<'_>, part: &PartFields<'_>) {
    write_or_empty(obj, key!("content"), part.content);
}

/// A field holding `value` as it is, or an empty string when there is none.
fn write_or_empty<const N: usize>(obj: &mut Obj<'_>, key: Key<N>, value: Option<&Value>) {
    match value {
        Some(v) => obj.value(key, v),
        None => obj.str(key, ""),
    }
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
/// (written as they are when there is one, as there mostly is; null when there are none).
fn write_instructions(buf: &mut Vec<u8>, parts: Option<&Value>) {
    let mut texts = parts
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|p| p.get("content").and_then(Value::as_str));
    let Some(first) = texts.next() else {
        buf.extend_from_slice(b"null");
        return;
    };
    match texts.next() {
        None => json_writer::write_str(buf, first),
        Some(second) => {
            let mut joined = [first, second].join("\n\n");
            for text in texts {
                joined.push_str("\n\n");
                joined.push_str(text);
            }
            json_writer::write_str(buf, &joined);
        }
    }
}
