//! OpenAI-shaped content, as OpenInference and OpenLLMetry record it, mapped onto canonical OTel
//! GenAI messages: Chat Completions messages (`{role, content, tool_calls, tool_call_id}`),
//! Responses input/output items (`message`, `function_call`, `function_call_output`, `reasoning`),
//! and the response bodies around them (`choices[]`, `output[]`).
//!
//! Consecutive assistant turns are merged (a Responses history gives each parallel call its own
//! item) and so are consecutive tool results, so a history reads as one model turn per response.

use serde_json::{json, Map, Value};

/// A history mapped onto canonical messages, with the system instructions taken out.
#[derive(Debug, Default, PartialEq)]
pub struct Mapped {
    /// Canonical messages (`{role, parts}`).
    pub messages: Vec<Value>,
    /// Leading `system` / `developer` messages, as parts.
    pub system: Vec<Value>,
}

/// Maps a list of Chat Completions messages or Responses items (they may mix).
pub fn map_history(items: &[Value]) -> Mapped {
    let mut out = Mapped::default();
    // Whether the last message holds only tool results (kept, not rescanned per merge).
    let mut last_only_results = false;
    for item in items {
        let Some(message) = map_item(item) else {
            continue;
        };
        let role = message["role"].as_str().unwrap_or("").to_string();
        if (role == "system" || role == "developer") && out.messages.is_empty() {
            if let Some(parts) = message["parts"].as_array() {
                out.system.extend(parts.iter().cloned());
            }
            continue;
        }
        push_merged(&mut out.messages, message, &mut last_only_results);
    }
    out
}

/// Maps a response body: a Chat Completion (`choices[].message`), a Responses response
/// (`output[]`), a list of messages or items, or one message.
pub fn map_response(body: &Value) -> Mapped {
    if let Some(choices) = body.get("choices").and_then(Value::as_array) {
        let messages: Vec<Value> = choices
            .iter()
            .take(1)
            .filter_map(|c| c.get("message").cloned())
            .collect();
        return map_history(&messages);
    }
    if let Some(output) = body.get("output").and_then(Value::as_array) {
        return map_history(output);
    }
    match body {
        Value::Array(items) => map_history(items),
        Value::Object(_) => map_history(std::slice::from_ref(body)),
        _ => Mapped::default(),
    }
}

/// The instructions a Responses body echoes (`instructions`: text or input items), as parts.
pub fn response_instructions(body: &Value) -> Option<Vec<Value>> {
    match body.get("instructions")? {
        Value::String(s) if !s.is_empty() => Some(vec![json!({"type": "text", "content": s})]),
        Value::Array(items) => {
            let mapped = map_history(items);
            let mut parts = mapped.system;
            for m in mapped.messages {
                parts.extend(m["parts"].as_array().cloned().unwrap_or_default());
            }
            (!parts.is_empty()).then_some(parts)
        }
        _ => None,
    }
}

/// Appends `message`, merged into the last one when both are assistant turns or both hold
/// only tool results. `last_only_results` tells whether the last message holds only tool
/// results, and is kept up to date, so a long run of merges stays linear.
fn push_merged(messages: &mut Vec<Value>, message: Value, last_only_results: &mut bool) {
    let only_results = |m: &Value| {
        m["parts"].as_array().is_some_and(|p| {
            !p.is_empty()
                && p.iter()
                    .all(|p| p["type"].as_str() == Some("tool_call_response"))
        })
    };
    let role = message["role"].as_str().unwrap_or("");
    let message_only_results = only_results(&message);
    if let Some(last) = messages.last_mut() {
        let same = last["role"].as_str() == Some(role);
        let mergeable =
            same && (role == "assistant" || (*last_only_results && message_only_results));
        if mergeable {
            if let (Some(into), Some(from)) =
                (last["parts"].as_array_mut(), message["parts"].as_array())
            {
                into.extend(from.iter().cloned());
                *last_only_results = *last_only_results && message_only_results;
                return;
            }
        }
    }
    *last_only_results = message_only_results;
    messages.push(message);
}

/// Maps one Chat Completions message or Responses item; `None` for items that carry nothing.
fn map_item(item: &Value) -> Option<Value> {
    let obj = item.as_object()?;
    let kind = obj.get("type").and_then(Value::as_str);
    match kind {
        Some("function_call") | Some("custom_tool_call") => {
            return Some(json!({"role": "assistant", "parts": [json!({
                "type": "tool_call",
                "id": text_of(obj.get("call_id").or_else(|| obj.get("id"))),
                "name": text_of(obj.get("name")),
                "arguments": arguments(obj.get("arguments").or_else(|| obj.get("input"))),
            })]}))
        }
        Some("function_call_output") | Some("custom_tool_call_output") => {
            return Some(json!({"role": "tool", "parts": [json!({
                "type": "tool_call_response",
                "id": text_of(obj.get("call_id")),
                "response": output_value(obj.get("output")),
            })]}))
        }
        Some("reasoning") => {
            let text: Vec<String> = obj
                .get("summary")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|s| s.get("text").and_then(Value::as_str).map(str::to_string))
                .collect();
            return Some(json!({"role": "assistant", "parts": [json!({
                "type": "reasoning", "content": text.join("\n")
            })]}));
        }
        Some("message") | None => {}
        // Anything else (web search calls, images, ...) survives untouched as a generic part.
        Some(other) => {
            let mut part = obj.clone();
            part.insert("type".into(), Value::String(other.to_string()));
            let role = obj
                .get("role")
                .and_then(Value::as_str)
                .unwrap_or("assistant");
            return Some(json!({"role": role, "parts": [Value::Object(part)]}));
        }
    }
    let role = obj.get("role").and_then(Value::as_str)?.to_string();
    if role == "tool" {
        return Some(json!({"role": "tool", "parts": [json!({
            "type": "tool_call_response",
            "id": text_of(obj.get("tool_call_id")),
            "response": output_value(obj.get("content")),
        })]}));
    }
    let mut parts = content_parts(obj.get("content"));
    for call in obj
        .get("tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let function = call.get("function").unwrap_or(call);
        parts.push(json!({
            "type": "tool_call",
            "id": text_of(call.get("id")),
            "name": text_of(function.get("name")),
            "arguments": arguments(function.get("arguments")),
        }));
    }
    let mut message = Map::new();
    message.insert("role".into(), Value::String(role));
    message.insert("parts".into(), Value::Array(parts));
    if let Some(name) = obj.get("name").and_then(Value::as_str) {
        message.insert("name".into(), Value::String(name.to_string()));
    }
    Some(Value::Object(message))
}

/// Content as parts: a string is one text part; a list of content blocks keeps text, images and
/// files, and any other block untouched.
pub fn content_parts(content: Option<&Value>) -> Vec<Value> {
    match content {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) if s.is_empty() => Vec::new(),
        Some(Value::String(s)) => vec![json!({"type": "text", "content": s})],
        Some(Value::Array(blocks)) => blocks.iter().map(block_part).collect(),
        Some(other) => vec![json!({"type": "text", "content": other.to_string()})],
    }
}

fn block_part(block: &Value) -> Value {
    let kind = block.get("type").and_then(Value::as_str).unwrap_or("");
    match kind {
        "text" | "input_text" | "output_text" => {
            json!({"type": "text", "content": text_of(block.get("text"))})
        }
        "refusal" => json!({"type": "text", "content": text_of(block.get("refusal"))}),
        "image_url" => {
            let url = block
                .get("image_url")
                .map(|u| u.get("url").unwrap_or(u))
                .map(|u| text_of(Some(u)))
                .unwrap_or_default();
            json!({"type": "uri", "modality": "image", "uri": url})
        }
        "input_image" => {
            json!({"type": "uri", "modality": "image", "uri": text_of(block.get("image_url"))})
        }
        _ if block.is_string() => json!({"type": "text", "content": text_of(Some(block))}),
        _ => block.clone(),
    }
}

fn text_of(value: Option<&Value>) -> String {
    match value {
        Some(Value::String(s)) => s.clone(),
        None | Some(Value::Null) => String::new(),
        Some(other) => other.to_string(),
    }
}

/// Tool-call arguments: JSON text is parsed into an object when it is one, else kept as text.
pub fn arguments(value: Option<&Value>) -> Value {
    match value {
        Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
            Ok(v @ Value::Object(_)) => v,
            _ => Value::String(s.clone()),
        },
        Some(v) => v.clone(),
        None => json!({}),
    }
}

/// A tool result: text stays text, a list of content blocks is joined when it is all text.
fn output_value(value: Option<&Value>) -> Value {
    match value {
        Some(Value::Array(blocks)) => {
            let texts: Option<Vec<String>> = blocks
                .iter()
                .map(|b| match b {
                    Value::String(s) => Some(s.clone()),
                    _ => b.get("text").and_then(Value::as_str).map(str::to_string),
                })
                .collect();
            match texts {
                Some(t) => Value::String(t.join("")),
                None => Value::Array(blocks.clone()),
            }
        }
        Some(v) => v.clone(),
        None => Value::Null,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responses_items_merge_parallel_calls_and_results() {
        let items = json!([
            {"role": "system", "content": "Be brief."},
            {"content": "2+3?", "role": "user"},
            {"type": "function_call", "call_id": "c1", "name": "add", "arguments": "{\"a\":2}"},
            {"type": "function_call", "call_id": "c2", "name": "fail", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "5"},
            {"type": "function_call_output", "call_id": "c2", "output": "boom"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "5"}]}
        ]);
        let m = map_history(items.as_array().unwrap());
        assert_eq!(
            m.system,
            vec![json!({"type": "text", "content": "Be brief."})]
        );
        assert_eq!(m.messages.len(), 4);
        assert_eq!(m.messages[1]["parts"][1]["id"], "c2");
        assert_eq!(m.messages[1]["parts"][0]["arguments"]["a"], 2);
        assert_eq!(m.messages[2]["parts"][1]["response"], "boom");
        assert_eq!(m.messages[3]["parts"][0]["content"], "5");
    }

    #[test]
    fn chat_messages_and_completions() {
        let body = json!({"choices": [{"message": {"role": "assistant", "content": null,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{}"}}]}}]});
        let m = map_response(&body);
        assert_eq!(m.messages[0]["parts"][0]["type"], "tool_call");
        let tool = json!([{"role": "tool", "tool_call_id": "c1", "content": "5"}]);
        let m = map_history(tool.as_array().unwrap());
        assert_eq!(m.messages[0]["parts"][0]["response"], "5");
    }
}
