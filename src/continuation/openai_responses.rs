//! OpenAI Responses `instructions` + `input` items.
//!
//! Rules enforced: each `function_call{call_id,name,arguments}` (arguments as JSON text) keeps a
//! `function_call_output{call_id,output}`; unanswered calls and orphan outputs are dropped.
//! Reasoning items can only travel with the provider's own id and encrypted content, which OTel
//! does not carry, so thinking is dropped with a warning; outputs are text, so structured results
//! are stringified with a warning.

use serde_json::Value;

use super::json_writer;
use super::parts::{self, PartFields};
use super::writer::{self, joined_texts, write_content, Commas, Content, Obj};
use super::{Fields, History, Out};
use crate::{key, obj};

const FORMAT: &str = "OpenAI Responses";

/// Renders `instructions` and `input`, the items written in place ([`super::writer`]): each goes
/// to the buffer as it is read (a message's content parts are gathered until a tool item or the
/// message's end), with no tree of the whole answer in between.
pub fn render<'h>(history: &'h History, mut buf: Vec<u8>) -> (Fields<'h>, Vec<String>) {
    let messages = &history.messages;
    let mut warnings = Vec::new();
    let (pairing, outcomes) = parts::tool_calls(history);
    pairing.warnings(messages, FORMAT, &mut warnings);
    writer::room(&mut buf, messages.len(), 512);
    buf.push(b'[');
    let mut input = Commas::default();
    // The content parts not yet written (kept across messages for its allocation).
    let mut content: Vec<Content> = Vec::new();

    for (mi, message) in messages.iter().enumerate() {
        let role = parts::role(message);
        for (pi, part) in parts::parts(message).iter().enumerate() {
            let f = PartFields::of(part);
            match f.kind {
                "text" => content.push(Content::Text(f.text())),
                "tool_call" => {
                    if pairing.skip(mi, pi) {
                        continue;
                    }
                    flush(&mut buf, &mut input, role, &mut content);
                    input.next(&mut buf);
                    let mut item = Obj::open(&mut buf);
                    item.str(key!("type"), "function_call");
                    item.str(key!("call_id"), f.id_str());
                    item.str(key!("name"), f.name_str().unwrap_or(""));
                    item.out(key!("arguments"), &parts::arguments_text(part));
                    item.close();
                }
                "tool_call_response" => {
                    let outcome = outcomes.of(mi, pi);
                    if pairing.skip(mi, pi) {
                        continue;
                    }
                    flush(&mut buf, &mut input, role, &mut content);
                    let text = parts::tool_result_text(
                        &f,
                        outcome,
                        mi,
                        FORMAT,
                        "function_call_output items",
                        &mut warnings,
                    );
                    input.next(&mut buf);
                    let mut item = Obj::open(&mut buf);
                    item.str(key!("type"), "function_call_output");
                    item.str(key!("call_id"), f.id_str());
                    item.out(key!("output"), &text);
                    item.close();
                }
                "thinking" | "reasoning" => warnings.push(format!(
                    "message {mi}: thinking was dropped ({FORMAT} reasoning items need the provider's id and encrypted content)"
                )),
                "blob" | "uri" if role != "assistant" => {
                    if let Some(c) = media(part, mi, &mut warnings) {
                        content.push(Content::Media(c));
                    }
                }
                other => warnings.push(format!(
                    "message {mi}: {role} part type {other:?} has no {FORMAT} equivalent and was dropped"
                )),
            }
        }
        flush(&mut buf, &mut input, role, &mut content);
    }
    buf.push(b']');

    (
        vec![
            ("instructions", parts::instructions_text(history).into()),
            ("input", Out::Written(buf)),
        ],
        warnings,
    )
}

/// Writes the content parts gathered, if any, as one message item of `role`, and empties them.
/// An assistant's content is its texts joined; a lone text part of another role is the content
/// as a string; otherwise the content is the list of parts.
fn flush(buf: &mut Vec<u8>, input: &mut Commas, role: &str, content: &mut Vec<Content<'_>>) {
    if content.is_empty() {
        return;
    }
    input.next(buf);
    let mut m = Obj::open(buf);
    if role == "assistant" {
        m.str(key!("role"), "assistant");
        match content.as_slice() {
            [Content::Text(text)] => m.str(key!("content"), text),
            _ => m.str(key!("content"), &joined_texts(content)),
        }
    } else {
        m.str(
            key!("role"),
            if role == "system" { "system" } else { "user" },
        );
        let body = m.key(key!("content"));
        match content.as_slice() {
            [Content::Text(text)] => json_writer::write_str(body, text),
            _ => write_content(body, content, "input_text"),
        }
    }
    m.close();
    content.clear();
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

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::super::tests::parts::{blob, call, result, text};
    use super::super::tests::{history, rendered_as_recorded};
    use super::super::{render, Format, Out};

    /// A history that walks every path of the renderer: content flushed by tool items and at a
    /// message's end; joined texts; media; dropped parts.
    fn messages() -> Vec<Value> {
        vec![
            json!({"role": "system", "parts": [text(json!("a")), text(json!("b\n\"c\""))]}),
            json!({"role": "system", "parts": [text(json!("only"))]}),
            json!({"role": "user", "parts": [blob("image/png")]}),
            json!({"role": "user", "parts": [text(json!("go")), blob("image/jpeg"),
                blob("application/pdf"), {"type": "uri", "uri": "https://x/y.png", "modality": "image"},
                {"type": "uri", "uri": "https://x/y.pdf", "mime_type": "application/pdf"},
                {"type": "blob"}, {"type": "weird"}]}),
            json!({"role": "assistant", "parts": [text(json!("one")), text(json!({"k": [1, 2]})),
                {"type": "thinking", "content": "hmm"}, call("a", json!("{\"q\":1}")),
                text(json!("between")), call("b", Value::Null), call("c", json!([1])),
                blob("image/png"), {"type": "weird"}, text(json!("tail"))]}),
            json!({"role": "tool", "parts": [text(json!("before")), result("a", json!({"ok": true})),
                text(json!("with it")), result("b", Value::Null)]}),
            json!({"role": "assistant", "parts": [{"type": "reasoning", "content": "only"}]}),
            json!({"role": "tool", "parts": [result("c", json!("fine")), result("zzz", json!("orphan"))]}),
            json!({"role": "user", "parts": [text(Value::Null)]}),
            json!({"role": "assistant", "parts": [call("d", json!({}))]}),
        ]
    }

    #[test]
    fn every_path_renders_to_the_recorded_bytes() {
        // Every path of the renderer; the bytes and warnings are checked against those recorded
        // from the renderer that built a tree before writing (`rendered_as_recorded`).
        for instructions in [None, Some("be brief")] {
            let h = history(messages(), instructions);
            let (f, warnings) = rendered_as_recorded(Format::OpenAiResponses, &h);
            assert_eq!(f["instructions"], json!(instructions));
            assert_eq!(
                f["input"][0]["content"],
                json!([
                    {"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b\n\"c\""}
                ])
            );
            assert_eq!(f["input"][1], json!({"role": "system", "content": "only"}));
            assert!(!warnings.is_empty());
        }
        let h = history(Vec::new(), None);
        let (fields, _) = render(Format::OpenAiResponses, &h);
        assert_eq!(
            Out::Object(fields).to_value(),
            json!({"instructions": null, "input": []})
        );
    }
}
