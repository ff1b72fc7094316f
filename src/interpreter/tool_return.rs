//! The form a run gives its tool-return messages, so that a tool return reconstructed from the
//! tool spans is the very message the run's next model request will send.
//!
//! Producers differ only in the role of the message and the key that carries a result:
//! Pydantic AI 2.x (instrumentation v5, the default) sends `{"role": "user", "parts":
//! [{"type": "tool_call_response", "id", "name", "result"}]}`, its v6 uses role `tool`, and the
//! OTel GenAI semantic conventions write `response` under role `tool`. Messages are
//! content-addressed, so a reconstructed answer in the run's own form is stored once, under the
//! hash of the observed one, instead of twice.

use serde_json::{json, Map, Value};

use crate::domain::{MessageHash, MessageRef};
pub use crate::records::fact::{ResultKey, ToolReturnForm, ToolReturnRole};

impl ToolReturnRole {
    /// The role as messages spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::User => "user",
            Self::Tool => "tool",
        }
    }
}

impl ResultKey {
    /// The key as parts spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Result => "result",
            Self::Response => "response",
        }
    }
}

/// One answered call of a reconstructed tool-return message.
pub struct Answer<'a> {
    /// Tool-call id.
    pub id: &'a str,
    /// Tool name.
    pub name: &'a str,
    /// The result, or the error text of a failed call (null when neither is known).
    pub result: Value,
}

impl ToolReturnForm {
    /// The form of a tool-return message: its role, and the result key of its first
    /// `tool_call_response` part that has one (`response` when none has). `None` for a role
    /// other than `user` or `tool`.
    pub fn of(message: &Value) -> Option<Self> {
        let role = match message.get("role").and_then(Value::as_str)? {
            "user" => ToolReturnRole::User,
            "tool" => ToolReturnRole::Tool,
            _ => return None,
        };
        let result_key = message
            .get("parts")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|p| p.get("type").and_then(Value::as_str) == Some("tool_call_response"))
            .find_map(|p| {
                if p.get("response").is_some() {
                    Some(ResultKey::Response)
                } else {
                    p.get("result").map(|_| ResultKey::Result)
                }
            })
            .unwrap_or_default();
        Some(Self { role, result_key })
    }

    /// The form of the last tool-return message (one whose shape closes calls) of `history`;
    /// `body(i, hash)` gives the body of its `i`-th message, and is asked for that one only.
    /// `None` when the history has no tool return, or its last one is not in a known form.
    pub fn last_in<'b>(
        history: &[MessageRef],
        body: impl Fn(usize, &MessageHash) -> Option<&'b Value>,
    ) -> Option<Self> {
        let (i, last) = history
            .iter()
            .enumerate()
            .rfind(|(_, m)| !m.shape.closes.is_empty())?;
        body(i, &last.hash).and_then(Self::of)
    }

    /// The tool-return message answering `answers`, in their order, in this form.
    pub fn message<'a>(self, answers: impl IntoIterator<Item = Answer<'a>>) -> Value {
        let parts: Vec<Value> = answers
            .into_iter()
            .map(|a| {
                let mut part = Map::new();
                part.insert("type".into(), json!("tool_call_response"));
                part.insert("id".into(), json!(a.id));
                part.insert("name".into(), json!(a.name));
                part.insert(self.result_key.as_str().into(), a.result);
                Value::Object(part)
            })
            .collect();
        json!({"role": self.role.as_str(), "parts": parts})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(result: &str) -> Answer<'_> {
        Answer {
            id: "c1",
            name: "f",
            result: json!(result),
        }
    }

    #[test]
    fn the_default_form_is_the_semantic_conventions_one() {
        let m = ToolReturnForm::default().message([answer("ok")]);
        assert_eq!(
            m,
            json!({"role": "tool", "parts": [{"type": "tool_call_response", "id": "c1", "name": "f", "response": "ok"}]})
        );
    }

    #[test]
    fn a_message_in_an_observed_form_hashes_as_the_observed_one() {
        let observed = [
            json!({"role": "user", "parts": [{"type": "tool_call_response", "id": "c1", "name": "f", "result": "ok"}]}),
            json!({"role": "tool", "parts": [{"type": "tool_call_response", "id": "c1", "name": "f", "result": "ok"}]}),
            json!({"role": "tool", "parts": [{"name": "f", "response": "ok", "id": "c1", "type": "tool_call_response"}]}),
        ];
        for o in observed {
            let form = ToolReturnForm::of(&o).unwrap();
            assert_eq!(
                MessageHash::of(&form.message([answer("ok")])),
                MessageHash::of(&o),
                "{o}"
            );
        }
    }

    #[test]
    fn other_roles_give_no_form_and_the_last_tool_return_is_the_one_read() {
        let other = json!({"role": "assistant", "parts": [{"type": "tool_call_response", "id": "c1", "result": 1}]});
        assert_eq!(ToolReturnForm::of(&other), None);
        let history = [
            json!({"role": "tool", "parts": [{"type": "tool_call_response", "id": "a", "response": 1}]}),
            json!({"role": "user", "parts": [{"type": "tool_call_response", "id": "b", "result": 1}]}),
            json!({"role": "assistant", "parts": [{"type": "text", "content": "x"}]}),
        ];
        let refs: Vec<MessageRef> = history.iter().map(MessageRef::of).collect();
        let asked = std::cell::Cell::new(Vec::new());
        let form = ToolReturnForm::last_in(&refs, |i, _| {
            let mut seen = asked.take();
            seen.push(i);
            asked.set(seen);
            history.get(i)
        });
        assert_eq!(
            form,
            Some(ToolReturnForm {
                role: ToolReturnRole::User,
                result_key: ResultKey::Result
            })
        );
        assert_eq!(asked.take(), vec![1]);
        assert_eq!(
            ToolReturnForm::last_in(&refs[2..], |i, _| history.get(i)),
            None
        );
    }
}
