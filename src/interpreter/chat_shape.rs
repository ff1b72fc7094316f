//! Messages in the OpenAI Chat Completions shape found where the OTel GenAI convention expects
//! its parts format: AG2 writes `gen_ai.input.messages` / `gen_ai.output.messages` as Chat
//! message dicts (`{role, content, tool_calls: [{id, type, function: {name, arguments}}]}`,
//! `{role: "tool", tool_call_id, content}`). They are recognised by their shape and mapped onto
//! GenAI messages (`{role, parts}`), so the rest of the interpreter sees one format.

use serde_json::{json, Map, Value};

use super::blocks::block_to_part;

/// Whether `item` is a Chat Completions message rather than a GenAI one: a role, no `parts`,
/// and at least one of `content`, `tool_calls`, `tool_call_id`.
pub fn is_chat_message(item: &Value) -> bool {
    let Value::Object(m) = item else {
        return false;
    };
    m.get("role").is_some_and(Value::is_string)
        && !m.contains_key("parts")
        && (m.contains_key("content")
            || m.contains_key("tool_calls")
            || m.contains_key("tool_call_id"))
}

/// A Chat Completions message as a GenAI message. Only call with [`is_chat_message`] true.
pub fn to_genai(item: &Value) -> Value {
    let empty = Map::new();
    let m = item.as_object().unwrap_or(&empty);
    let role = m.get("role").and_then(Value::as_str).unwrap_or("user");
    let mut parts = Vec::new();
    if role == "tool" || role == "function" {
        let id = m
            .get("tool_call_id")
            .or_else(|| m.get("name"))
            .cloned()
            .unwrap_or(Value::Null);
        let response = m.get("content").map(loose).unwrap_or(Value::Null);
        parts.push(json!({"type": "tool_call_response", "id": id, "response": response}));
        return json!({"role": "tool", "parts": parts});
    }
    match m.get("content") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) if s.is_empty() => {}
        Some(Value::String(s)) => parts.push(json!({"type": "text", "content": s})),
        Some(Value::Array(items)) => parts.extend(items.iter().map(content_item)),
        Some(other) => parts.push(block_to_part(other)),
    }
    if let Some(Value::Array(calls)) = m.get("tool_calls") {
        parts.extend(calls.iter().map(|c| {
            let f = c.get("function");
            json!({
                "type": "tool_call",
                "id": c.get("id").cloned().unwrap_or(Value::Null),
                "name": f.and_then(|f| f.get("name")).cloned().unwrap_or(Value::Null),
                "arguments": f.and_then(|f| f.get("arguments")).map(loose).unwrap_or(Value::Null),
            })
        }));
    }
    let mut out = json!({"role": role, "parts": parts});
    if let Some(reason) = m.get("finish_reason").filter(|r| r.is_string()) {
        out["finish_reason"] = reason.clone();
    }
    out
}

/// One item of a Chat `content` array: `{type: "text", text}` becomes a text part; other typed
/// items (images, audio) are kept as parts of their own type.
fn content_item(item: &Value) -> Value {
    match (
        item.get("type").and_then(Value::as_str),
        item.get("text").and_then(Value::as_str),
    ) {
        (Some("text"), Some(text)) => json!({"type": "text", "content": text}),
        _ => block_to_part(item),
    }
}

/// A string holding a JSON object or array, parsed; anything else as it is.
fn loose(value: &Value) -> Value {
    if let Value::String(s) = value {
        let t = s.trim_start();
        if t.starts_with('{') || t.starts_with('[') {
            if let Ok(v) = serde_json::from_str(s) {
                return v;
            }
        }
    }
    value.clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chat_messages_become_genai_messages() {
        let assistant = json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": "{\"a\":1}"}}]});
        assert!(is_chat_message(&assistant));
        assert_eq!(
            to_genai(&assistant),
            json!({"role": "assistant", "parts": [
                {"type": "tool_call", "id": "call_1", "name": "add", "arguments": {"a": 1}}]})
        );
        let tool = json!({"role": "tool", "tool_call_id": "call_1", "content": "2"});
        assert_eq!(
            to_genai(&tool),
            json!({"role": "tool", "parts": [
                {"type": "tool_call_response", "id": "call_1", "response": "2"}]})
        );
        let user = json!({"role": "user", "content": [{"type": "text", "text": "hi"}]});
        assert_eq!(
            to_genai(&user),
            json!({"role": "user", "parts": [{"type": "text", "content": "hi"}]})
        );
        let genai = json!({"role": "user", "parts": []});
        assert!(!is_chat_message(&genai));
        assert!(!is_chat_message(&json!({"role": "user"})));
    }
}
