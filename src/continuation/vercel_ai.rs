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

use rustc_hash::FxHashMap;
use serde_json::Value;

use super::parts::{self, Outcome, PartFields};
use super::{Fields, History, Out};
use crate::obj;

const FORMAT: &str = "the Vercel AI SDK";

/// Renders `system` (null when there are no instructions) and `messages`.
pub fn render(history: &History) -> (Fields<'_>, Vec<String>) {
    let messages = &history.messages;
    let mut warnings = Vec::new();
    let (pairing, outcomes) = parts::tool_calls(history);
    pairing.warnings(messages, FORMAT, &mut warnings);
    // Tool names by call id, for results that do not name their tool.
    let mut names: FxHashMap<&str, &str> = FxHashMap::default();
    for message in messages.iter() {
        for part in parts::parts(message) {
            let f = PartFields::of(part);
            if f.kind == "tool_call" {
                names.insert(f.id_str(), f.name_str().unwrap_or(""));
            }
        }
    }

    let mut out: Vec<Out> = Vec::new();
    for (mi, message) in messages.iter().enumerate() {
        let role = parts::role(message);
        let assistant = role == "assistant";
        let mut content: Vec<Out> = Vec::new();
        let mut results: Vec<Out> = Vec::new();
        for (pi, part) in parts::parts(message).iter().enumerate() {
            let f = PartFields::of(part);
            let kind = f.kind;
            match kind {
                "tool_call" | "tool_call_response" if pairing.skip(mi, pi) => {}
                "tool_call" if assistant => content.push(tool_call(&f)),
                "tool_call_response" if !assistant => {
                    results.push(tool_result(&f, outcomes.of(mi, pi), &names));
                }
                "text" => content.push(obj! {"type" => "text", "text" => parts::cow_out(f.text())}),
                "reasoning" if assistant => {
                    content.push(obj! {"type" => "reasoning", "text" => parts::cow_out(f.text())});
                }
                "blob" | "uri" => {
                    let (mime, data) = parts::media(part);
                    content.push(obj! {"type" => "file", "data" => data, "mediaType" => mime});
                }
                _ => warnings.push(format!(
                    "message {mi}: part of type {kind:?} has no {FORMAT} form in a {role} message; left out"
                )),
            }
        }
        if !results.is_empty() {
            out.push(obj! {"role" => "tool", "content" => results});
        }
        match role {
            "system" => {
                let text: Vec<String> = parts::parts(message)
                    .iter()
                    .map(|p| parts::text(p).into_owned())
                    .collect();
                out.push(obj! {"role" => "system", "content" => text.join("\n\n")});
            }
            _ if content.is_empty() => {}
            "assistant" => out.push(obj! {"role" => "assistant", "content" => content}),
            _ => out.push(obj! {"role" => "user", "content" => content}),
        }
    }
    (
        vec![
            ("system", parts::instructions_text(history).into()),
            ("messages", Out::Array(out)),
        ],
        warnings,
    )
}

/// A `tool-call` part: `input` is the arguments as JSON (JSON text parsed; text that is not JSON
/// stays text).
fn tool_call<'h>(part: &PartFields<'h>) -> Out<'h> {
    let input = match part.arguments {
        None | Some(Value::Null) => Out::Object(Vec::new()),
        Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
            Ok(v) => Out::Value(v),
            Err(_) => Out::Str(s),
        },
        Some(v) => Out::Raw(v),
    };
    obj! {
        "type" => "tool-call",
        "toolCallId" => part.id_str(),
        "toolName" => part.name_str().unwrap_or(""),
        "input" => input,
    }
}

/// A `tool-result` part with the SDK's typed `output`.
fn tool_result<'h>(
    part: &PartFields<'h>,
    outcome: Outcome,
    names: &FxHashMap<&str, &'h str>,
) -> Out<'h> {
    let id = part.id_str();
    let name = match part.name_str().unwrap_or("") {
        "" => names.get(id).copied().unwrap_or(""),
        name => name,
    };
    let value = part.result();
    let kind = match (outcome.is_error(), value) {
        (true, Value::String(_)) => "error-text",
        (true, _) => "error-json",
        (false, Value::String(_)) => "text",
        (false, _) => "json",
    };
    obj! {
        "type" => "tool-result",
        "toolCallId" => id,
        "toolName" => name,
        "output" => obj! {"type" => kind, "value" => Out::Raw(value)},
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::continuation::tests::history;

    fn rendered(messages: Vec<Value>, instructions: Option<&str>) -> (Value, Vec<String>) {
        let h = history(messages, instructions);
        let (fields, warnings) = render(&h);
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
        let roles: Vec<&str> = m.iter().map(|m| m["role"].as_str().unwrap()).collect();
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
}
