//! Reading the internal message model (OTel GenAI messages) for the provider renderers: roles,
//! parts, tool calls and their outcomes. Every renderer reads the history through these helpers;
//! none reads another renderer's output.

use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use serde_json::{Map, Value};

use super::json_writer::json_text;
use super::{Effects, History, Out};

/// How a tool call ended, as far as the history and the effect ledger tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The tool returned a result.
    Success,
    /// The tool failed.
    Failed,
    /// The tool asked the model to try again (Pydantic AI `ModelRetry`).
    Retried,
    /// The call was interrupted; the result was synthesized by `repair=true`.
    Interrupted,
}

impl Outcome {
    /// True when the provider should see the result as an error (as Pydantic AI does: failed and
    /// retried calls; an interrupted call's placeholder is plain content).
    pub fn is_error(self) -> bool {
        matches!(self, Self::Failed | Self::Retried)
    }
}

/// The role of a message (`user` when absent).
pub fn role(message: &Value) -> &str {
    message
        .get("role")
        .and_then(Value::as_str)
        .unwrap_or("user")
}

/// The parts of a message.
pub fn parts(message: &Value) -> &[Value] {
    message
        .get("parts")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

/// The fields of a part that renderers read most, found in one pass over its keys (a long
/// history has thousands of parts; a lookup per field searches the part's keys each time).
#[derive(Debug, Default, Clone, Copy)]
pub struct PartFields<'a> {
    /// `type` as a string (empty when absent or not a string).
    pub kind: &'a str,
    /// `content`.
    pub content: Option<&'a Value>,
    /// `id`.
    pub id: Option<&'a Value>,
    /// `name`.
    pub name: Option<&'a Value>,
    /// `arguments`.
    pub arguments: Option<&'a Value>,
    /// `response`, else `result`: the result a `tool_call_response` carries.
    pub result: Option<&'a Value>,
    /// `outcome` as a string.
    pub outcome: Option<&'a str>,
}

impl<'a> PartFields<'a> {
    /// The fields of `part` (all absent for a part that is not an object).
    pub fn of(part: &'a Value) -> Self {
        let mut fields = Self::default();
        let Some(map) = part.as_object() else {
            return fields;
        };
        let mut response = None;
        for (key, value) in map {
            match key.as_str() {
                "type" => fields.kind = value.as_str().unwrap_or(""),
                "content" => fields.content = Some(value),
                "id" => fields.id = Some(value),
                "name" => fields.name = Some(value),
                "arguments" => fields.arguments = Some(value),
                "response" => response = Some(value),
                "result" => fields.result = Some(value),
                "outcome" => fields.outcome = value.as_str(),
                _ => {}
            }
        }
        fields.result = response.or(fields.result);
        fields
    }

    /// `id` as a string (empty when absent or not a string).
    pub fn id_str(&self) -> &'a str {
        self.id.and_then(Value::as_str).unwrap_or("")
    }

    /// `name` as a string.
    pub fn name_str(&self) -> Option<&'a str> {
        self.name.and_then(Value::as_str)
    }

    /// The text of a text-like part ([`text`]).
    pub fn text(&self) -> Cow<'a, str> {
        match self.content {
            Some(Value::String(s)) => Cow::Borrowed(s),
            None | Some(Value::Null) => Cow::Borrowed(""),
            Some(other) => Cow::Owned(json_text(other)),
        }
    }

    /// The tool result: `response`, else `result`, else null.
    pub fn result(&self) -> &'a Value {
        static NULL: Value = Value::Null;
        self.result.unwrap_or(&NULL)
    }
}

/// The type of a part.
pub fn kind(part: &Value) -> &str {
    part.get("type").and_then(Value::as_str).unwrap_or("")
}

/// A string field of a part (empty when absent).
pub fn field<'a>(part: &'a Value, name: &str) -> &'a str {
    part.get(name).and_then(Value::as_str).unwrap_or("")
}

/// The text of a text-like part: a string content as is, anything else as JSON text.
pub fn text(part: &Value) -> Cow<'_, str> {
    match part.get("content") {
        Some(Value::String(s)) => Cow::Borrowed(s),
        None | Some(Value::Null) => Cow::Borrowed(""),
        Some(other) => Cow::Owned(json_text(other)),
    }
}

/// [`text`] as output (borrowed when the content is a string).
pub fn text_out(part: &Value) -> Out<'_> {
    cow_out(text(part))
}

/// A possibly borrowed string as output.
pub fn cow_out(text: Cow<'_, str>) -> Out<'_> {
    match text {
        Cow::Borrowed(s) => Out::Str(s),
        Cow::Owned(s) => Out::String(s),
    }
}

/// The arguments of a `tool_call` part as a JSON object (a JSON string is parsed; anything that is
/// not an object is wrapped as `{"value": ...}`: providers require an object).
pub fn arguments_object(part: &Value) -> Out<'_> {
    match part.get("arguments") {
        Some(v @ Value::Object(_)) => Out::Raw(v),
        None | Some(Value::Null) => Out::Object(Vec::new()),
        Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
            Ok(v @ Value::Object(_)) => Out::Value(v),
            Ok(Value::Null) => Out::Object(Vec::new()),
            Ok(other) => Out::Object(vec![("value", Out::Value(other))]),
            Err(_) => Out::Object(vec![("value", Out::Str(s))]),
        },
        Some(other) => Out::Object(vec![("value", Out::Raw(other))]),
    }
}

/// The arguments of a `tool_call` part as JSON text (what OpenAI APIs carry).
pub fn arguments_text(part: &Value) -> Out<'_> {
    match part.get("arguments") {
        Some(Value::String(s)) => Out::Str(s),
        None | Some(Value::Null) => Out::Str("{}"),
        Some(v) => Out::String(json_text(v)),
    }
}

/// A tool result as text: strings as is, null as empty, anything else as its JSON text. The flag
/// says whether a structured value had to be stringified.
pub fn result_text(value: &Value) -> (Cow<'_, str>, bool) {
    match value {
        Value::String(s) => (Cow::Borrowed(s), false),
        Value::Null => (Cow::Borrowed(""), false),
        other => (Cow::Owned(json_text(other)), true),
    }
}

/// A tool-call-response part as the text an OpenAI-style tool message carries: an error outcome
/// is wrapped as `{"error": ...}` (the model must see that the call failed); a structured success
/// is JSON text, and a warning says so (`carrier` names what carries it, e.g. "tool messages").
pub fn tool_result_text<'a>(
    part: &PartFields<'a>,
    outcome: Outcome,
    mi: usize,
    format: &str,
    carrier: &str,
    warnings: &mut Vec<String>,
) -> Out<'a> {
    let (text, stringified) = result_text(part.result());
    if stringified {
        warnings.push(format!(
            "message {mi}: tool result {:?} is not text; {format} {carrier} carry text, so it was sent as JSON text",
            part.id_str()
        ));
    }
    if outcome.is_error() {
        let mut m = Map::new();
        m.insert("error".into(), Value::String(text.into_owned()));
        return Out::String(json_text(&Value::Object(m)));
    }
    cow_out(text)
}

/// The system instructions in force, joined as one text (none when empty).
pub fn instructions_text(history: &History) -> Option<String> {
    let texts: Vec<Cow<'_, str>> = history
        .system_instructions
        .as_ref()
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(text)
        .filter(|t| !t.is_empty())
        .collect();
    (!texts.is_empty()).then(|| texts.join("\n\n"))
}

/// The outcome of each `tool_call_response` of a history (see [`tool_calls`]), by position.
pub struct Outcomes {
    /// `((message index, part index), outcome)` in history order.
    list: Vec<((usize, usize), Outcome)>,
}

impl Outcomes {
    /// The outcome of the response part at `(message, part)` (success for a part that is not a
    /// response).
    pub fn of(&self, message: usize, part: usize) -> Outcome {
        self.list
            .binary_search_by_key(&(message, part), |&(at, _)| at)
            .ok()
            .and_then(|i| self.list.get(i))
            .map_or(Outcome::Success, |&(_, outcome)| outcome)
    }
}

/// Reads a history's tool calls in one walk: their [`Pairing`] and the [`Outcomes`] of the
/// responses. A synthesized part says its own outcome; otherwise the n-th response with an id
/// matches the n-th ledger entry with it.
pub fn tool_calls(history: &History) -> (Pairing, Outcomes) {
    Pairing::walk(&history.messages, Some(&history.effects))
}

/// The outcome of a response part whose id has had `n` responses before it.
fn outcome_of(said: Option<&str>, id: &str, n: usize, effects: &Effects) -> Outcome {
    match said {
        Some("interrupted") => return Outcome::Interrupted,
        Some("failed") => return Outcome::Failed,
        Some("retried") => return Outcome::Retried,
        Some("success") => return Outcome::Success,
        _ => {}
    }
    match effects.of_call(id, n) {
        Some(e) if e.retry.is_some() => Outcome::Retried,
        Some(e) if e.error.is_some() => Outcome::Failed,
        _ => Outcome::Success,
    }
}

/// Tool-call pairing of a history: which calls are answered and which responses answer an open
/// call. Providers reject unanswered calls and orphan responses, so renderers drop both (with a
/// warning) using this.
pub struct Pairing {
    /// `(message index, part index)` of calls that never get a response, in history order.
    pub unanswered: Vec<(usize, usize)>,
    /// `(message index, part index)` of responses that answer no open call, in history order.
    pub orphans: Vec<(usize, usize)>,
}

impl Pairing {
    /// Walks the history: a call opens its id, a later response closes the earliest open call with
    /// that id.
    pub fn of(messages: &[Arc<Value>]) -> Self {
        Self::walk(messages, None).0
    }

    /// [`Pairing::of`], and with `effects` the outcome of each response too. Linear in the parts
    /// however many calls stay open: the open calls are held by id, in maps whose hashing a
    /// sender cannot aim at (the ids are the sender's).
    fn walk(messages: &[Arc<Value>], effects: Option<&Effects>) -> (Self, Outcomes) {
        // Sized ahead (about one call a message or fewer): growing a map hashes its keys again.
        let mut open: HashMap<&str, VecDeque<(usize, usize)>> =
            HashMap::with_capacity(messages.len());
        let mut orphans = Vec::new();
        let mut outcomes = Vec::new();
        // Responses seen so far per id (for the ledger match).
        let mut seen: HashMap<&str, usize> =
            HashMap::with_capacity(effects.map_or(0, |_| messages.len()));
        for (mi, message) in messages.iter().enumerate() {
            for (pi, part) in parts(message).iter().enumerate() {
                let part = PartFields::of(part);
                match part.kind {
                    "tool_call" => open.entry(part.id_str()).or_default().push_back((mi, pi)),
                    "tool_call_response" => {
                        let id = part.id_str();
                        if let Some(effects) = effects {
                            let n = seen.entry(id).or_insert(0);
                            outcomes.push(((mi, pi), outcome_of(part.outcome, id, *n, effects)));
                            *n += 1;
                        }
                        if open.get_mut(id).and_then(VecDeque::pop_front).is_none() {
                            orphans.push((mi, pi));
                        }
                    }
                    _ => {}
                }
            }
        }
        let mut unanswered: Vec<(usize, usize)> = open.into_values().flatten().collect();
        unanswered.sort_unstable();
        let pairing = Self {
            unanswered,
            orphans,
        };
        (pairing, Outcomes { list: outcomes })
    }

    /// True when the part at `(message, part)` must be left out.
    pub fn skip(&self, message: usize, part: usize) -> bool {
        let at = (message, part);
        self.unanswered.binary_search(&at).is_ok() || self.orphans.binary_search(&at).is_ok()
    }

    /// The part indexes of the unanswered calls of message `message`, in order.
    pub fn unanswered_in(&self, message: usize) -> impl Iterator<Item = usize> + '_ {
        let from = self.unanswered.partition_point(|&(m, _)| m < message);
        self.unanswered[from..]
            .iter()
            .take_while(move |&&(m, _)| m == message)
            .map(|&(_, p)| p)
    }

    /// Warnings for what [`Pairing::skip`] leaves out.
    pub fn warnings(&self, messages: &[Arc<Value>], format: &str, warnings: &mut Vec<String>) {
        for &(m, p) in &self.unanswered {
            let id = parts(&messages[m])
                .get(p)
                .map(|x| field(x, "id"))
                .unwrap_or("");
            warnings.push(format!(
                "message {m}: tool call {id:?} has no result and was dropped ({format} requires every call answered; pass repair=true to close it)"
            ));
        }
        for &(m, p) in &self.orphans {
            let id = parts(&messages[m])
                .get(p)
                .map(|x| field(x, "id"))
                .unwrap_or("");
            warnings.push(format!(
                "message {m}: tool result {id:?} answers no earlier call and was dropped"
            ));
        }
    }
}

/// A base64 `blob` part's `(mime type, data)`, or a `uri` part's `(mime type, uri)`.
pub fn media(part: &Value) -> (&str, &str) {
    let mime = part
        .get("mime_type")
        .or_else(|| part.get("media_type"))
        .and_then(Value::as_str)
        .unwrap_or("application/octet-stream");
    let data = part
        .get("content")
        .or_else(|| part.get("uri"))
        .and_then(Value::as_str)
        .unwrap_or("");
    (mime, data)
}

/// The warning for a history that starts with `model_role`, given by providers whose history
/// must start with a user turn: a user turn (described by `filler_text`) was put first.
pub fn filler_warning(model_role: &str, filler_text: &str, format: &str) -> String {
    format!(
        "the history starts with {} {model_role} turn; {format} starts with a user turn, so {filler_text} was put first",
        if model_role.starts_with(['a', 'e', 'i', 'o', 'u']) { "an" } else { "a" }
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn part_fields_read_in_one_pass_are_those_looked_up_one_by_one() {
        let parts = [
            json!({"type": "tool_call_response", "id": "c1", "name": "f", "result": 1,
                   "response": {"a": 2}, "outcome": "failed", "extra": true}),
            json!({"type": "tool_call_response", "id": 7, "result": "r"}),
            json!({"type": "text", "content": {"structured": true}}),
            json!({"type": 3, "arguments": "{}", "outcome": 4}),
            json!({}),
            json!("not an object"),
        ];
        for part in &parts {
            let f = PartFields::of(part);
            assert_eq!(f.kind, kind(part), "{part}");
            assert_eq!(f.id_str(), field(part, "id"), "{part}");
            assert_eq!(f.name_str(), part.get("name").and_then(Value::as_str));
            assert_eq!(f.content, part.get("content"));
            assert_eq!(f.arguments, part.get("arguments"));
            assert_eq!(f.outcome, part.get("outcome").and_then(Value::as_str));
            assert_eq!(f.text(), text(part));
            let result = part
                .get("response")
                .or_else(|| part.get("result"))
                .unwrap_or(&Value::Null);
            assert_eq!(f.result(), result, "response first, then result");
        }
        assert_eq!(PartFields::of(&parts[0]).result(), &json!({"a": 2}));
    }

    #[test]
    fn pairing_finds_unanswered_calls_and_orphans() {
        let messages = vec![
            Arc::new(
                json!({"role":"assistant","parts":[{"type":"tool_call","id":"a"},{"type":"tool_call","id":"b"}]}),
            ),
            Arc::new(
                json!({"role":"tool","parts":[{"type":"tool_call_response","id":"a"},{"type":"tool_call_response","id":"z"}]}),
            ),
        ];
        let p = Pairing::of(&messages);
        assert_eq!(p.unanswered, vec![(0, 1)]);
        assert_eq!(p.orphans, vec![(1, 1)]);
    }

    #[test]
    fn arguments_are_objects_or_text() {
        let part = json!({"type":"tool_call","arguments":"{\"x\":1}"});
        assert_eq!(arguments_object(&part).to_value(), json!({"x":1}));
        assert_eq!(
            arguments_text(&json!({"arguments":{"x":1}})).to_value(),
            "{\"x\":1}"
        );
        assert_eq!(
            arguments_object(&json!({"arguments":3})).to_value(),
            json!({"value":3})
        );
        assert_eq!(
            arguments_object(&json!({"arguments":"not json"})).to_value(),
            json!({"value":"not json"})
        );
    }
}
