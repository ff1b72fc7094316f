//! Gemini `generateContent`: `system_instruction` + `contents` (REST JSON, camelCase parts).
//!
//! Rules enforced: roles user/model; consecutive same-role turns merge; a model turn's
//! `functionCall` parts are answered by the next user turn with the same number of
//! `functionResponse{name, response}` parts (placed first; unanswered calls and orphan results are
//! dropped); `response` is an object (`{"error": ...}` for a failed call, a non-object result
//! wrapped as `{"return_value": ...}`); the history starts with a user turn. Thought signatures
//! must come back unchanged: thinking without one is dropped, with a warning.

use std::collections::{HashMap, VecDeque};

use serde_json::Value;

use super::json_writer;
use super::parts::{self, PartFields};
use super::turns::TurnWriter;
use super::writer::{self, Obj};
use super::{Fields, History, Out};
use crate::{key, obj};

const FORMAT: &str = "Gemini";

/// What the user turn put before a history that starts with a model turn is, in warnings.
const FILLER_TEXT: &str = "an empty user turn";
/// That user turn, as written.
const FILLER: &[u8] = br#"{"role":"user","parts":[{"text":""}]}"#;

/// `base64("skip_thought_signature_validator")`: the value Google documents for function calls
/// whose thought signature is not available (histories built elsewhere).
const SKIP_SIGNATURE: &str = "c2tpcF90aG91Z2h0X3NpZ25hdHVyZV92YWxpZGF0b3I=";

/// Renders `system_instruction` (null when there is none) and `contents`, the contents written
/// in place ([`super::writer`]): each part goes to the buffer as it is read, with no tree of the
/// whole answer in between.
pub fn render(history: &History, mut buf: Vec<u8>) -> (Fields<'_>, Vec<String>) {
    let messages = &history.messages;
    let mut warnings = Vec::new();
    let (pairing, outcomes) = parts::tool_calls(history);
    pairing.warnings(messages, FORMAT, &mut warnings);

    let mut system: Vec<Out> = parts::instructions_text(history)
        .map(|t| obj! {"text" => t})
        .into_iter()
        .collect();
    writer::room(&mut buf, messages.len(), 400);
    let mut turns = TurnWriter::open(&mut buf, key!("parts"), "model", FILLER);
    // Tool names of the open calls by id, earliest first, for responses that do not name
    // their tool (a response answers the earliest open call with its id, as in `Pairing`).
    let mut open_calls: HashMap<&str, VecDeque<&str>> = HashMap::with_capacity(messages.len());

    for (mi, message) in messages.iter().enumerate() {
        let role = parts::role(message);
        if role == "system" {
            if turns.started() {
                warnings.push(format!(
                    "message {mi}: a system message inside the conversation was moved to system_instruction"
                ));
            }
            system.extend(
                parts::parts(message)
                    .iter()
                    .map(|p| obj! {"text" => parts::text_out(p)}),
            );
            continue;
        }
        let model = role == "assistant";
        let turn_role = if model { "model" } else { "user" };
        let mut signed_call = false;
        for (pi, part) in parts::parts(message).iter().enumerate() {
            let f = PartFields::of(part);
            match f.kind {
                "text" => turns.block(turn_role, false, |b| {
                    let mut o = Obj::open(b);
                    o.str(key!("text"), &f.text());
                    o.close();
                }),
                "tool_call" if model => {
                    let id = f.id_str();
                    open_calls
                        .entry(id)
                        .or_default()
                        .push_back(f.name_str().unwrap_or(""));
                    if !pairing.skip(mi, pi) {
                        // The first call of a turn must carry a thought signature; a history
                        // from elsewhere has none, so it gets Google's documented skip value.
                        let signature = (!signed_call).then(|| {
                            let sig = parts::field(part, "signature");
                            if sig.is_empty() {
                                SKIP_SIGNATURE
                            } else {
                                sig
                            }
                        });
                        signed_call = true;
                        turns.block(turn_role, false, |b| {
                            let mut o = Obj::open(b);
                            let mut call = Obj::open(o.key(key!("functionCall")));
                            call.str(key!("id"), id);
                            call.str(key!("name"), f.name_str().unwrap_or(""));
                            match f.arguments {
                                Some(args @ Value::Object(_)) => call.value(key!("args"), args),
                                _ => call.out(key!("args"), &parts::arguments_object(part)),
                            }
                            call.close();
                            if let Some(signature) = signature {
                                o.str(key!("thoughtSignature"), signature);
                            }
                            o.close();
                        });
                    }
                }
                "tool_call_response" if !model => {
                    let outcome = outcomes.of(mi, pi);
                    let answered = open_calls
                        .get_mut(f.id_str())
                        .and_then(VecDeque::pop_front);
                    if pairing.skip(mi, pi) {
                        continue;
                    }
                    let value = f.result();
                    turns.block(turn_role, true, |b| {
                        let mut o = Obj::open(b);
                        let mut response = Obj::open(o.key(key!("functionResponse")));
                        response.str(key!("id"), f.id_str());
                        response.str(key!("name"), response_name(answered, part));
                        let r = response.key(key!("response"));
                        if outcome.is_error() {
                            let mut error = Obj::open(r);
                            error.str(key!("error"), &parts::result_text(value).0);
                            error.close();
                        } else {
                            match value {
                                Value::Object(_) => json_writer::write_value(r, value),
                                Value::Null => r.extend_from_slice(b"{}"),
                                other => {
                                    let mut wrapped = Obj::open(r);
                                    wrapped.value(key!("return_value"), other);
                                    wrapped.close();
                                }
                            }
                        }
                        response.close();
                        o.close();
                    });
                }
                "thinking" | "reasoning" if model => {
                    let signature = parts::field(part, "signature");
                    if signature.is_empty() {
                        warnings.push(format!(
                            "message {mi}: thinking without a thought signature was dropped ({FORMAT} needs it returned unchanged)"
                        ));
                    } else {
                        turns.block(turn_role, false, |b| {
                            let mut o = Obj::open(b);
                            o.str(key!("text"), &f.text());
                            o.key(key!("thought")).extend_from_slice(b"true");
                            o.str(key!("thoughtSignature"), signature);
                            o.close();
                        });
                    }
                }
                "blob" | "uri" if !model => {
                    let (mime, data) = parts::media(part);
                    if data.is_empty() {
                        warnings.push(format!(
                            "message {mi}: media part without data or uri was dropped"
                        ));
                    } else if parts::kind(part) == "uri" {
                        warnings.push(format!(
                            "message {mi}: media given only by reference ({data}); the provider must be able to fetch it"
                        ));
                        let p = obj! {"fileData" => obj! {"fileUri" => data, "mimeType" => mime}};
                        turns.block(turn_role, false, |b| json_writer::write_out(b, &p));
                    } else {
                        let p = obj! {"inlineData" => obj! {"mimeType" => mime, "data" => data}};
                        turns.block(turn_role, false, |b| json_writer::write_out(b, &p));
                    }
                }
                other => warnings.push(format!(
                    "message {mi}: {role} part type {other:?} has no {FORMAT} equivalent and was dropped"
                )),
            }
        }
    }
    if turns.finish() {
        warnings.push(parts::filler_warning("model", FILLER_TEXT, FORMAT));
    }

    let system = if system.is_empty() {
        Out::Null
    } else {
        obj! {"parts" => system}
    };
    (
        vec![
            ("system_instruction", system),
            ("contents", Out::Written(buf)),
        ],
        warnings,
    )
}

/// The tool name of a response: its own, else the name of the call it answers (`answered`:
/// the earliest call with its id still open, which every response that is kept has).
fn response_name<'a>(answered: Option<&'a str>, part: &'a Value) -> &'a str {
    let own = parts::field(part, "name");
    if own.is_empty() {
        answered.unwrap_or("")
    } else {
        own
    }
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
        rendered_as_recorded(Format::Gemini, &history(messages, instructions))
    }

    #[test]
    fn merged_turns_keep_responses_first_and_every_kind_of_part_renders() {
        let (f, w) = rendered(
            vec![
                json!({"role": "system", "parts": [text("early"), text("")]}),
                json!({"role": "assistant", "parts": [
                    {"type": "thinking", "content": "hmm"},
                    {"type": "reasoning", "content": {"x": 1}, "signature": "s"},
                    text(""), text("a \"quoted\"\nline"), call("never", json!({})),
                    call("a", json!({"x": 1})),
                    {"type": "tool_call", "id": "b", "name": "g", "arguments": "{\"y\":2}", "signature": "sig"},
                    call("c", json!("[1]")), call("d", json!("not json")), call("e", json!(null)),
                    {"type": "tool_call", "id": "h", "arguments": 3},
                    {"type": "mystery"}, result("in-model", json!("x")),
                ]}),
                json!({"role": "user", "parts": [text("steer"), {"type": "blob", "content": "AAA", "mime_type": "image/png"}]}),
                json!({"role": "tool", "parts": [
                    result("a", json!("ok")),
                    {"type": "tool_call_response", "id": "b", "name": "own", "result": {"structured": [1, 2]}},
                    {"type": "tool_call_response", "id": "c", "result": {"o": 1}, "outcome": "failed"},
                    {"type": "tool_call_response", "id": "d", "response": "r", "outcome": "retried"},
                    result("orphan", json!("x")),
                ]}),
                json!({"role": "assistant", "parts": []}),
                json!({"role": "user", "parts": [
                    text("more"), result("e", json!(null)),
                    {"type": "blob", "content": "BBB", "media_type": "application/pdf"},
                    {"type": "blob", "mime_type": "audio/wav"},
                    {"type": "uri", "uri": "https://x/y", "modality": "image"},
                    result("h", json!(["l"])),
                ]}),
                json!({"role": "system", "parts": [text("late")]}),
                json!({"role": "assistant", "parts": [call("z", json!({})), text("done")]}),
                json!({"role": "tool", "parts": [result("z", json!(1.5))]}),
            ],
            Some("be brief"),
        );
        assert_eq!(
            f["system_instruction"]["parts"].as_array().unwrap().len(),
            4
        );
        let c = f["contents"].as_array().unwrap();
        assert_eq!(c.len(), 5, "{f}");
        let responses: Vec<bool> = c[2]["parts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p.get("functionResponse").is_some())
            .collect();
        assert_eq!(
            responses[..6],
            [true; 6],
            "responses first, also those after other parts: {responses:?}"
        );
        assert!(responses[6..].iter().all(|r| !r), "{responses:?}");
        assert!(w.iter().any(|w| w.contains("moved to system_instruction")));
        assert!(w.iter().any(|w| w.contains("without a thought signature")));
    }

    #[test]
    fn a_history_that_starts_with_the_model_or_has_no_turns() {
        let (f, w) = rendered(
            vec![json!({"role": "assistant", "parts": [{"type": "text", "content": "hi"}]})],
            None,
        );
        assert_eq!(
            f["contents"][0],
            json!({"role": "user", "parts": [{"text": ""}]})
        );
        assert!(w.iter().any(|w| w.contains("starts with a model turn")));
        let (f, w) = rendered(Vec::new(), None);
        assert_eq!(f, json!({"system_instruction": null, "contents": []}));
        assert!(w.is_empty());
    }
}
