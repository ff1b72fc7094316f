//! Strands Agents messages (Bedrock Converse content blocks), for `Agent(messages=…,
//! system_prompt=…)`.
//!
//! Text, tool calls, tool results (with their `status`), and reasoning (with its signature) map
//! onto their Converse blocks; a part of any other type `t` with `content` becomes the block
//! `{t: content}`, so blocks stepline does not know survive the round trip. Tool results of role
//! `tool` go into a user message, as Converse wants.

use serde_json::Value;

use super::json_writer;
use super::parts::PartFields;
use super::writer::{self, Commas, Key, Obj};
use super::{Fields, History, Out};
use crate::key;

/// `messages` (Converse messages, written in place: [`super::writer`]) and `system_prompt` (null
/// when there are no instructions).
pub fn render(history: &History, mut buf: Vec<u8>) -> (Fields<'_>, Vec<String>) {
    let mut warnings = Vec::new();
    writer::room(&mut buf, history.messages.len(), 320);
    buf.push(b'[');
    let mut messages = Commas::default();
    // The message being written (its content array open): its role and the commas between its
    // blocks.
    let mut open: Option<(&'static str, Commas)> = None;
    for (index, message) in history.messages.iter().enumerate() {
        let role = match message.get("role").and_then(Value::as_str) {
            Some("assistant") => "assistant",
            _ => "user",
        };
        // Converse alternates roles: consecutive messages of one role become one message.
        let blocks = match &mut open {
            Some((last, blocks)) if *last == role => blocks,
            _ => {
                if open.is_some() {
                    buf.extend_from_slice(b"]}");
                }
                messages.next(&mut buf);
                let mut m = Obj::open(&mut buf);
                m.str(key!("role"), role);
                m.key(key!("content")).push(b'[');
                &mut open.insert((role, Commas::default())).1
            }
        };
        let parts = message.get("parts").and_then(Value::as_array);
        for part in parts.into_iter().flatten() {
            if !write_block(&mut buf, blocks, part) {
                warnings.push(format!(
                    "message {index}: part of type {} has no Converse form; left out",
                    part.get("type").unwrap_or(&Value::Null)
                ));
            }
        }
    }
    if open.is_some() {
        buf.extend_from_slice(b"]}");
    }
    buf.push(b']');
    (
        vec![
            ("messages", Out::Written(buf)),
            (
                "system_prompt",
                system_prompt(history.system_instructions.as_ref()).into(),
            ),
        ],
        warnings,
    )
}

fn system_prompt(instructions: Option<&Value>) -> Option<String> {
    let texts: Vec<&str> = instructions?
        .as_array()?
        .iter()
        .filter_map(|p| p.get("content").and_then(Value::as_str))
        .collect();
    (!texts.is_empty()).then(|| texts.join("\n\n"))
}

/// Writes the Converse block of one part to the end of `buf` (after a comma when `blocks`
/// says one came before). False, with nothing written, for a part without a type, or of an
/// unknown type without content.
fn write_block(buf: &mut Vec<u8>, blocks: &mut Commas, part: &Value) -> bool {
    // The fields read in one pass over the part's keys (a lookup per field searches them each
    // time); `status` and `signature` are looked up by the blocks that have them.
    let f = PartFields::of(part);
    let kind = match f.kind {
        // No type, a type that is not a string, or an empty one (a block of its own).
        "" => match part.get("type").and_then(Value::as_str) {
            Some(kind) => kind,
            None => return false,
        },
        kind => kind,
    };
    match kind {
        "text" => {
            blocks.next(buf);
            let mut b = Obj::open(buf);
            raw_or_null(&mut b, key!("text"), f.content);
            b.close();
        }
        "tool_call" => {
            blocks.next(buf);
            let mut b = Obj::open(buf);
            let mut t = Obj::open(b.key(key!("toolUse")));
            raw_or_null(&mut t, key!("toolUseId"), f.id);
            raw_or_null(&mut t, key!("name"), f.name);
            let input = t.key(key!("input"));
            match f.arguments {
                Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
                    Ok(v) => json_writer::write_value(input, &v),
                    Err(_) => json_writer::write_str(input, s),
                },
                None | Some(Value::Null) => input.extend_from_slice(b"{}"),
                Some(v) => json_writer::write_value(input, v),
            }
            t.close();
            b.close();
        }
        "tool_call_response" => {
            blocks.next(buf);
            let mut b = Obj::open(buf);
            let mut r = Obj::open(b.key(key!("toolResult")));
            raw_or_null(&mut r, key!("toolUseId"), f.id);
            match part.get("status") {
                Some(status) => r.value(key!("status"), status),
                None => r.str(key!("status"), "success"),
            }
            let content = r.key(key!("content"));
            // `response`, else `result`.
            match f.result {
                Some(items @ Value::Array(list)) if list.iter().all(Value::is_object) => {
                    json_writer::write_value(content, items);
                }
                Some(Value::String(s)) => {
                    content.push(b'[');
                    let mut o = Obj::open(content);
                    o.str(key!("text"), s);
                    o.close();
                    content.push(b']');
                }
                None | Some(Value::Null) => content.extend_from_slice(b"[]"),
                Some(other) => {
                    content.push(b'[');
                    let mut o = Obj::open(content);
                    o.value(key!("json"), other);
                    o.close();
                    content.push(b']');
                }
            }
            r.close();
            b.close();
        }
        "reasoning" => {
            blocks.next(buf);
            let mut b = Obj::open(buf);
            let mut c = Obj::open(b.key(key!("reasoningContent")));
            let mut t = Obj::open(c.key(key!("reasoningText")));
            raw_or_null(&mut t, key!("text"), f.content);
            if let Some(sig) = part.get("signature") {
                t.value(key!("signature"), sig);
            }
            t.close();
            c.close();
            b.close();
        }
        other => {
            let Some(content) = f.content else {
                return false;
            };
            blocks.next(buf);
            buf.push(b'{');
            json_writer::write_str(buf, other);
            buf.push(b':');
            json_writer::write_value(buf, content);
            buf.push(b'}');
        }
    }
    true
}

/// A field holding a field of the part as it is (null when the part has none).
fn raw_or_null<const N: usize>(obj: &mut Obj<'_>, key: Key<N>, value: Option<&Value>) {
    match value {
        Some(v) => obj.value(key, v),
        None => obj.null(key),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::continuation::tests::{rendered_as_recorded, roles};
    use serde_json::json;

    /// The Converse block of one part, as [`write_block`] writes it (none for a part without a
    /// type, or of an unknown type without content).
    fn part_to_block(part: &Value) -> Option<Out<'_>> {
        let mut buf = Vec::new();
        write_block(&mut buf, &mut Commas::default(), part).then_some(Out::Written(buf))
    }

    #[test]
    fn parts_round_trip_to_converse_blocks() {
        let cases = [
            json!({"type":"text","content":"hi"}),
            json!({"type":"tool_call","id":"t","name":"f","arguments":"{\"a\":1}"}),
            json!({"type":"tool_call_response","id":"t","response":[{"text":"5"}],"status":"error"}),
            json!({"type":"reasoning","content":"hm","signature":"s"}),
            json!({"type":"citationsContent","content":{"x":1}}),
        ];
        let blocks: Vec<Value> = cases
            .iter()
            .filter_map(part_to_block)
            .map(|b| b.to_value())
            .collect();
        assert_eq!(blocks[0], json!({"text":"hi"}));
        assert_eq!(blocks[1]["toolUse"]["input"]["a"], 1);
        assert_eq!(blocks[2]["toolResult"]["status"], "error");
        assert_eq!(
            blocks[3]["reasoningContent"]["reasoningText"]["signature"],
            "s"
        );
        assert_eq!(blocks[4], json!({"citationsContent":{"x":1}}));
        // And back: the interpreter's block mapping gives the same parts.
        for (part, block) in cases.iter().zip(&blocks).skip(2) {
            let back = crate::interpreter::block_to_part(block);
            assert_eq!(&back, part);
        }
    }

    #[test]
    fn every_path_renders_to_the_recorded_bytes() {
        // Every kind of part and field shape; the bytes and warnings are checked against those
        // recorded from the renderer that built a tree before writing (`rendered_as_recorded`).
        let messages = vec![
            json!({"role": "user", "parts": [{"type": "text", "content": "a\"b\n"}]}),
            json!({"role": "system", "parts": [{"type": "text"}, {"content": 1}, {"type": 3}]}),
            json!({"role": "assistant", "parts": [
                {"type": "reasoning", "content": "hm"},
                {"type": "reasoning", "content": "s", "signature": null},
                {"type": "tool_call", "id": "a", "name": "f", "arguments": "{\"z\": 1, \"a\": [2]}"},
                {"type": "tool_call", "id": "b", "arguments": "not json"},
                {"type": "tool_call", "id": "c", "arguments": null},
                {"type": "tool_call", "id": 4, "name": null},
                {"type": "tool_call", "arguments": 5},
                {"type": "weird\"kind", "content": {"x": [1, "y"]}},
                {"type": "no_content"},
                {"type": "", "content": "empty type"},
                {"type": ""},
                "not an object"]}),
            json!({"role": "assistant"}),
            json!({"role": "assistant", "parts": []}),
            json!({"role": "tool", "parts": [
                {"type": "tool_call_response", "id": "a", "response": [{"text": "5"}]},
                {"type": "tool_call_response", "id": "b", "result": [{"text": "5"}, 6]},
                {"type": "tool_call_response", "id": "c", "result": "five", "status": "error"},
                {"type": "tool_call_response", "response": null, "result": "r", "status": null},
                {"type": "tool_call_response", "result": {"k": true}},
                {"type": "tool_call_response", "result": 7}]}),
            json!({"parts": [{"type": "text", "content": ["not", "text"]}]}),
            json!({"role": "assistant", "parts": "not a list"}),
        ];
        for instructions in [None, Some("be brief")] {
            let h = crate::continuation::tests::history(messages.clone(), instructions);
            let (value, warnings) = rendered_as_recorded(crate::continuation::Format::Strands, &h);
            assert_eq!(warnings.len(), 5, "{warnings:?}");
            let roles = roles(&value["messages"]);
            assert_eq!(roles, ["user", "assistant", "user", "assistant"]);
            assert_eq!(value["system_prompt"].as_str(), instructions);
        }
        let h = crate::continuation::tests::history(Vec::new(), None);
        let (fields, _) = crate::continuation::render(crate::continuation::Format::Strands, &h);
        assert_eq!(Out::Object(fields).to_value()["messages"], json!([]));
    }
}
