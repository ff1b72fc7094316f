//! Strands Agents messages (Bedrock Converse content blocks), for `Agent(messages=…,
//! system_prompt=…)`.
//!
//! Text, tool calls, tool results (with their `status`), and reasoning (with its signature) map
//! onto their Converse blocks; a part of any other type `t` with `content` becomes the block
//! `{t: content}`, so blocks stepline does not know survive the round trip. Tool results of role
//! `tool` go into a user message, as Converse wants.

use serde_json::{json, Map, Value};

use super::History;

/// Renders `messages` (Converse messages) and `system_prompt` (text, or absent).
pub fn render(history: &History) -> (Map<String, Value>, Vec<String>) {
    let mut warnings = Vec::new();
    let mut messages: Vec<Value> = Vec::new();
    for (index, message) in history.messages.iter().enumerate() {
        let role = match message.get("role").and_then(Value::as_str) {
            Some("assistant") => "assistant",
            _ => "user",
        };
        let blocks: Vec<Value> = message
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
            })
            .collect();
        // Converse alternates roles: consecutive messages of one role become one message.
        match messages.last_mut() {
            Some(last) if last["role"] == role => {
                if let Some(content) = last["content"].as_array_mut() {
                    content.extend(blocks);
                }
            }
            _ => messages.push(json!({"role": role, "content": blocks})),
        }
    }
    let mut out = Map::new();
    out.insert("messages".into(), Value::Array(messages));
    out.insert(
        "system_prompt".into(),
        system_prompt(history.system_instructions.as_ref()).map_or(Value::Null, Value::String),
    );
    (out, warnings)
}

fn system_prompt(instructions: Option<&Value>) -> Option<String> {
    let texts: Vec<&str> = instructions?
        .as_array()?
        .iter()
        .filter_map(|p| p.get("content").and_then(Value::as_str))
        .collect();
    (!texts.is_empty()).then(|| texts.join("\n\n"))
}

fn part_to_block(part: &Value) -> Option<Value> {
    let kind = part.get("type").and_then(Value::as_str)?;
    let field = |k: &str| part.get(k).cloned().unwrap_or(Value::Null);
    Some(match kind {
        "text" => json!({"text": field("content")}),
        "tool_call" => {
            let input = match field("arguments") {
                Value::String(s) => serde_json::from_str(&s).unwrap_or(Value::String(s)),
                Value::Null => json!({}),
                v => v,
            };
            json!({"toolUse": {"toolUseId": field("id"), "name": field("name"), "input": input}})
        }
        "tool_call_response" => {
            let response = part
                .get("response")
                .or_else(|| part.get("result"))
                .cloned()
                .unwrap_or(Value::Null);
            let content = match response {
                Value::Array(items) if items.iter().all(Value::is_object) => Value::Array(items),
                Value::String(s) => json!([{"text": s}]),
                Value::Null => json!([]),
                other => json!([{"json": other}]),
            };
            let status = part
                .get("status")
                .cloned()
                .unwrap_or_else(|| json!("success"));
            json!({"toolResult": {"toolUseId": field("id"), "status": status, "content": content}})
        }
        "reasoning" => {
            let mut text = json!({"text": field("content")});
            if let Some(sig) = part.get("signature") {
                text["signature"] = sig.clone();
            }
            json!({"reasoningContent": {"reasoningText": text}})
        }
        other => {
            let content = part.get("content")?;
            json!({ other: content })
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
        let blocks: Vec<Value> = cases.iter().filter_map(part_to_block).collect();
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
