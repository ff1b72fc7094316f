//! Anthropic Messages: top-level `system` + `messages`.
//!
//! Rules enforced: roles user/assistant only (system text goes to the top-level `system`);
//! consecutive same-role turns merge; the `tool_result` blocks of a user turn come first; every
//! `tool_use` is answered in the next user turn (unanswered calls and orphan results are dropped);
//! the history starts with a user turn. Thinking needs its byte-exact `signature`: without one it
//! is dropped, with a warning.

use serde_json::Value;

use super::json_writer;
use super::parts::{self, PartFields};
use super::turns::TurnWriter;
use super::writer::{self, Obj};
use super::{Fields, History, Out};
use crate::{key, obj};

const FORMAT: &str = "Anthropic Messages";

/// What the user turn put before a history that starts with an assistant turn is, in warnings.
const FILLER_TEXT: &str = "a user turn \"...\"";
/// That user turn, as written.
const FILLER: &[u8] = br#"{"role":"user","content":[{"type":"text","text":"..."}]}"#;

/// Renders `system` (omitted when there is none) and `messages`, the messages written in place
/// ([`super::writer`]): each block goes to the buffer as its part is read, with no tree of the
/// whole answer in between.
pub fn render(history: &History, mut buf: Vec<u8>) -> (Fields<'_>, Vec<String>) {
    let messages = &history.messages;
    let mut warnings = Vec::new();
    let (pairing, outcomes) = parts::tool_calls(history);
    pairing.warnings(messages, FORMAT, &mut warnings);

    let mut system: Vec<String> = parts::instructions_text(history).into_iter().collect();
    writer::room(&mut buf, messages.len(), 400);
    let mut turns = TurnWriter::open(&mut buf, key!("content"), "assistant", FILLER);

    for (mi, message) in messages.iter().enumerate() {
        let role = parts::role(message);
        if role == "system" {
            if turns.started() {
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
        let turn_role = if assistant { "assistant" } else { "user" };
        for (pi, part) in parts::parts(message).iter().enumerate() {
            let f = PartFields::of(part);
            match f.kind {
                "text" => {
                    let t = f.text();
                    if !t.is_empty() {
                        turns.block(turn_role, false, |b| {
                            let mut o = Obj::open(b);
                            o.str(key!("type"), "text");
                            o.str(key!("text"), &t);
                            o.close();
                        });
                    }
                }
                "tool_call" if assistant => {
                    if !pairing.skip(mi, pi) {
                        turns.block(turn_role, false, |b| {
                            let mut o = Obj::open(b);
                            o.str(key!("type"), "tool_use");
                            o.str(key!("id"), f.id_str());
                            o.str(key!("name"), f.name_str().unwrap_or(""));
                            match f.arguments {
                                Some(args @ Value::Object(_)) => o.value(key!("input"), args),
                                _ => o.out(key!("input"), &parts::arguments_object(part)),
                            }
                            o.close();
                        });
                    }
                }
                "tool_call_response" if !assistant => {
                    let outcome = outcomes.of(mi, pi);
                    if pairing.skip(mi, pi) {
                        continue;
                    }
                    let (text, _) = parts::result_text(f.result());
                    turns.block(turn_role, true, |b| {
                        let mut o = Obj::open(b);
                        o.str(key!("type"), "tool_result");
                        o.str(key!("tool_use_id"), f.id_str());
                        // Text blocks must not be empty: an empty result has no content.
                        if !text.is_empty() {
                            let content = o.key(key!("content"));
                            content.push(b'[');
                            let mut t = Obj::open(content);
                            t.str(key!("type"), "text");
                            t.str(key!("text"), &text);
                            t.close();
                            content.push(b']');
                        }
                        let is_error: &[u8] = if outcome.is_error() { b"true" } else { b"false" };
                        o.key(key!("is_error")).extend_from_slice(is_error);
                        o.close();
                    });
                }
                "thinking" | "reasoning" if assistant => {
                    let signature = parts::field(part, "signature");
                    if signature.is_empty() {
                        warnings.push(format!(
                            "message {mi}: thinking without a signature was dropped ({FORMAT} needs the byte-exact signature)"
                        ));
                    } else {
                        turns.block(turn_role, false, |b| {
                            let mut o = Obj::open(b);
                            o.str(key!("type"), "thinking");
                            o.str(key!("thinking"), &f.text());
                            o.str(key!("signature"), signature);
                            o.close();
                        });
                    }
                }
                "blob" | "uri" if !assistant => {
                    if let Some(block) = media(part, mi, &mut warnings) {
                        turns.block(turn_role, false, |b| json_writer::write_out(b, &block));
                    }
                }
                other => warnings.push(format!(
                    "message {mi}: {role} part type {other:?} has no {FORMAT} equivalent and was dropped"
                )),
            }
        }
    }
    if turns.finish() {
        warnings.push(parts::filler_warning("assistant", FILLER_TEXT, FORMAT));
    }

    let mut fields = Vec::new();
    if !system.is_empty() {
        fields.push(("system", Out::String(system.join("\n\n"))));
    }
    fields.push(("messages", Out::Written(buf)));
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

#[cfg(test)]
mod tests {
    //! Each render here is also checked byte for byte against the one recorded from the
    //! renderer that built a tree before writing (`continuation::tests::rendered_as_recorded`).

    use serde_json::{json, Value};

    use super::super::tests::parts::{call, result, text};
    use super::super::tests::{history, rendered_as_recorded};
    use super::super::Format;

    fn rendered(messages: Vec<Value>, instructions: Option<&str>) -> (Value, Vec<String>) {
        rendered_as_recorded(Format::Anthropic, &history(messages, instructions))
    }

    #[test]
    fn merged_turns_keep_results_first_and_every_kind_of_part_renders() {
        let (f, w) = rendered(
            vec![
                json!({"role": "system", "parts": [text("early"), text("")]}),
                json!({"role": "assistant", "parts": [
                    {"type": "thinking", "content": "hmm"},
                    {"type": "reasoning", "content": {"x": 1}, "signature": "s"},
                    text(""), text("a \"quoted\"\nline"),
                    call("a", json!({"x": 1})), call("b", json!("{\"y\":2}")), call("c", json!("[1]")),
                    call("d", json!("not json")), call("e", json!(null)), call("g", json!(3)),
                    {"type": "tool_call", "id": "h"}, call("never", json!({})),
                    {"type": "mystery"}, result("in-assistant", json!("x")),
                ]}),
                json!({"role": "user", "parts": [text("steer"), {"type": "blob", "content": "AAA", "mime_type": "image/png"}]}),
                json!({"role": "tool", "parts": [
                    result("a", json!("ok")), result("b", json!({"structured": [1, 2]})),
                    {"type": "tool_call_response", "id": "c", "result": null, "outcome": "failed"},
                    {"type": "tool_call_response", "id": "d", "response": "r", "outcome": "retried"},
                    result("orphan", json!("x")),
                ]}),
                json!({"role": "assistant", "parts": []}),
                json!({"role": "user", "parts": [
                    text("more"), result("e", json!(7)),
                    {"type": "blob", "content": "BBB", "media_type": "application/pdf"},
                    {"type": "blob", "content": "CCC", "mime_type": "audio/wav"},
                    {"type": "uri", "uri": "https://x/y", "modality": "image"},
                    {"type": "uri", "mime_type": "image/png"},
                    result("g", json!("")), result("h", json!(["l"])),
                ]}),
                json!({"role": "system", "parts": [text("late")]}),
                json!({"role": "assistant", "parts": [text("done")]}),
            ],
            Some("be brief"),
        );
        assert_eq!(f["system"], "be brief\n\nearly\n\nlate");
        let m = f["messages"].as_array().unwrap();
        assert_eq!(m.len(), 4, "{f}");
        let types: Vec<&str> = m[2]["content"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["type"].as_str().unwrap())
            .collect();
        assert_eq!(
            types[..7],
            ["tool_result"; 7],
            "results first, also those after other blocks: {types:?}"
        );
        assert!(types[7..].iter().all(|t| *t != "tool_result"), "{types:?}");
        assert!(w
            .iter()
            .any(|w| w.contains("moved to the top-level system")));
        assert!(w.iter().any(|w| w.contains("without a signature")));
    }

    #[test]
    fn a_history_that_starts_with_the_assistant_or_has_no_turns() {
        let (f, w) = rendered(
            vec![json!({"role": "assistant", "parts": [{"type": "text", "content": "hi"}]})],
            None,
        );
        assert_eq!(f["messages"][0]["content"][0]["text"], "...");
        assert!(w
            .iter()
            .any(|w| w.contains("starts with an assistant turn")));
        let (f, w) = rendered(Vec::new(), None);
        assert_eq!(f, json!({"messages": []}));
        assert!(w.is_empty());
        let (f, _) = rendered(
            vec![json!({"role": "system", "parts": [{"type": "text", "content": "s"}]})],
            None,
        );
        assert_eq!(f, json!({"system": "s", "messages": []}));
    }
}
