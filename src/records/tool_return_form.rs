//! The form a run gives its tool-return messages (role and result key), kept in a run's stored
//! state. How it is read from messages and used is `interpreter::tool_return`.

use serde::{Deserialize, Serialize};

/// Role and result key of a run's tool-return messages. The default, used until a run has shown
/// a tool return, is the semantic conventions' form: role `tool`, key `response`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolReturnForm {
    /// Role of the message.
    pub role: ToolReturnRole,
    /// Key of a part that carries the result (or the error text of a failed call).
    pub result_key: ResultKey,
}

/// Role of a tool-return message.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolReturnRole {
    /// `user` (Pydantic AI up to instrumentation v5).
    User,
    /// `tool` (semantic conventions, Pydantic AI v6).
    #[default]
    Tool,
}

/// Key of a `tool_call_response` part that carries the result.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResultKey {
    /// `result` (Pydantic AI, older producers).
    Result,
    /// `response` (semantic conventions).
    #[default]
    Response,
}

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
