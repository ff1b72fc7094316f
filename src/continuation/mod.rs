//! Continuations: the history of a chosen snapshot, rendered for the framework or provider the
//! caller will continue with. One internal message model (OTel GenAI messages); one renderer per
//! format.

mod history;
mod otel;
mod pydantic_ai;
mod strands;

pub use history::{load, ContinuationError, History, Selector};

use serde_json::{Map, Value};

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// OTel GenAI messages plus system instructions (canonical).
    Otel,
    /// Pydantic AI `ModelMessage` JSON.
    PydanticAi,
    /// Strands Agents messages (Bedrock Converse content blocks) plus `system_prompt`.
    Strands,
}

impl Format {
    /// Parses the `format` query parameter.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "otel" => Some(Self::Otel),
            "pydantic-ai" => Some(Self::PydanticAi),
            "strands" => Some(Self::Strands),
            _ => None,
        }
    }

    /// The names accepted by [`Format::parse`].
    pub const NAMES: &'static [&'static str] = &["otel", "pydantic-ai", "strands"];

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Otel => "otel",
            Self::PydanticAi => "pydantic-ai",
            Self::Strands => "strands",
        }
    }
}

/// Renders a history: the format's own request fields, ready to splat into a request, plus
/// warnings for anything the format could not carry.
pub fn render(format: Format, history: &History) -> (Map<String, Value>, Vec<String>) {
    match format {
        Format::Otel => otel::render(history),
        Format::PydanticAi => pydantic_ai::render(history),
        Format::Strands => strands::render(history),
    }
}
