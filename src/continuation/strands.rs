//! Strands Agents messages (Bedrock Converse content blocks), for `Agent(messages=…,
//! system_prompt=…)`.
//!
//! Text, tool calls, tool results (with their `status`), and reasoning (with its signature) map
//! onto their Converse blocks; a part of any other type `t` with `content` becomes the block
//! `{t: content}`, so blocks stepline does not know survive the round trip. Tool results of role
//! `tool` go into a user message, as Converse wants.

use serde_json::{json, Value};

use super::{Fields, History, Out};
use crate::obj;

/// `messages` (Converse messages) and `system_prompt` (null when there are no instructions).
pub fn render(history: &History) -> (Fields<'_>, Vec<String>) {
    let mut warnings = Vec::new();
    let mut messages: Vec<(&'static str, Vec<Out>)> = Vec::new();
    for (index, message) in history.messages.iter().enumerate() {
        let role = match message.get("role").and_then(Value::as_str) {
            Some("assistant") => "assistant",
            _ => "user",
        };
        let blocks = message
            .get("parts")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|part| {
                let block = part_to_block(part);
                if block.is_none() {
                    warnings.push(format!(
                        "message {index}: part of type {} has no Converse form; left out",
                        part.get("type").unwrap_or(&Value::Null)
                    ));
                }
                block
            });
        // Converse alternates roles: consecutive messages of one role become one message.
        match messages.last_mut() {
            Some((last, content)) if *last == role => content.extend(blocks),
            _ => messages.push((role, blocks.collect())),
        }
    }
    let messages = messages
        .into_iter()
        .map(|(role, content)| obj! {"role" => role, "content" => content})
        .collect();
    (
        vec![
            ("messages", Out::Array(messages)),
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

/// The Converse block of one part (none for a part without a type, or of an unknown type
/// without content).
fn part_to_block(part: &Value) -> Option<Out<'_>> {
    let kind = part.get("type").and_then(Value::as_str)?;
    let field = |k: &str| part.get(k).map_or(Out::Null, Out::Raw);
    Some(match kind {
        "text" => obj! {"text" => field("content")},
        "tool_call" => {
            let input = match part.get("arguments") {
                Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
                    Ok(v) => Out::Value(v),
                    Err(_) => Out::Str(s),
                },
                None | Some(Value::Null) => Out::Object(Vec::new()),
                Some(v) => Out::Raw(v),
            };
            obj! {"toolUse" => obj! {
                "toolUseId" => field("id"),
                "name" => field("name"),
                "input" => input,
            }}
        }
        "tool_call_response" => {
            let response = part.get("response").or_else(|| part.get("result"));
            let content = match response {
                Some(items @ Value::Array(list)) if list.iter().all(Value::is_object) => {
                    Out::Raw(items)
                }
                Some(Value::String(s)) => Out::Array(vec![obj! {"text" => s.as_str()}]),
                None | Some(Value::Null) => Out::Array(Vec::new()),
                Some(other) => Out::Array(vec![obj! {"json" => other}]),
            };
            let status = part.get("status").map_or(Out::Str("success"), Out::Raw);
            obj! {"toolResult" => obj! {
                "toolUseId" => field("id"),
                "status" => status,
                "content" => content,
            }}
        }
        "reasoning" => {
            let mut text = obj! {"text" => field("content")};
            if let Some(sig) = part.get("signature") {
                text.set("signature", sig);
            }
            obj! {"reasoningContent" => obj! {"reasoningText" => text}}
        }
        other => {
            let content = part.get("content")?;
            Out::Value(json!({ other: content }))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
