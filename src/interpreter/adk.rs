//! Google ADK's message ids. When the model gives no function-call ids (as Gemini usually does),
//! ADK's telemetry names each call and each response `{name}_{index}`, the index being the
//! part's place in its own message: a call after a text part is `book_table_1` while its
//! response, first in the next message, is `book_table_0`. Such a response answers no call by
//! id, and a continuation would drop both. [`repair_response_ids`] gives a response whose id
//! answers no open call the id of the earliest open call of the same name (the id without its
//! `_{index}`), so calls and responses pair as ADK paired them.

use std::collections::{HashMap, HashSet, VecDeque};

use serde_json::Value;

/// Whether span or log-record attributes come from Google ADK (its `gcp.vertex.agent.*` keys).
pub fn is_adk(keys: impl IntoIterator<Item = impl AsRef<str>>) -> bool {
    keys.into_iter()
        .any(|k| k.as_ref().starts_with("gcp.vertex.agent."))
}

/// The tool name in an ADK fallback id `{name}_{index}`; `None` for other ids.
fn stem(id: &str) -> Option<&str> {
    let (name, index) = id.rsplit_once('_')?;
    (!name.is_empty() && !index.is_empty() && index.bytes().all(|b| b.is_ascii_digit()))
        .then_some(name)
}

/// Rewrites, in order, the id of each `tool_call_response` part that answers no open call to
/// the id of the earliest open call with the same stem. Linear in the parts (amortised).
pub fn repair_response_ids(messages: &mut [Value]) {
    // Open calls by id and by stem, as sequence numbers; closed ones are skipped lazily.
    let mut by_id: HashMap<String, VecDeque<usize>> = HashMap::new();
    let mut by_stem: HashMap<String, VecDeque<(usize, String)>> = HashMap::new();
    let mut closed: HashSet<usize> = HashSet::new();
    let mut seq = 0usize;
    for message in messages.iter_mut() {
        let Some(parts) = message.get_mut("parts").and_then(Value::as_array_mut) else {
            continue;
        };
        for part in parts.iter_mut() {
            let kind = part.get("type").and_then(Value::as_str).unwrap_or("");
            let Some(id) = part.get("id").and_then(Value::as_str).map(str::to_string) else {
                continue;
            };
            match kind {
                "tool_call" => {
                    by_id.entry(id.clone()).or_default().push_back(seq);
                    if let Some(s) = stem(&id) {
                        by_stem
                            .entry(s.to_string())
                            .or_default()
                            .push_back((seq, id));
                    }
                    seq += 1;
                }
                "tool_call_response" => {
                    let open = by_id.get_mut(&id).and_then(|q| pop_open(q, &closed));
                    if let Some(call) = open {
                        closed.insert(call);
                        continue;
                    }
                    let Some(queue) = stem(&id).and_then(|s| by_stem.get_mut(s)) else {
                        continue;
                    };
                    while let Some((call, call_id)) = queue.pop_front() {
                        if closed.insert(call) {
                            part["id"] = Value::String(call_id);
                            break;
                        }
                    }
                }
                _ => {}
            }
        }
    }
}

/// The earliest open sequence number of a queue, taken off it.
fn pop_open(queue: &mut VecDeque<usize>, closed: &HashSet<usize>) -> Option<usize> {
    while let Some(call) = queue.pop_front() {
        if !closed.contains(&call) {
            return Some(call);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ids(messages: &[Value]) -> Vec<String> {
        messages
            .iter()
            .flat_map(|m| m["parts"].as_array().cloned().unwrap_or_default())
            .filter_map(|p| p["id"].as_str().map(str::to_string))
            .collect()
    }

    #[test]
    fn a_response_answers_the_open_call_of_its_name() {
        let mut messages = vec![
            json!({"role": "assistant", "parts": [
                {"type": "text", "content": "Booking."},
                {"type": "tool_call", "id": "book_table_1", "name": "book_table"},
                {"type": "tool_call", "id": "add_2", "name": "add"}]}),
            json!({"role": "user", "parts": [
                {"type": "tool_call_response", "id": "book_table_0"},
                {"type": "tool_call_response", "id": "add_1"}]}),
            // A later turn reuses the ids: matched ones stay.
            json!({"role": "assistant", "parts": [
                {"type": "tool_call", "id": "book_table_0", "name": "book_table"}]}),
            json!({"role": "user", "parts": [{"type": "tool_call_response", "id": "book_table_0"}]}),
            json!({"role": "user", "parts": [{"type": "tool_call_response", "id": "other_0"}]}),
        ];
        repair_response_ids(&mut messages);
        assert_eq!(
            ids(&messages),
            vec![
                "book_table_1",
                "add_2",
                "book_table_1",
                "add_2",
                "book_table_0",
                "book_table_0",
                "other_0"
            ]
        );
        assert!(is_adk(["gen_ai.agent.name", "gcp.vertex.agent.event_id"]));
        assert!(!is_adk(["gen_ai.agent.name"]));
        assert_eq!(stem("get_weather_12"), Some("get_weather"));
        assert_eq!(stem("call_x"), None);
    }
}
