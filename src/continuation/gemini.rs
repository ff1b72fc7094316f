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

use super::parts::{self, PartFields};
use super::{Fields, History, Out};
use crate::obj;

const FORMAT: &str = "Gemini";

/// `base64("skip_thought_signature_validator")`: the value Google documents for function calls
/// whose thought signature is not available (histories built elsewhere).
const SKIP_SIGNATURE: &str = "c2tpcF90aG91Z2h0X3NpZ25hdHVyZV92YWxpZGF0b3I=";

/// Renders `system_instruction` (null when there is none) and `contents`.
pub fn render(history: &History) -> (Fields<'_>, Vec<String>) {
    let messages = &history.messages;
    let mut warnings = Vec::new();
    let (pairing, outcomes) = parts::tool_calls(history);
    pairing.warnings(messages, FORMAT, &mut warnings);

    let mut system: Vec<Out> = parts::instructions_text(history)
        .map(|t| obj! {"text" => t})
        .into_iter()
        .collect();
    let mut turns: parts::Turns = Vec::new();
    // Tool names of the open calls by id, earliest first, for responses that do not name
    // their tool (a response answers the earliest open call with its id, as in `Pairing`).
    let mut open_calls: HashMap<&str, VecDeque<&str>> = HashMap::new();

    for (mi, message) in messages.iter().enumerate() {
        let role = parts::role(message);
        if role == "system" {
            if !turns.is_empty() {
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
        let mut out: Vec<Out> = Vec::new();
        let mut signed_call = false;
        for (pi, part) in parts::parts(message).iter().enumerate() {
            let f = PartFields::of(part);
            match f.kind {
                "text" => out.push(obj! {"text" => parts::cow_out(f.text())}),
                "tool_call" if model => {
                    let id = f.id_str();
                    open_calls
                        .entry(id)
                        .or_default()
                        .push_back(f.name_str().unwrap_or(""));
                    if !pairing.skip(mi, pi) {
                        let mut p = obj! {"functionCall" => obj! {
                            "id" => id,
                            "name" => f.name_str().unwrap_or(""),
                            "args" => parts::arguments_object(part),
                        }};
                        // The first call of a turn must carry a thought signature; a history
                        // from elsewhere has none, so it gets Google's documented skip value.
                        if !signed_call {
                            let sig = parts::field(part, "signature");
                            p.set(
                                "thoughtSignature",
                                if sig.is_empty() { SKIP_SIGNATURE } else { sig },
                            );
                            signed_call = true;
                        }
                        out.push(p);
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
                    let response = if outcome.is_error() {
                        obj! {"error" => parts::cow_out(parts::result_text(value).0)}
                    } else {
                        match value {
                            Value::Object(_) => Out::Raw(value),
                            Value::Null => Out::Object(Vec::new()),
                            other => obj! {"return_value" => other},
                        }
                    };
                    out.push(obj! {"functionResponse" => obj! {
                        "id" => f.id_str(),
                        "name" => response_name(answered, part),
                        "response" => response,
                    }});
                }
                "thinking" | "reasoning" if model => {
                    let signature = parts::field(part, "signature");
                    if signature.is_empty() {
                        warnings.push(format!(
                            "message {mi}: thinking without a thought signature was dropped ({FORMAT} needs it returned unchanged)"
                        ));
                    } else {
                        out.push(obj! {
                            "text" => parts::cow_out(f.text()),
                            "thought" => true,
                            "thoughtSignature" => signature,
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
                        out.push(obj! {"fileData" => obj! {"fileUri" => data, "mimeType" => mime}});
                    } else {
                        out.push(obj! {"inlineData" => obj! {"mimeType" => mime, "data" => data}});
                    }
                }
                other => warnings.push(format!(
                    "message {mi}: {role} part type {other:?} has no {FORMAT} equivalent and was dropped"
                )),
            }
        }
        if out.is_empty() {
            continue;
        }
        let role = if model { "model" } else { "user" };
        parts::push_turn(&mut turns, role, out);
    }
    parts::start_with_user(
        &mut turns,
        "model",
        obj! {"text" => ""},
        "an empty user turn",
        FORMAT,
        &mut warnings,
    );

    let contents: Vec<Out> = turns
        .into_iter()
        .map(|(role, ps)| {
            let (mut responses, rest): (Vec<Out>, Vec<Out>) = ps
                .into_iter()
                .partition(|p| p.get("functionResponse").is_some());
            responses.extend(rest);
            obj! {"role" => role, "parts" => responses}
        })
        .collect();

    let system = if system.is_empty() {
        Out::Null
    } else {
        obj! {"parts" => system}
    };
    (
        vec![
            ("system_instruction", system),
            ("contents", Out::Array(contents)),
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
