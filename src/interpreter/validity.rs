//! The validity walk over a history, matching Pydantic AI's: a tool call opens its id, a tool
//! return must close an open id (orphan, duplicate and out-of-order returns are invalid), and a
//! new model turn may not start while calls are open.

use serde::{Deserialize, Serialize};

use crate::domain::MessageShape;

/// What the walk found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Walk {
    /// Every call answered: provider-valid.
    Complete,
    /// Valid so far, but these calls are still open at the end.
    Open(Vec<String>),
    /// Not a valid history.
    Invalid(String),
}

/// Walks a history given by message shapes.
pub fn walk<'a>(messages: impl IntoIterator<Item = &'a MessageShape>) -> Walk {
    let mut state = WalkState::default();
    for message in messages {
        state.push(message);
    }
    state.result()
}

/// The walk part way through a history, so a history that extends another one is judged from
/// where the other one ended instead of from its first message.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WalkState {
    /// Messages walked.
    index: usize,
    /// Calls open so far, in the order they were made.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    open: Vec<String>,
    /// Why the history is invalid, once it is (nothing after it matters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    invalid: Option<String>,
}

impl WalkState {
    /// Walks one more message.
    pub fn push(&mut self, message: &MessageShape) {
        let index = self.index;
        self.index += 1;
        if self.invalid.is_some() {
            return;
        }
        let open = &mut self.open;
        if message.role == "assistant" && !open.is_empty() {
            self.invalid = Some(format!(
                "message {index}: model turn while tool calls {open:?} are unanswered"
            ));
            return;
        }
        for id in &message.closes {
            match open.iter().position(|o| o == id) {
                Some(p) => {
                    open.remove(p);
                }
                None => {
                    self.invalid = Some(format!(
                        "message {index}: tool return {id:?} answers no open tool call"
                    ));
                    return;
                }
            }
        }
        for id in &message.opens {
            if open.contains(id) {
                self.invalid = Some(format!("message {index}: tool call {id:?} opened twice"));
                return;
            }
            open.push(id.clone());
        }
    }

    /// What the walk found so far.
    pub fn result(&self) -> Walk {
        match &self.invalid {
            Some(why) => Walk::Invalid(why.clone()),
            None if self.open.is_empty() => Walk::Complete,
            None => Walk::Open(self.open.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(role: &str, opens: &[&str], closes: &[&str]) -> MessageShape {
        MessageShape {
            role: role.into(),
            opens: opens.iter().map(|s| s.to_string()).collect(),
            closes: closes.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn complete_open_and_invalid_histories() {
        let user = shape("user", &[], &[]);
        let call = shape("assistant", &["a", "b"], &[]);
        let ret = shape("user", &[], &["b", "a"]);
        assert_eq!(walk([&user, &call, &ret]), Walk::Complete);
        assert_eq!(
            walk([&user, &call]),
            Walk::Open(vec!["a".into(), "b".into()])
        );
        let orphan = shape("user", &[], &["x"]);
        assert!(matches!(walk([&user, &orphan]), Walk::Invalid(_)));
        let dup = shape("user", &[], &["a"]);
        assert!(matches!(walk([&user, &call, &ret, &dup]), Walk::Invalid(_)));
        let early = shape("assistant", &[], &[]);
        assert!(matches!(walk([&user, &call, &early]), Walk::Invalid(_)));
    }
}
