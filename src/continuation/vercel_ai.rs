//! Vercel AI SDK `ModelMessage[]` (npm `ai` v5+), for `generateText({ system, messages })` /
//! `streamText(...)`.
//!
//! Messages are `system` (text), `user` (`text` and `file` parts), `assistant` (`text`,
//! `reasoning`, `file` and `tool-call` parts) and `tool` (`tool-result` parts whose `output` is
//! `{type: 'text' | 'json' | 'error-text' | 'error-json', value}`: a string result is `text`,
//! anything else `json`, and a failed or retried call (from the history or the ledger) the
//! matching `error-*`). Tool results found in a user message (Pydantic AI's form) go to a `tool`
//! message of their own, placed before the rest of that message. Unanswered calls and orphan
//! results are left out, as the SDK rejects them. The system instructions are `system`.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;

use super::json_writer;
use super::parts::{self, Outcome, PartFields};
use super::writer::{self, Commas, Obj};
use super::{Fields, History, Out};
use crate::key;

const FORMAT: &str = "the Vercel AI SDK";

/// Renders `system` (null when there are no instructions) and `messages`, written in place
/// ([`super::writer`]): each part goes to the buffer as it is read, with no tree of the whole
/// answer in between (the other parts of a message with tool results wait in a small buffer of
/// their own while the results, which come first, are written).
pub fn render(history: &History, mut buf: Vec<u8>) -> (Fields<'_>, Vec<String>) {
    let messages = &history.messages;
    let mut warnings = Vec::new();
    let (pairing, outcomes) = parts::tool_calls(history);
    pairing.warnings(messages, FORMAT, &mut warnings);
    // Tool names by call id, for results that do not name their tool: read from the whole
    // history (the last call with an id names it) when the first such result is met.
    let mut names: Option<HashMap<&str, &str>> = None;
    // The fields of the parts of the message being written (kept to hold the next one's).
    let mut fields: Vec<PartFields<'_>> = Vec::new();

    writer::room(&mut buf, messages.len(), 320);
    let mut w = Writer {
        buf,
        deferred: Vec::new(),
        messages: Commas::default(),
        content_role: None,
        content: Commas::default(),
        results: Commas::default(),
        defer: false,
    };
    w.buf.push(b'[');
    for (mi, message) in messages.iter().enumerate() {
        let role = parts::role(message);
        let assistant = role == "assistant";
        let message_parts = parts::parts(message);
        fields.clear();
        fields.extend(message_parts.iter().map(PartFields::of));
        // Results come before the rest of their message: the rest waits when there may be any.
        let defer = !assistant && fields.iter().any(|f| f.kind == "tool_call_response");
        w.start(role, defer);
        for (pi, (part, f)) in message_parts.iter().zip(&fields).enumerate() {
            let kind = f.kind;
            match kind {
                "tool_call" | "tool_call_response" if pairing.skip(mi, pi) => {}
                "tool_call" if assistant => {
                    if let Some(buf) = w.content_item() {
                        write_tool_call(buf, f);
                    }
                }
                "tool_call_response" if !assistant => {
                    let name = match f.name_str().unwrap_or("") {
                        "" => tool_name(&mut names, messages, f.id_str()),
                        name => name,
                    };
                    write_tool_result(w.result_item(), f, name, outcomes.of(mi, pi));
                }
                "text" => {
                    if let Some(buf) = w.content_item() {
                        write_text(buf, "text", &f.text());
                    }
                }
                "reasoning" if assistant => {
                    if let Some(buf) = w.content_item() {
                        write_text(buf, "reasoning", &f.text());
                    }
                }
                "blob" | "uri" => {
                    if let Some(buf) = w.content_item() {
                        let (mime, data) = parts::media(part);
                        let mut p = Obj::open(buf);
                        p.str(key!("type"), "file");
                        p.str(key!("data"), data);
                        p.str(key!("mediaType"), mime);
                        p.close();
                    }
                }
                _ => warnings.push(format!(
                    "message {mi}: part of type {kind:?} has no {FORMAT} form in a {role} message; left out"
                )),
            }
        }
        w.finish();
        if role == "system" {
            let text: Vec<Cow<'_, str>> = message_parts.iter().map(parts::text).collect();
            w.messages.next(&mut w.buf);
            let mut m = Obj::open(&mut w.buf);
            m.str(key!("role"), "system");
            m.str(key!("content"), &text.join("\n\n"));
            m.close();
        }
    }
    w.buf.push(b']');
    (
        vec![
            ("system", parts::instructions_text(history).into()),
            ("messages", Out::Written(w.buf)),
        ],
        warnings,
    )
}

/// Writes the message list. One history message becomes a `tool` message of its results (if
/// any), then a message of the rest of its parts (if any); each is opened by its first item.
struct Writer {
    /// The list, written so far.
    buf: Vec<u8>,
    /// The rest of a message that has results, while they are written: its opening and its
    /// items.
    deferred: Vec<u8>,
    /// The commas between messages.
    messages: Commas,
    /// The role of the message of the rest of the parts (none for a system message, whose
    /// parts make one text instead).
    content_role: Option<&'static str>,
    /// The commas between the rest of the parts.
    content: Commas,
    /// The commas between the results.
    results: Commas,
    /// True when the rest of the parts goes to `deferred`.
    defer: bool,
}

impl Writer {
    /// Starts a history message of `role`: its other parts wait in `deferred` when `defer`
    /// (it may have results, which come first).
    fn start(&mut self, role: &str, defer: bool) {
        self.content_role = match role {
            "system" => None,
            "assistant" => Some("assistant"),
            _ => Some("user"),
        };
        self.content = Commas::default();
        self.results = Commas::default();
        self.defer = defer;
        self.deferred.clear();
    }

    /// Where the next part of the rest goes, after its message's opening or a comma (none for
    /// a system message).
    fn content_item(&mut self) -> Option<&mut Vec<u8>> {
        let role = self.content_role?;
        Some(if self.defer {
            open_item(&mut self.deferred, &mut self.content, None, role);
            &mut self.deferred
        } else {
            open_item(
                &mut self.buf,
                &mut self.content,
                Some(&mut self.messages),
                role,
            );
            &mut self.buf
        })
    }

    /// Where the next result goes, after the `tool` message's opening or a comma.
    fn result_item(&mut self) -> &mut Vec<u8> {
        open_item(
            &mut self.buf,
            &mut self.results,
            Some(&mut self.messages),
            "tool",
        );
        &mut self.buf
    }

    /// Ends the history message: closes its `tool` message, then writes or closes the message
    /// of the rest.
    fn finish(&mut self) {
        if !self.results.is_empty() {
            self.buf.extend_from_slice(b"]}");
        }
        if self.content.is_empty() {
            return;
        }
        if self.defer {
            self.messages.next(&mut self.buf);
            self.buf.extend_from_slice(&self.deferred);
        }
        self.buf.extend_from_slice(b"]}");
    }
}

/// Writes what comes before the next item of a message's `content`: a comma, or for the first
/// item the message's opening with its `role` (after the comma between messages, when
/// `messages` is given).
fn open_item(buf: &mut Vec<u8>, items: &mut Commas, messages: Option<&mut Commas>, role: &str) {
    if items.is_empty() {
        if let Some(messages) = messages {
            messages.next(buf);
        }
        let mut m = Obj::open(buf);
        m.str(key!("role"), role);
        m.key(key!("content")).push(b'[');
    }
    items.next(buf);
}

/// A `text` or `reasoning` part.
fn write_text(buf: &mut Vec<u8>, kind: &str, text: &str) {
    let mut p = Obj::open(buf);
    p.str(key!("type"), kind);
    p.str(key!("text"), text);
    p.close();
}

/// A `tool-call` part: `input` is the arguments as JSON (JSON text parsed; text that is not JSON
/// stays text).
fn write_tool_call(buf: &mut Vec<u8>, part: &PartFields<'_>) {
    let mut p = Obj::open(buf);
    p.str(key!("type"), "tool-call");
    p.str(key!("toolCallId"), part.id_str());
    p.str(key!("toolName"), part.name_str().unwrap_or(""));
    let input = p.key(key!("input"));
    match part.arguments {
        None | Some(Value::Null) => input.extend_from_slice(b"{}"),
        Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
            Ok(v) => json_writer::write_value(input, &v),
            Err(_) => json_writer::write_str(input, s),
        },
        Some(v) => json_writer::write_value(input, v),
    }
    p.close();
}

/// The name of the tool of call `id`, from `names` (made from `messages` the first time: the
/// last call with an id names it; empty when no call has the id).
fn tool_name<'h>(
    names: &mut Option<HashMap<&'h str, &'h str>>,
    messages: &'h [Arc<Value>],
    id: &str,
) -> &'h str {
    let names = names.get_or_insert_with(|| {
        let mut names = HashMap::with_capacity(messages.len());
        for message in messages {
            for part in parts::parts(message) {
                let f = PartFields::of(part);
                if f.kind == "tool_call" {
                    names.insert(f.id_str(), f.name_str().unwrap_or(""));
                }
            }
        }
        names
    });
    names.get(id).copied().unwrap_or("")
}

/// A `tool-result` part named `name`, with the SDK's typed `output`.
fn write_tool_result(buf: &mut Vec<u8>, part: &PartFields<'_>, name: &str, outcome: Outcome) {
    let id = part.id_str();
    let value = part.result();
    let kind = match (outcome.is_error(), value) {
        (true, Value::String(_)) => "error-text",
        (true, _) => "error-json",
        (false, Value::String(_)) => "text",
        (false, _) => "json",
    };
    let mut p = Obj::open(buf);
    p.str(key!("type"), "tool-result");
    p.str(key!("toolCallId"), id);
    p.str(key!("toolName"), name);
    let mut o = Obj::open(p.key(key!("output")));
    o.str(key!("type"), kind);
    o.value(key!("value"), value);
    o.close();
    p.close();
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::continuation::tests::{history, rendered_as_recorded, roles};

    fn rendered(messages: Vec<Value>, instructions: Option<&str>) -> (Value, Vec<String>) {
        let h = history(messages, instructions);
        let (fields, warnings) = render(&h, Vec::new());
        (Out::Object(fields).to_value(), warnings)
    }

    #[test]
    fn results_in_user_messages_become_tool_messages_with_typed_outputs() {
        let (f, w) = rendered(
            vec![
                json!({"role": "user", "parts": [{"type": "text", "content": "go"}]}),
                json!({"role": "assistant", "parts": [
                    {"type": "reasoning", "content": "hm"},
                    {"type": "tool_call", "id": "a", "name": "f", "arguments": "{\"x\":1}"},
                    {"type": "tool_call", "id": "b", "name": "g", "arguments": {"y": 2}},
                    {"type": "tool_call", "id": "c", "name": "h", "arguments": {}}]}),
                json!({"role": "user", "parts": [
                    {"type": "tool_call_response", "id": "a", "result": "five"},
                    {"type": "tool_call_response", "id": "b", "name": "g", "response": {"z": 3}},
                    {"type": "tool_call_response", "id": "c", "response": "boom", "outcome": "failed"},
                    {"type": "text", "content": "and then?"}]}),
            ],
            Some("be brief"),
        );
        assert!(w.is_empty(), "{w:?}");
        assert_eq!(f["system"], "be brief");
        let m = f["messages"].as_array().unwrap();
        let roles = roles(&f["messages"]);
        assert_eq!(roles, ["user", "assistant", "tool", "user"]);
        assert_eq!(
            m[1]["content"][0],
            json!({"type": "reasoning", "text": "hm"})
        );
        assert_eq!(m[1]["content"][1]["input"], json!({"x": 1}));
        let results = &m[2]["content"];
        assert_eq!(
            results[0],
            json!({"type": "tool-result", "toolCallId": "a", "toolName": "f",
                   "output": {"type": "text", "value": "five"}})
        );
        assert_eq!(
            results[1]["output"],
            json!({"type": "json", "value": {"z": 3}})
        );
        assert_eq!(
            results[2]["output"],
            json!({"type": "error-text", "value": "boom"})
        );
        assert_eq!(
            m[3]["content"],
            json!([{"type": "text", "text": "and then?"}])
        );
    }

    #[test]
    fn unanswered_calls_and_unknown_parts_are_left_out_with_warnings() {
        let (f, w) = rendered(
            vec![
                json!({"role": "assistant", "parts": [
                    {"type": "tool_call", "id": "a", "name": "f"},
                    {"type": "server_tool", "content": 1}]}),
                json!({"role": "tool", "parts": [{"type": "tool_call_response", "id": "z"}]}),
            ],
            None,
        );
        assert!(f["system"].is_null());
        assert_eq!(f["messages"], json!([]));
        assert_eq!(w.len(), 3, "{w:?}");
    }

    #[test]
    fn every_path_renders_to_the_recorded_bytes() {
        // Every kind of part and field shape; the bytes and warnings are checked against those
        // recorded from the renderer that built a tree before writing (`rendered_as_recorded`).
        let messages = vec![
            json!({"role": "system", "parts": [
                {"type": "text", "content": "one"}, {"type": "text", "content": {"two": 2}},
                {"type": "tool_call", "id": "s"}, {"type": "blob", "content": "AA"}]}),
            json!({"parts": [{"type": "text", "content": "go\n\"now\""},
                {"type": "uri", "uri": "https://x/y.png", "mime_type": "image/png"},
                {"type": "reasoning", "content": "hm"}]}),
            json!({"role": "assistant", "parts": [
                {"type": "reasoning", "content": ["r"]},
                {"type": "text"},
                {"type": "tool_call", "id": "a", "name": "f", "arguments": "{\"z\": 1, \"a\": [2]}"},
                {"type": "tool_call", "id": "b", "arguments": "not json"},
                {"type": "tool_call", "id": "c", "arguments": null},
                {"type": "tool_call", "id": "d", "name": "g", "arguments": 5},
                {"type": "tool_call", "id": "e", "name": "h"},
                {"type": "tool_call", "id": "u", "name": "unanswered"},
                {"type": "tool_call_response", "id": "x"},
                {"type": "blob", "content": "AA", "media_type": "audio/wav"}]}),
            json!({"role": "tool", "parts": [
                {"type": "tool_call_response", "id": "a", "result": "five"},
                {"type": "tool_call_response", "id": "zz", "result": "orphan"},
                {"type": "tool_call_response", "id": "b", "response": {"k": [1]}, "outcome": "failed"}]}),
            json!({"role": "tool", "parts": [{"type": "tool_call_response", "id": "zz"}]}),
            json!({"role": "user", "parts": [
                {"type": "text", "content": "before"},
                {"type": "tool_call_response", "id": "c", "name": "named", "response": null},
                {"type": "server_tool", "content": 1},
                {"type": "tool_call_response", "id": "d", "result": "no", "outcome": "retried"},
                {"type": "text", "content": "after"}]}),
            json!({"role": "system", "parts": [
                {"type": "tool_call_response", "id": "e", "result": [1]}]}),
            json!({"role": "tool", "parts": [{"type": "text", "content": "loose"}]}),
            json!({"role": "assistant"}),
            json!({"role": "user", "parts": []}),
            // The last call with an id names the results that do not name their tool.
            json!({"role": "assistant", "parts": [{"type": "tool_call", "id": "a", "name": "f2"}]}),
        ];
        for instructions in [None, Some("be brief")] {
            let h = history(messages.clone(), instructions);
            let (value, warnings) = rendered_as_recorded(crate::continuation::Format::VercelAi, &h);
            assert_eq!(warnings.len(), 8, "{warnings:?}");
            let roles = roles(&value["messages"]);
            assert_eq!(
                roles,
                [
                    "system",
                    "user",
                    "assistant",
                    "tool",
                    "tool",
                    "user",
                    "tool",
                    "system",
                    "user"
                ]
            );
            assert_eq!(value["system"].as_str(), instructions);
            assert_eq!(value["messages"][3]["content"][0]["toolName"], "f2");
        }
    }
}
