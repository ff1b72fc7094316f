//! The validity walk over a history, matching Pydantic AI's: a tool call opens its id, a tool
//! return must close an open id (orphan, duplicate and out-of-order returns are invalid), and a
//! new model turn may not start while calls are open.

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
    let mut open: Vec<String> = Vec::new();
    for (index, message) in messages.into_iter().enumerate() {
        if message.role == "assistant" && !open.is_empty() {
            return Walk::Invalid(format!(
                "message {index}: model turn while tool calls {open:?} are unanswered"
            ));
        }
        for id in &message.closes {
            match open.iter().position(|o| o == id) {
                Some(p) => {
                    open.remove(p);
                }
                None => {
                    return Walk::Invalid(format!(
                        "message {index}: tool return {id:?} answers no open tool call"
                    ))
                }
            }
        }
        for id in &message.opens {
            if open.contains(id) {
                return Walk::Invalid(format!("message {index}: tool call {id:?} opened twice"));
            }
            open.push(id.clone());
        }
    }
    if open.is_empty() {
        Walk::Complete
    } else {
        Walk::Open(open)
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
