//! Continuations: the history of a chosen snapshot, rendered for the framework or provider the
//! caller will continue with. One internal message model (OTel GenAI messages); one renderer per
//! format.

mod anthropic;
mod gemini;
mod history;
mod openai_chat;
mod openai_responses;
mod otel;
mod parts;
mod pydantic_ai;
mod repair;

pub use history::{load, ContinuationError, History, Selector};
pub use repair::{RepairedCall, INTERRUPTED_CONTENT};

use serde_json::{Map, Value};

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// OTel GenAI messages plus system instructions (canonical).
    Otel,
    /// Pydantic AI `ModelMessage` JSON.
    PydanticAi,
    /// OpenAI Chat Completions `messages`.
    OpenAiChat,
    /// OpenAI Responses `instructions` + `input` items.
    OpenAiResponses,
    /// Anthropic Messages `system` + `messages`.
    Anthropic,
    /// Gemini `system_instruction` + `contents`.
    Gemini,
}

impl Format {
    /// Parses the `format` query parameter.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "otel" => Some(Self::Otel),
            "pydantic-ai" => Some(Self::PydanticAi),
            "openai-chat" => Some(Self::OpenAiChat),
            "openai-responses" => Some(Self::OpenAiResponses),
            "anthropic" => Some(Self::Anthropic),
            "gemini" => Some(Self::Gemini),
            _ => None,
        }
    }

    /// The names accepted by [`Format::parse`].
    pub const NAMES: &'static [&'static str] = &[
        "otel",
        "pydantic-ai",
        "openai-chat",
        "openai-responses",
        "anthropic",
        "gemini",
    ];

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Otel => "otel",
            Self::PydanticAi => "pydantic-ai",
            Self::OpenAiChat => "openai-chat",
            Self::OpenAiResponses => "openai-responses",
            Self::Anthropic => "anthropic",
            Self::Gemini => "gemini",
        }
    }
}

/// Renders a history: the format's own request fields, ready to splat into a request, plus
/// warnings for anything the format could not carry.
pub fn render(format: Format, history: &History) -> (Map<String, Value>, Vec<String>) {
    match format {
        Format::Otel => otel::render(history),
        Format::PydanticAi => pydantic_ai::render(history),
        Format::OpenAiChat => openai_chat::render(history),
        Format::OpenAiResponses => openai_responses::render(history),
        Format::Anthropic => anthropic::render(history),
        Format::Gemini => gemini::render(history),
    }
}
