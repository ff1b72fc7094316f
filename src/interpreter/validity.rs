//! The validity walk over a history, matching Pydantic AI's: a tool call opens its id, a tool
//! return must close an open id (orphan, duplicate and out-of-order returns are invalid), and a
//! new model turn may not start while calls are open.

use crate::domain::MessageShape;
pub use crate::records::walk_state::WalkState;

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
            let ids = open.ids();
            self.invalid = Some(format!(
                "message {index}: model turn while tool calls {ids:?} are unanswered"
            ));
            return;
        }
        for id in &message.closes {
            if !open.remove(id) {
                self.invalid = Some(format!(
                    "message {index}: tool return {id:?} answers no open tool call"
                ));
                return;
            }
        }
        for id in &message.opens {
            if !open.push(id) {
                self.invalid = Some(format!("message {index}: tool call {id:?} opened twice"));
                return;
            }
        }
    }

    /// What the walk found so far.
    pub fn result(&self) -> Walk {
        match &self.invalid {
            Some(why) => Walk::Invalid(why.clone()),
            None if self.open.is_empty() => Walk::Complete,
            None => Walk::Open(self.open.ids()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(role: &str, opens: &[&str], closes: &[&str]) -> MessageShape {
        MessageShape {
            role: role.to_string().into(),
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

    #[test]
    fn the_walk_state_reads_back_in_the_order_calls_were_made() {
        let mut state = WalkState::default();
        state.push(&shape("assistant", &["c", "a", "b"], &[]));
        state.push(&shape("user", &[], &["a"]));
        let text = serde_json::to_string(&state).unwrap();
        assert!(text.contains(r#"["c","b"]"#), "{text}");
        let back: WalkState = serde_json::from_str(&text).unwrap();
        assert_eq!(back, state);
        assert_eq!(back.result(), Walk::Open(vec!["c".into(), "b".into()]));
    }

    #[test]
    fn many_calls_walk_in_linear_time() {
        // Time per call at n and at 64n calls opened, then closed in reverse order (best of
        // seven, taken alternately): about the same; a position scan per close would make it 64
        // times more (16 allowed, for noise and caches).
        let shapes = |n: usize| {
            let ids: Vec<String> = (0..n).map(|i| format!("c{i}")).collect();
            let open = MessageShape {
                role: "assistant".into(),
                opens: ids.clone().into(),
                closes: Default::default(),
            };
            let close = MessageShape {
                role: "user".into(),
                opens: Default::default(),
                closes: ids.into_iter().rev().collect(),
            };
            (open, close)
        };
        let per_call = |(open, close): &(MessageShape, MessageShape)| {
            let start = std::time::Instant::now();
            assert_eq!(walk([open, close]), Walk::Complete);
            start.elapsed().as_secs_f64() / open.opens.len() as f64
        };
        let (small_shapes, large_shapes) = (shapes(2_500), shapes(160_000));
        let (mut small, mut large) = (f64::MAX, f64::MAX);
        for _ in 0..7 {
            small = small.min(per_call(&small_shapes));
            large = large.min(per_call(&large_shapes));
        }
        assert!(
            large < small * 16.0,
            "{small} s/call at 2.5k, {large} s/call at 160k"
        );
    }
}
