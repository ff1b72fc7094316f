//! The legacy OTel GenAI events (`gen_ai.system.message`, `gen_ai.user.message`,
//! `gen_ai.assistant.message`, `gen_ai.tool.message`, `gen_ai.choice`) mapped onto OTel GenAI
//! messages. The event body is given as a JSON object, so the same mapping serves span events and
//! OTLP log records.
//!
//! Content is either plain text, OpenAI-style fields (`content`, `tool_calls`, `id`), or a JSON
//! list of Bedrock Converse content blocks (Strands Agents): `text`, `toolUse`, `toolResult`,
//! `reasoningContent`; other blocks become a part of the block's own type and survive untouched.

use serde_json::{json, Map, Value};

use super::blocks::block_to_part;

/// Where a legacy event's content goes.
#[derive(Debug, Clone, PartialEq)]
pub enum Slot {
    /// System instructions (array of parts).
    System(Value),
    /// A message of the model request's input.
    Input(Value),
    /// A message of the model request's output.
    Output(Value),
    /// A tool span's arguments (and the call id, when given).
    ToolArguments(Value, Option<String>),
    /// A tool span's result.
    ToolResult(Value),
}

/// The event that carries the latest convention's content when a producer writes it as an
/// event rather than as span attributes: a span event (Strands with
/// `gen_ai_latest_experimental`) or an OTLP log record (Google ADK with `EVENT_ONLY` capture),
/// with `gen_ai.input.messages`, `gen_ai.output.messages` and `gen_ai.system_instructions` as
/// attributes (structured values or JSON strings).
pub const DETAILS_EVENT: &str = "gen_ai.client.inference.operation.details";

/// The content of one [`DETAILS_EVENT`], as GenAI messages (Chat-shaped ones mapped).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Details {
    /// `gen_ai.input.messages`.
    pub input: Vec<Value>,
    /// `gen_ai.output.messages`.
    pub output: Vec<Value>,
    /// `gen_ai.system_instructions`, as an array of parts.
    pub system: Option<Value>,
}

/// Whether a log record of this event name carries GenAI content stepline reads.
pub fn is_log_event(name: &str) -> bool {
    name == DETAILS_EVENT || is_legacy_event(name)
}

/// Maps the body of a [`DETAILS_EVENT`]. `Err` says why its messages could not be read.
pub fn map_details(body: &Map<String, Value>) -> Result<Details, String> {
    let messages = |key: &str| -> Result<Vec<Value>, String> {
        let Some(value) = parse_if_json(body.get(key))? else {
            return Ok(Vec::new());
        };
        let Value::Array(items) = value else {
            return Err(format!("{key} is not an array of messages"));
        };
        items
            .into_iter()
            .map(|item| {
                let item = if super::chat_shape::is_chat_message(&item) {
                    super::chat_shape::to_genai(&item)
                } else {
                    item
                };
                let ok = item.get("role").is_some_and(Value::is_string)
                    && item.get("parts").is_some_and(Value::is_array);
                ok.then_some(item)
                    .ok_or_else(|| format!("{key} holds a message without role and parts"))
            })
            .collect()
    };
    let system = match parse_if_json(body.get("gen_ai.system_instructions"))? {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.is_empty() => None,
        Some(Value::String(s)) => Some(json!([{"type": "text", "content": s}])),
        Some(Value::Array(parts)) if parts.is_empty() => None,
        Some(v @ Value::Array(_)) => Some(v),
        Some(other) => Some(Value::Array(vec![other])),
    };
    Ok(Details {
        input: messages("gen_ai.input.messages")?,
        output: messages("gen_ai.output.messages")?,
        system,
    })
}

/// The legacy event names this module understands.
pub fn is_legacy_event(name: &str) -> bool {
    matches!(
        name,
        "gen_ai.system.message"
            | "gen_ai.user.message"
            | "gen_ai.assistant.message"
            | "gen_ai.tool.message"
            | "gen_ai.choice"
    )
}

/// Maps one event. `on_tool_span` tells whether it belongs to a tool-execution span (where
/// `gen_ai.tool.message` holds the arguments and `gen_ai.choice` the result). `Err` says why
/// the content could not be read (e.g. JSON cut by a length limit).
pub fn map_event(
    name: &str,
    body: &Map<String, Value>,
    on_tool_span: bool,
) -> Result<Option<Slot>, String> {
    if !on_tool_span {
        check_content(name, body)?;
    }
    let id = body.get("id").and_then(Value::as_str).map(str::to_string);
    Ok(Some(match name {
        "gen_ai.system.message" => Slot::System(Value::Array(content_parts(body.get("content"))?)),
        "gen_ai.user.message" => Slot::Input(json!({
            "role": "user",
            "parts": content_parts(body.get("content"))?,
        })),
        "gen_ai.assistant.message" => {
            let mut parts = content_parts(body.get("content"))?;
            parts.extend(openai_tool_calls(body.get("tool_calls"))?);
            Slot::Input(json!({"role": "assistant", "parts": parts}))
        }
        "gen_ai.tool.message" if on_tool_span => {
            Slot::ToolArguments(loose(body.get("content"))?, id)
        }
        "gen_ai.tool.message" => {
            let parts = content_parts(body.get("content"))?;
            if parts
                .iter()
                .any(|p| p.get("type").and_then(Value::as_str) == Some("tool_call_response"))
            {
                // Converse puts tool results in a user message.
                Slot::Input(json!({"role": "user", "parts": parts}))
            } else {
                let response = loose(body.get("content"))?;
                let mut part = json!({"type": "tool_call_response", "response": response});
                if let Some(id) = id {
                    part["id"] = Value::String(id);
                }
                Slot::Input(json!({"role": "tool", "parts": [part]}))
            }
        }
        "gen_ai.choice" if on_tool_span => Slot::ToolResult(loose(body.get("message"))?),
        "gen_ai.choice" => {
            let message = parse_if_json(body.get("message"))?;
            let (role, parts) = match &message {
                // OpenAI-style message object: {role?, content?, tool_calls?}.
                Some(Value::Object(m))
                    if m.contains_key("content") || m.contains_key("tool_calls") =>
                {
                    let mut parts = content_parts(m.get("content"))?;
                    parts.extend(openai_tool_calls(m.get("tool_calls"))?);
                    let role = m.get("role").and_then(Value::as_str).unwrap_or("assistant");
                    (role.to_string(), parts)
                }
                other => ("assistant".to_string(), blocks_to_parts(other.as_ref())),
            };
            let mut out = json!({"role": role, "parts": parts});
            if let Some(reason) = body.get("finish_reason").and_then(Value::as_str) {
                out["finish_reason"] = Value::String(reason.to_string());
            }
            Slot::Output(out)
        }
        _ => return Ok(None),
    }))
}

/// The placeholder Strands writes for redacted content.
const REDACTED: &str = "[REDACTED]";

/// Refuses an event whose content was not captured (content capture off, redaction): a history
/// built from it would silently differ from the one the model saw.
fn check_content(name: &str, body: &Map<String, Value>) -> Result<(), String> {
    let off = || format!("{name} carries no content (content capture is off)");
    let redacted = |v: Option<&Value>| v.and_then(Value::as_str) == Some(REDACTED);
    let arguments_missing = |calls: Option<&Value>| {
        calls.and_then(Value::as_array).is_some_and(|calls| {
            calls.iter().any(|c| {
                c.get("function")
                    .is_some_and(|f| f.get("arguments").is_none())
            })
        })
    };
    match name {
        "gen_ai.system.message" | "gen_ai.user.message" | "gen_ai.tool.message"
            if !body.contains_key("content") =>
        {
            return Err(off());
        }
        "gen_ai.assistant.message" => {
            if !body.contains_key("content") && !body.contains_key("tool_calls") {
                return Err(off());
            }
            if arguments_missing(body.get("tool_calls")) {
                return Err(format!(
                    "{name}: tool calls without arguments (content capture is off)"
                ));
            }
        }
        "gen_ai.choice" => match body.get("message") {
            None => return Err(off()),
            Some(Value::Object(m)) => {
                if !m.contains_key("content") && !m.contains_key("tool_calls") {
                    return Err(off());
                }
                if arguments_missing(m.get("tool_calls")) {
                    return Err(format!(
                        "{name}: tool calls without arguments (content capture is off)"
                    ));
                }
            }
            Some(_) => {}
        },
        _ => {}
    }
    // Pydantic AI 1.x keeps only the kind of a content item when content capture is off.
    let kind_only = |v: Option<&Value>| {
        v.and_then(Value::as_array).is_some_and(|items| {
            items.iter().any(|i| {
                matches!(
                    i.get("kind").and_then(Value::as_str),
                    Some("text" | "thinking")
                ) && i.get("text").is_none()
            })
        })
    };
    let message_content = body.get("message").and_then(|m| m.get("content"));
    if kind_only(body.get("content")) || kind_only(message_content) {
        return Err(off());
    }
    if redacted(body.get("content")) || redacted(body.get("message")) {
        return Err(format!("{name}: content is redacted by the producer"));
    }
    Ok(())
}

/// Parses a string that holds a JSON array or object; other values are returned as they are.
fn parse_if_json(value: Option<&Value>) -> Result<Option<Value>, String> {
    match value {
        Some(Value::String(s)) => {
            let t = s.trim_start();
            if t.starts_with('[') || t.starts_with('{') {
                serde_json::from_str(s).map(Some).map_err(|e| {
                    format!("event content is not valid JSON ({e}); it may have been cut by an attribute length limit")
                })
            } else {
                Ok(Some(Value::String(s.clone())))
            }
        }
        Some(v) => Ok(Some(v.clone())),
        None => Ok(None),
    }
}

/// Like [`parse_if_json`], absent becomes `null`.
fn loose(value: Option<&Value>) -> Result<Value, String> {
    Ok(parse_if_json(value)?.unwrap_or(Value::Null))
}

/// The parts of a `content` field: text, or Converse blocks.
fn content_parts(value: Option<&Value>) -> Result<Vec<Value>, String> {
    Ok(blocks_to_parts(parse_if_json(value)?.as_ref()))
}

fn blocks_to_parts(value: Option<&Value>) -> Vec<Value> {
    match value {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) if s.is_empty() => Vec::new(),
        Some(Value::String(s)) => vec![json!({"type": "text", "content": s})],
        Some(Value::Array(blocks)) => blocks.iter().map(block_to_part).collect(),
        Some(other) => vec![block_to_part(other)],
    }
}

/// OpenAI-style `tool_calls: [{id, type, function: {name, arguments}}]` as tool-call parts.
fn openai_tool_calls(value: Option<&Value>) -> Result<Vec<Value>, String> {
    let Some(Value::Array(calls)) = parse_if_json(value)? else {
        return Ok(Vec::new());
    };
    Ok(calls
        .iter()
        .map(|c| {
            let f = c.get("function");
            json!({
                "type": "tool_call",
                "id": c.get("id").cloned().unwrap_or(Value::Null),
                "name": f.and_then(|f| f.get("name")).cloned().unwrap_or(Value::Null),
                "arguments": f.and_then(|f| f.get("arguments")).cloned().unwrap_or(Value::Null),
            })
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => Map::new(),
        }
    }

    #[test]
    fn converse_blocks_become_parts() {
        let content = r#"[{"text":"hi"},{"toolUse":{"toolUseId":"t1","name":"f","input":{"x":1}}},{"reasoningContent":{"reasoningText":{"text":"hmm","signature":"sig"}}},{"citationsContent":{"a":1}}]"#;
        let slot = map_event(
            "gen_ai.assistant.message",
            &body(json!({"content": content})),
            false,
        )
        .unwrap()
        .unwrap();
        let Slot::Input(m) = slot else {
            panic!("{slot:?}")
        };
        assert_eq!(m["parts"][0], json!({"type":"text","content":"hi"}));
        assert_eq!(m["parts"][1]["type"], "tool_call");
        assert_eq!(m["parts"][1]["arguments"]["x"], 1);
        assert_eq!(
            m["parts"][2],
            json!({"type":"reasoning","content":"hmm","signature":"sig"})
        );
        assert_eq!(
            m["parts"][3],
            json!({"type":"citationsContent","content":{"a":1}})
        );
    }

    #[test]
    fn content_off_or_redacted_is_refused_with_a_reason() {
        let off = map_event("gen_ai.user.message", &body(json!({"role": "user"})), false);
        assert!(off.unwrap_err().contains("content capture is off"));
        let no_args =
            json!({"tool_calls": [{"id": "c", "type": "function", "function": {"name": "f"}}]});
        let no_args = map_event("gen_ai.assistant.message", &body(no_args), false);
        assert!(no_args.unwrap_err().contains("without arguments"));
        let choice = json!({"index": 0, "message": {"role": "assistant"}});
        assert!(map_event("gen_ai.choice", &body(choice), false).is_err());
        let redacted = map_event(
            "gen_ai.choice",
            &body(json!({"message": "[REDACTED]"})),
            false,
        );
        assert!(redacted.unwrap_err().contains("redacted"));
        let kinds = json!({"content": [{"kind": "text"}], "role": "user"});
        assert!(map_event("gen_ai.user.message", &body(kinds), false).is_err());
        // On a tool span the arguments may be absent: the call is still recorded.
        assert!(map_event("gen_ai.tool.message", &body(json!({"id": "t"})), true).is_ok());
    }

    #[test]
    fn tool_results_and_choices() {
        let content =
            r#"[{"toolResult":{"toolUseId":"t1","status":"error","content":[{"text":"no"}]}}]"#;
        let Slot::Input(m) = map_event(
            "gen_ai.tool.message",
            &body(json!({"content": content})),
            false,
        )
        .unwrap()
        .unwrap() else {
            panic!()
        };
        assert_eq!(m["role"], "user");
        assert_eq!(m["parts"][0]["status"], "error");
        let openai = json!({"message": {"content": null, "tool_calls": [{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]}, "finish_reason": "tool_calls"});
        let Slot::Output(o) = map_event("gen_ai.choice", &body(openai), false)
            .unwrap()
            .unwrap()
        else {
            panic!()
        };
        assert_eq!(o["parts"][0]["id"], "c");
        assert_eq!(o["finish_reason"], "tool_calls");
        let cut = map_event(
            "gen_ai.choice",
            &body(json!({"message": "[{\"text\":\"ab"})),
            false,
        );
        assert!(cut.unwrap_err().contains("not valid JSON"));
    }
}
