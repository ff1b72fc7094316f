//! Content blocks as OTel GenAI parts: the Converse-style blocks of Strands and of the older
//! event forms, and the loose blocks some producers put in message content.

use serde_json::{json, Value};

/// One Converse content block as an OTel GenAI part. A block that already is a part (has a
/// `type`) is kept; an unknown block `{k: v}` becomes `{type: k, content: v}`.
pub fn block_to_part(block: &Value) -> Value {
    let Value::Object(map) = block else {
        return json!({"type": "text", "content": block_text(block)});
    };
    if map.contains_key("type") {
        return block.clone();
    }
    // Pydantic AI 1.x event content items: {kind: text|thinking|…, text?}.
    if let Some(kind) = map.get("kind").and_then(Value::as_str) {
        let text = map.get("text").cloned();
        return match (kind, text) {
            ("text", Some(t)) => json!({"type": "text", "content": t}),
            ("text", None) => json!({"type": "text"}),
            ("thinking", Some(t)) => json!({"type": "reasoning", "content": t}),
            ("thinking", None) => json!({"type": "reasoning"}),
            _ => {
                let mut part = map.clone();
                part.remove("kind");
                part.insert("type".into(), Value::String(kind.to_string()));
                Value::Object(part)
            }
        };
    }
    if let Some(text) = map.get("text").and_then(Value::as_str) {
        return json!({"type": "text", "content": text});
    }
    if let Some(Value::Object(u)) = map.get("toolUse") {
        return json!({
            "type": "tool_call",
            "id": u.get("toolUseId").cloned().unwrap_or(Value::Null),
            "name": u.get("name").cloned().unwrap_or(Value::Null),
            "arguments": u.get("input").cloned().unwrap_or(Value::Null),
        });
    }
    if let Some(Value::Object(r)) = map.get("toolResult") {
        let mut part = json!({
            "type": "tool_call_response",
            "id": r.get("toolUseId").cloned().unwrap_or(Value::Null),
            "response": r.get("content").cloned().unwrap_or(Value::Null),
        });
        if let Some(status) = r.get("status") {
            part["status"] = status.clone();
        }
        return part;
    }
    if let Some(Value::Object(r)) = map.get("reasoningContent") {
        if let Some(Value::Object(t)) = r.get("reasoningText") {
            let mut part = json!({
                "type": "reasoning",
                "content": t.get("text").cloned().unwrap_or(Value::Null),
            });
            if let Some(sig) = t.get("signature") {
                part["signature"] = sig.clone();
            }
            return part;
        }
    }
    if map.len() == 1 {
        if let Some((k, v)) = map.iter().next() {
            return json!({"type": k, "content": v});
        }
    }
    json!({"type": "generic", "content": block})
}

fn block_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}
