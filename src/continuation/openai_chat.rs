//! OpenAI Chat Completions `messages`.
//!
//! Rules enforced: system instructions first as a `system` message; every `assistant.tool_calls[]`
//! id is answered by `tool` messages placed right after that assistant message (other messages
//! that arrive while calls are open are moved after the answers); unanswered calls and orphan
//! results are dropped; assistant `content` is null only with tool calls. Chat Completions has no
//! reasoning input, so thinking is dropped; tool messages carry text only, so structured results
//! are stringified; both are reported in warnings.

use std::borrow::Cow;

use serde_json::Value;

use super::json_writer;
use super::parts::{self, Pairing, PartFields};
use super::writer::{self, joined_texts, write_content, Commas, Content, Obj};
use super::{Fields, History, Out};
use crate::{key, obj};

const FORMAT: &str = "OpenAI Chat Completions";

/// Renders `messages`, written in place ([`super::writer`]): each message goes to the buffer as
/// it is read (a user or system message that must wait for open tool calls to be answered goes
/// to a small buffer of deferred messages first), with no tree of the whole answer in between.
pub fn render(history: &History, mut buf: Vec<u8>) -> (Fields<'_>, Vec<String>) {
    let messages = &history.messages;
    let mut warnings = Vec::new();
    let (pairing, outcomes) = parts::tool_calls(history);
    pairing.warnings(messages, FORMAT, &mut warnings);

    writer::room(&mut buf, messages.len(), 512);
    buf.push(b'[');
    let mut out = Commas::default();
    if let Some(text) = parts::instructions_text(history) {
        out.next(&mut buf);
        let mut m = Obj::open(&mut buf);
        m.str(key!("role"), "system");
        m.str(key!("content"), &text);
        m.close();
    }
    // Messages that arrive while the last assistant's calls are still unanswered, written and
    // separated by commas, to be copied to the answer once the calls are.
    let mut deferred: Vec<u8> = Vec::new();
    let mut open = 0usize;
    // The content parts of the message being read (kept across messages for its allocation).
    let mut content: Vec<Content> = Vec::new();
    // The tool calls of the assistant message being read, written (likewise kept).
    let mut calls: Vec<u8> = Vec::new();

    for (mi, message) in messages.iter().enumerate() {
        let role = parts::role(message);
        if role == "assistant" {
            flush(&mut buf, &mut out, &mut deferred);
            open = assistant(
                &mut buf,
                &mut out,
                &mut calls,
                message,
                mi,
                &pairing,
                &mut warnings,
            );
            continue;
        }
        content.clear();
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
                    out.next(&mut buf);
                    let mut m = Obj::open(&mut buf);
                    m.str(key!("role"), "tool");
                    m.str(key!("tool_call_id"), f.id_str());
                    m.out(key!("content"), &text);
                    m.close();
                    open = open.saturating_sub(1);
                }
                "text" => content.push(Content::Text(f.text())),
                "blob" | "uri" => {
                    if let Some(c) = media(part, mi, &mut warnings) {
                        content.push(Content::Media(c));
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
        if open > 0 {
            if !deferred.is_empty() {
                deferred.push(b',');
            }
            write_message(&mut deferred, role, &content);
        } else {
            flush(&mut buf, &mut out, &mut deferred);
            out.next(&mut buf);
            write_message(&mut buf, role, &content);
        }
    }
    flush(&mut buf, &mut out, &mut deferred);
    buf.push(b']');

    (vec![("messages", Out::Written(buf))], warnings)
}

/// Copies the deferred messages, if any, to the answer.
fn flush(buf: &mut Vec<u8>, out: &mut Commas, deferred: &mut Vec<u8>) {
    if !deferred.is_empty() {
        out.next(buf);
        buf.extend_from_slice(deferred);
        deferred.clear();
    }
}

/// A user or system message (`content` not empty): a lone text part is the content as a string;
/// a system message's content is its texts joined; otherwise the content is the list of parts.
fn write_message(buf: &mut Vec<u8>, role: &str, content: &[Content<'_>]) {
    let mut m = Obj::open(buf);
    m.str(key!("role"), role);
    let body = m.key(key!("content"));
    match content {
        [Content::Text(text)] => json_writer::write_str(body, text),
        _ if role == "system" => json_writer::write_str(body, &joined_texts(content)),
        _ => write_content(body, content, "text"),
    }
    m.close();
}

/// Writes an assistant message (none when it has nothing Chat Completions can carry); returns the
/// number of tool calls it left open. `calls` is a scratch buffer for the calls, written while
/// the texts that come first are still being gathered.
fn assistant(
    buf: &mut Vec<u8>,
    out: &mut Commas,
    calls: &mut Vec<u8>,
    message: &Value,
    mi: usize,
    pairing: &Pairing,
    warnings: &mut Vec<String>,
) -> usize {
    // The texts joined: borrowed when there is one, as there mostly is.
    let mut text: Option<Cow<'_, str>> = None;
    let mut n = 0usize;
    calls.clear();
    for (pi, part) in parts::parts(message).iter().enumerate() {
        let f = PartFields::of(part);
        match f.kind {
            "text" => {
                text = Some(match text {
                    None => f.text(),
                    Some(before) => {
                        let mut joined = before.into_owned();
                        joined.push_str("\n\n");
                        joined.push_str(&f.text());
                        Cow::Owned(joined)
                    }
                });
            }
            "tool_call" if !pairing.skip(mi, pi) => {
                if n > 0 {
                    calls.push(b',');
                }
                n += 1;
                let mut c = Obj::open(calls);
                c.str(key!("id"), f.id_str());
                c.str(key!("type"), "function");
                let function = c.key(key!("function"));
                let mut func = Obj::open(function);
                func.str(key!("name"), f.name_str().unwrap_or(""));
                func.out(key!("arguments"), &parts::arguments_text(part));
                func.close();
                c.close();
            }
            "tool_call" => {}
            "thinking" | "reasoning" => warnings.push(format!(
                "message {mi}: thinking was dropped ({FORMAT} takes no reasoning input)"
            )),
            other => warnings.push(format!(
                "message {mi}: assistant part type {other:?} has no {FORMAT} equivalent and was dropped"
            )),
        }
    }
    if text.is_none() && n == 0 {
        warnings.push(format!(
            "message {mi}: assistant message has nothing {FORMAT} can carry and was dropped"
        ));
        return 0;
    }
    out.next(buf);
    let mut m = Obj::open(buf);
    m.str(key!("role"), "assistant");
    match &text {
        Some(text) => m.str(key!("content"), text),
        None => m.null(key!("content")),
    }
    if n > 0 {
        let list = m.key(key!("tool_calls"));
        list.push(b'[');
        list.extend_from_slice(calls);
        list.push(b']');
    }
    m.close();
    n
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

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::super::tests::parts::{blob, call, result, text};
    use super::super::tests::{history, rendered_as_recorded, roles};
    use super::super::{render, Format, Out};

    /// A history that walks every path of the renderer: deferred messages flushed by an
    /// assistant, by a later message and at the end; joined texts; media; dropped parts.
    fn messages() -> Vec<Value> {
        vec![
            json!({"role": "system", "parts": [text(json!("a")), blob("image/png"), text(json!("b\n\"c\""))]}),
            json!({"role": "system", "parts": [blob("image/png")]}),
            json!({"role": "user", "parts": [text(json!("go")), blob("image/jpeg"), blob("audio/wav"),
                blob("audio/mpeg"), blob("application/pdf"), blob("text/csv"),
                {"type": "uri", "uri": "https://x/y.pdf", "mime_type": "application/pdf"},
                {"type": "blob"}, {"type": "weird"}]}),
            json!({"role": "assistant", "parts": [text(json!("one")), text(json!({"k": [1, 2]})),
                {"type": "thinking", "content": "hmm"}, call("a", json!("{\"q\":1}")),
                call("b", Value::Null), call("c", json!([1])), {"type": "weird"}]}),
            json!({"role": "user", "parts": [text(json!("wait"))]}),
            json!({"role": "user", "parts": [text(json!("still"))]}),
            json!({"role": "tool", "parts": [result("a", json!({"ok": true})), text(json!("with it"))]}),
            json!({"role": "assistant", "parts": [{"type": "thinking", "content": "only"}]}),
            json!({"role": "tool", "parts": [result("b", Value::Null), result("c", json!("fine")),
                result("zzz", json!("orphan"))]}),
            json!({"role": "user", "parts": [text(Value::Null)]}),
            json!({"role": "assistant", "parts": [call("d", json!({}))]}),
            json!({"role": "user", "parts": [text(json!("mid"))]}),
            json!({"role": "assistant", "parts": [text(json!("x")), call("e", json!({}))]}),
            json!({"role": "user", "parts": [text(json!("late"))]}),
            json!({"role": "tool", "parts": [result("e", json!(3))]}),
            json!({"role": "user", "parts": [text(json!("after"))]}),
            json!({"role": "assistant", "parts": [call("f", json!({}))]}),
            json!({"role": "user", "parts": [text(json!("end"))]}),
            json!({"role": "tool", "parts": [result("f", json!("r"))]}),
        ]
    }

    #[test]
    fn every_path_renders_to_the_recorded_bytes() {
        // Every path of the renderer; the bytes and warnings are checked against those recorded
        // from the renderer that built a tree before writing (`rendered_as_recorded`).
        for instructions in [None, Some("be brief")] {
            let h = history(messages(), instructions);
            let (f, warnings) = rendered_as_recorded(Format::OpenAiChat, &h);
            let roles = roles(&f["messages"]);
            assert_eq!(f["messages"][0]["role"], "system");
            assert!(roles.ends_with(&["assistant", "tool", "user"]), "{roles:?}");
            assert!(!warnings.is_empty());
        }
        let h = history(Vec::new(), None);
        let (fields, _) = render(Format::OpenAiChat, &h);
        assert_eq!(Out::Object(fields).to_value(), json!({"messages": []}));
    }
}
