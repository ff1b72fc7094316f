//! Continuations: the history of a chosen snapshot, rendered for the framework or provider the
//! caller will continue with. One internal message model (OTel GenAI messages); one renderer per
//! format.

mod anthropic;
mod context;
mod gemini;
mod history;
mod json_writer;
mod lineage;
mod openai_chat;
mod openai_responses;
mod otel;
mod out;
mod parts;
pub mod prefetch;
mod pydantic_ai;
mod rendered;
mod repair;
mod respond;
#[cfg(test)]
mod scaling_tests;
mod strands;
mod turns;
mod vercel_ai;
pub mod writer;

pub use context::{ContextCache, Effects, Provenance, RunContext, CONTEXT_CACHE_BYTES};
pub use history::{load, ContinuationError, History, Selector};
pub use out::Out;
pub use rendered::{MediaMode, RenderedCache, Request, RENDERED_CACHE_BYTES};
pub use repair::{RepairedCall, INTERRUPTED_CONTENT};
pub use respond::Continuations;
pub use writer::Key;

/// A rendered format's own request fields, in order.
pub type Fields<'a> = Vec<(&'static str, Out<'a>)>;

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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
    /// Strands Agents messages (Bedrock Converse content blocks) plus `system_prompt`.
    Strands,
    /// Vercel AI SDK `ModelMessage[]` plus `system`.
    VercelAi,
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
            "strands" => Some(Self::Strands),
            "vercel-ai" => Some(Self::VercelAi),
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
        "strands",
        "vercel-ai",
    ];

    /// True when the renderer needs to know which model request sent and produced each message
    /// ([`Selector::provenance`]): Pydantic AI messages carry model names, usage and times.
    pub fn needs_provenance(self) -> bool {
        self == Self::PydanticAi
    }

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Otel => "otel",
            Self::PydanticAi => "pydantic-ai",
            Self::OpenAiChat => "openai-chat",
            Self::OpenAiResponses => "openai-responses",
            Self::Anthropic => "anthropic",
            Self::Gemini => "gemini",
            Self::Strands => "strands",
            Self::VercelAi => "vercel-ai",
        }
    }
}

/// Renders a history: the format's own request fields, ready to splat into a request, plus
/// warnings for anything the format could not carry.
pub fn render(format: Format, history: &History) -> (Fields<'_>, Vec<String>) {
    render_into(format, history, Vec::new())
}

/// [`render`], the format's long array (messages, contents or input items) written in place
/// into `buf` and handed back as the [`Out::Written`] field. `buf` is empty; given without
/// capacity, it gets the renderer's own guess of the size ([`writer::room`]).
pub fn render_into(format: Format, history: &History, buf: Vec<u8>) -> (Fields<'_>, Vec<String>) {
    debug_assert!(
        buf.is_empty(),
        "a renderer writes from the start of its buffer"
    );
    match format {
        Format::Otel => otel::render(history, buf),
        Format::PydanticAi => pydantic_ai::render(history, buf),
        Format::OpenAiChat => openai_chat::render(history, buf),
        Format::OpenAiResponses => openai_responses::render(history, buf),
        Format::Anthropic => anthropic::render(history, buf),
        Format::Gemini => gemini::render(history, buf),
        Format::Strands => strands::render(history, buf),
        Format::VercelAi => vercel_ai::render(history, buf),
    }
}

#[cfg(test)]
mod tests {
    //! Provider rules the oracle scenario does not reach: merging, ordering, orphans, references.

    use std::sync::Arc;

    use serde_json::{json, Value};

    use super::{Format, History, Out};
    use crate::domain::{MessageHash, Run, SnapshotRecord};

    /// A history of `messages` for renderer tests (also used by the format modules' tests).
    pub(super) fn history(messages: Vec<Value>, instructions: Option<&str>) -> History {
        let run: Run = serde_json::from_value(json!({
            "run_id": "r", "aliases": [], "trace_id": "t", "agent_name": null,
            "conversation_id": null, "parent_run_id": null, "status": "running",
            "started_at": "", "ended_at": null, "error": null, "model_request_count": 0,
            "tool_call_count": 0, "snapshot_count": 0, "event_count": 0, "input_tokens": 0,
            "output_tokens": 0, "started_ns": 0,
        }))
        .unwrap();
        let snapshot: SnapshotRecord = serde_json::from_value(json!({
            "meta": {"seq": 0, "step_index": 1, "state": "complete", "source": "observed",
                     "message_count": messages.len(), "timestamp": ""},
            "history": {"len": messages.len()},
        }))
        .unwrap();
        History {
            run,
            snapshot,
            hashes: messages.iter().map(MessageHash::of).collect(),
            messages: messages.into_iter().map(Arc::new).collect(),
            may_name_media: true,
            system_instructions: instructions.map(|t| json!([{"type": "text", "content": t}])),
            effects: Default::default(),
            unresolved: Arc::from(Vec::new()),
            provenance: Default::default(),
            ancestors: Vec::new(),
        }
    }

    /// The rendered fields as one JSON object, for inspection.
    fn render(format: Format, history: &History) -> (Value, Vec<String>) {
        let (fields, warnings) = super::render(format, history);
        (Out::Object(fields).to_value(), warnings)
    }

    fn call(id: &str) -> Value {
        json!({"type": "tool_call", "id": id, "name": "f", "arguments": {"x": 1}})
    }

    fn result(id: &str) -> Value {
        json!({"type": "tool_call_response", "id": id, "name": "f", "result": "ok"})
    }

    fn text(t: &str) -> Value {
        json!({"type": "text", "content": t})
    }

    #[test]
    fn openai_chat_puts_tool_messages_right_after_their_calls() {
        // A user message arrives between the call and its result (e.g. a steering message).
        let h = history(
            vec![
                json!({"role": "user", "parts": [text("go")]}),
                json!({"role": "assistant", "parts": [call("a")]}),
                json!({"role": "user", "parts": [text("hurry")]}),
                json!({"role": "tool", "parts": [result("a")]}),
            ],
            Some("be brief"),
        );
        let (f, w) = render(Format::OpenAiChat, &h);
        let roles = roles(&f["messages"]);
        assert_eq!(roles, ["system", "user", "assistant", "tool", "user"]);
        assert!(w.is_empty(), "{w:?}");
    }

    #[test]
    fn anthropic_merges_turns_puts_results_first_and_starts_with_user() {
        let h = history(
            vec![
                json!({"role": "assistant", "parts": [text("hello"), call("a")]}),
                json!({"role": "user", "parts": [text("also this")]}),
                json!({"role": "tool", "parts": [result("a"), result("zzz")]}),
            ],
            None,
        );
        let (f, w) = render(Format::Anthropic, &h);
        let m = f["messages"].as_array().unwrap();
        assert_eq!(m.len(), 3, "{m:?}");
        assert_eq!(m[0]["role"], "user");
        assert_eq!(m[2]["role"], "user");
        assert_eq!(m[2]["content"][0]["type"], "tool_result");
        assert_eq!(m[2]["content"][1]["text"], "also this");
        assert_eq!(
            m[2]["content"].as_array().unwrap().len(),
            2,
            "orphan dropped"
        );
        assert!(f.get("system").is_none());
        assert!(w
            .iter()
            .any(|w| w.contains("starts with an assistant turn")));
        assert!(w
            .iter()
            .any(|w| w.contains("\"zzz\" answers no earlier call")));
    }

    #[test]
    fn gemini_answers_every_call_in_the_next_user_turn() {
        let h = history(
            vec![
                json!({"role": "user", "parts": [text("go")]}),
                json!({"role": "assistant", "parts": [call("a"), call("b")]}),
                json!({"role": "tool", "parts": [result("a"), result("b")]}),
            ],
            Some("sys"),
        );
        let (f, _) = render(Format::Gemini, &h);
        let c = f["contents"].as_array().unwrap();
        assert_eq!(c[1]["parts"].as_array().unwrap().len(), 2);
        assert_eq!(c[2]["parts"].as_array().unwrap().len(), 2);
        assert_eq!(c[2]["parts"][1]["functionResponse"]["id"], "b");
        assert_eq!(f["system_instruction"], json!({"parts": [{"text": "sys"}]}));
    }

    #[test]
    fn gemini_names_an_unnamed_response_after_the_call_it_answers() {
        // Responses without a name answer the earliest open call with their id, also when a
        // later call reuses the id with another tool.
        let unnamed = |id: &str| json!({"type": "tool_call_response", "id": id, "result": "ok"});
        let named = |id: &str, name: &str| json!({"type": "tool_call", "id": id, "name": name, "arguments": {}});
        let h = history(
            vec![
                json!({"role": "user", "parts": [text("go")]}),
                json!({"role": "assistant", "parts": [named("a", "search"), named("b", "fetch")]}),
                json!({"role": "tool", "parts": [unnamed("a"), unnamed("b")]}),
                json!({"role": "assistant", "parts": [named("a", "other")]}),
                json!({"role": "tool", "parts": [unnamed("a"), unnamed("late")]}),
                json!({"role": "assistant", "parts": [named("late", "later_tool")]}),
            ],
            None,
        );
        let (f, _) = render(Format::Gemini, &h);
        let names: Vec<&str> = f["contents"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|c| c["parts"].as_array().unwrap())
            .filter_map(|p| p["functionResponse"]["name"].as_str())
            .collect();
        assert_eq!(names, ["search", "fetch", "other"]);
        // The response to a call that comes only later has no open call here: it is dropped
        // as an orphan, and the call after it as unanswered.
        let all: Vec<&Value> = f["contents"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|c| c["parts"].as_array().unwrap())
            .collect();
        assert!(!all.iter().any(|p| p["functionResponse"]["id"] == "late"));
    }

    #[test]
    fn a_response_a_renderer_leaves_out_does_not_shift_the_outcomes_of_others() {
        // A tool result inside an assistant message (damaged telemetry) comes before the
        // result of a failed call; the failed call must still be shown as an error.
        let mut h = history(
            vec![
                json!({"role": "user", "parts": [text("go")]}),
                json!({"role": "assistant", "parts": [call("a"), result("stray")]}),
                json!({"role": "tool", "parts": [result("a")]}),
            ],
            None,
        );
        h.effects = Arc::new(crate::continuation::Effects::new(vec![
            crate::domain::EffectOutcome {
                tool_call_id: "a".into(),
                tool_name: "f".into(),
                status: crate::domain::EffectStatus::Failed,
                error: Some("boom".into()),
                retry: None,
            },
        ]));
        let (f, _) = render(Format::Anthropic, &h);
        let results: Vec<&Value> = f["messages"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|m| m["content"].as_array().into_iter().flatten())
            .filter(|b| b["type"] == "tool_result")
            .collect();
        assert_eq!(results.len(), 1, "{f}");
        assert_eq!(results[0]["tool_use_id"], "a");
        assert_eq!(results[0]["is_error"], true, "{f}");
        let (f, _) = render(Format::OpenAiChat, &h);
        let tool = f["messages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["role"] == "tool")
            .cloned()
            .unwrap();
        assert_eq!(tool["content"], "{\"error\":\"ok\"}", "{f}");
    }

    #[test]
    fn images_by_reference_and_signed_thinking() {
        let h = history(
            vec![
                json!({"role": "user", "parts": [
                    {"type": "uri", "uri": "https://example.com/a.png", "mime_type": "image/png", "modality": "image"}
                ]}),
                json!({"role": "assistant", "parts": [
                    {"type": "thinking", "content": "hmm", "signature": "sig"}, text("done")
                ]}),
            ],
            None,
        );
        for format in [
            Format::OpenAiChat,
            Format::OpenAiResponses,
            Format::Anthropic,
            Format::Gemini,
        ] {
            let (_, w) = render(format, &h);
            assert!(
                w.iter().any(|w| w.contains("only by reference")),
                "{format:?}: {w:?}"
            );
        }
        let (f, w) = render(Format::Anthropic, &h);
        assert_eq!(
            f["messages"][1]["content"][0],
            json!({"type": "thinking", "thinking": "hmm", "signature": "sig"})
        );
        assert!(!w.iter().any(|w| w.contains("thinking")));
        let (f, _) = render(Format::OpenAiResponses, &h);
        assert_eq!(
            f["input"][1],
            json!({"role": "assistant", "content": "done"})
        );
    }

    #[test]
    fn repair_is_deterministic_and_closes_every_open_call() {
        let mut h = history(
            vec![
                json!({"role": "user", "parts": [text("go")]}),
                json!({"role": "assistant", "parts": [call("a"), call("b")]}),
                json!({"role": "tool", "parts": [result("a")]}),
            ],
            None,
        );
        let repaired = h.repair();
        assert_eq!(repaired.len(), 1);
        assert_eq!(repaired[0].tool_call_id, "b");
        assert_eq!(h.messages.len(), 4);
        assert_eq!(h.messages[2]["parts"][0]["outcome"], "interrupted");
        assert_eq!(h.hashes.len(), 4);
        assert!(
            h.repair().is_empty(),
            "a repaired history has nothing left to repair"
        );
        let (f, w) = render(Format::OpenAiChat, &h);
        assert!(w.is_empty(), "{w:?}");
        assert_eq!(f["messages"].as_array().unwrap().len(), 4);
    }

    /// The parts the generated histories below are made of: every kind a renderer tells apart,
    /// with the shapes of fields that change what it writes (text to escape, arguments as an
    /// object, as JSON text, as other text or missing, results of each shape and outcome, media
    /// of each kind).
    fn generated_parts() -> Vec<Value> {
        vec![
            json!({"type": "text", "content": "plain"}),
            json!({"type": "text", "content": "line\nbreak \"q\" \\ é \u{1}"}),
            json!({"type": "text", "content": {"k": [1, null]}}),
            json!({"type": "text"}),
            json!({"type": "reasoning", "content": "r", "signature": "s"}),
            json!({"type": "thinking", "content": "t"}),
            json!({"type": "tool_call", "id": "a", "name": "f", "arguments": {"x": 1}}),
            json!({"type": "tool_call", "id": "b", "name": "g", "arguments": "{\"y\":null}"}),
            json!({"type": "tool_call", "id": "a", "name": "f", "arguments": "not json"}),
            json!({"type": "tool_call", "id": "c"}),
            json!({"type": "tool_call", "id": "b", "name": "g", "arguments": null}),
            json!({"type": "tool_call_response", "id": "a", "name": "f", "result": "ok"}),
            json!({"type": "tool_call_response", "id": "b", "response": {"v": 2}}),
            json!({"type": "tool_call_response", "id": "a", "result": [{"text": "x"}], "outcome": "failed"}),
            json!({"type": "tool_call_response", "id": "c", "result": null, "outcome": "interrupted"}),
            json!({"type": "tool_call_response", "id": "b", "result": 3, "outcome": "retried"}),
            json!({"type": "tool_call_response", "id": "q", "result": "orphan"}),
            json!({"type": "tool_call_response", "id": "a"}),
            json!({"type": "blob", "content": "AAAA", "mime_type": "image/png", "modality": "image"}),
            json!({"type": "blob", "content": "AAAA", "mime_type": "audio/wav"}),
            json!({"type": "blob", "content": "AAAA", "mime_type": "application/pdf"}),
            json!({"type": "blob", "content": "AAAA", "mime_type": "text/csv"}),
            json!({"type": "blob", "mime_type": "image/png"}),
            json!({"type": "uri", "uri": "https://example.com/a.png", "mime_type": "image/png", "modality": "image"}),
            json!({"type": "uri", "uri": "https://example.com/b.mp3", "modality": "audio"}),
            json!({"type": "custom", "content": [1]}),
            json!({"type": "", "content": "empty type"}),
            json!({"content": "untyped"}),
            json!("not an object"),
        ]
    }

    /// A history of `seed`'s choosing: up to seven messages of any role (or none), each with up to
    /// four parts of [`generated_parts`], with or without instructions.
    fn generated_history(seed: u64) -> History {
        let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut next = move |n: usize| {
            // xorshift64*: a fixed sequence per seed, so the recorded digests stay valid.
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            (state.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 33) as usize % n
        };
        let parts = generated_parts();
        let roles = ["user", "assistant", "tool", "system", "other", ""];
        let messages: Vec<Value> = (0..next(8))
            .map(|_| {
                let picked: Vec<Value> = (0..next(5))
                    .map(|_| parts[next(parts.len())].clone())
                    .collect();
                match roles[next(roles.len())] {
                    "" => json!({"parts": picked}),
                    role => json!({"role": role, "parts": picked}),
                }
            })
            .collect();
        let instructions = [None, Some("be brief"), Some("two\nlines")][next(3)];
        history(messages, instructions)
    }

    /// Where the digests of recorded renders are kept ([`rendered_as_recorded`]).
    const DIGESTS: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/src/continuation/testdata/render_digests.tsv"
    );

    /// The first eight bytes of the SHA-256 of `parts`, in hex.
    fn digest(parts: &[&[u8]]) -> String {
        use sha2::{Digest, Sha256};
        let mut hasher = Sha256::new();
        for part in parts {
            hasher.update(part);
            hasher.update(b"\n");
        }
        hex::encode(&hasher.finalize()[..8])
    }

    /// The recorded renders: `input digest\tformat` to the digest of the output and warnings.
    fn recorded() -> &'static std::sync::Mutex<std::collections::BTreeMap<String, String>> {
        static RECORDED: std::sync::OnceLock<
            std::sync::Mutex<std::collections::BTreeMap<String, String>>,
        > = std::sync::OnceLock::new();
        RECORDED.get_or_init(|| {
            let text = std::fs::read_to_string(DIGESTS).unwrap_or_default();
            let map = text
                .lines()
                .filter_map(|l| l.rsplit_once('\t'))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            std::sync::Mutex::new(map)
        })
    }

    /// Renders `history` in `format`, checking that it gives the bytes and warnings recorded for it in
    /// [`DIGESTS`] (keyed by a digest of the messages and instructions). The digests were taken
    /// from the renderers that built a tree of the whole answer before writing it, checked byte
    /// for byte against the renderers that write in place. `STEPLINE_RECORD_RENDERS=1` records
    /// them again, after a change to a format that is meant. Gives the rendered fields as one JSON
    /// object, and the warnings.
    pub(crate) fn rendered_as_recorded(format: Format, history: &History) -> (Value, Vec<String>) {
        let messages: Vec<u8> = history
            .messages
            .iter()
            .flat_map(|m| serde_json::to_vec(m.as_ref()).unwrap())
            .collect();
        let instructions = serde_json::to_vec(&history.system_instructions).unwrap();
        let key = format!(
            "{}\t{}",
            digest(&[&messages, &instructions]),
            format.as_str()
        );
        let (fields, warnings) = super::render(format, history);
        let json = Out::Object(fields).to_json_vec();
        let output = digest(&[&json, &serde_json::to_vec(&warnings).unwrap()]);
        let mut map = recorded().lock().unwrap();
        if std::env::var_os("STEPLINE_RECORD_RENDERS").is_some() {
            map.insert(key, output);
            let text: String = map.iter().map(|(k, v)| format!("{k}\t{v}\n")).collect();
            std::fs::write(DIGESTS, text).unwrap();
        } else {
            assert_eq!(
                map.get(&key),
                Some(&output),
                "{key}: not what was recorded; rendered now: {} {warnings:?}",
                String::from_utf8_lossy(&json)
            );
        }
        (serde_json::from_slice(&json).unwrap(), warnings)
    }

    /// Parts of a stored message, for the format modules' tests.
    pub(crate) mod parts {
        use serde_json::{json, Value};

        /// A call of tool `f` with the id and arguments given.
        pub(crate) fn call(id: &str, args: Value) -> Value {
            json!({"type": "tool_call", "id": id, "name": "f", "arguments": args})
        }

        /// The answer to call `id`.
        pub(crate) fn result(id: &str, r: Value) -> Value {
            json!({"type": "tool_call_response", "id": id, "result": r})
        }

        /// A text part (its content a string, or any JSON a sender may put there).
        pub(crate) fn text(t: impl Into<Value>) -> Value {
            json!({"type": "text", "content": t.into()})
        }

        /// An inline blob of the media type given.
        pub(crate) fn blob(mime: &str) -> Value {
            json!({"type": "blob", "mime_type": mime, "content": "QUJD"})
        }
    }

    /// The `role` of each message of a rendered list.
    pub(crate) fn roles(messages: &Value) -> Vec<&str> {
        messages
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["role"].as_str().unwrap())
            .collect()
    }

    /// Given room enough for what it will write, a renderer writes into that very buffer: its own
    /// guess of the size (larger here) does not move it ([`super::writer::room`]).
    #[test]
    fn a_renderer_writes_into_the_room_it_is_given() {
        let h = history(
            vec![
                json!({"role": "user", "parts": [parts::text("go")]}),
                json!({"role": "assistant", "parts": [parts::call("a", json!({"x": 1}))]}),
                json!({"role": "tool", "parts": [parts::result("a", json!("ok"))]}),
                json!({"role": "assistant", "parts": [parts::text("done")]}),
            ],
            Some("be brief"),
        );
        let written = |fields: &super::Fields<'_>| {
            fields.iter().find_map(|(_, value)| match value {
                Out::Written(json) => Some((json.as_ptr(), json.len())),
                _ => None,
            })
        };
        for name in Format::NAMES {
            let format = Format::parse(name).unwrap();
            let (fields, _) = super::render(format, &h);
            let (_, len) = written(&fields).unwrap();
            let buf = Vec::with_capacity(len);
            let at = buf.as_ptr();
            let (fields, _) = super::render_into(format, &h, buf);
            assert_eq!(written(&fields), Some((at, len)), "{name}");
        }
    }

    /// Every format renders 200 generated histories to the bytes and warnings recorded for them.
    #[test]
    fn generated_histories_render_to_the_recorded_bytes() {
        for seed in 0..200u64 {
            let h = generated_history(seed);
            for name in Format::NAMES {
                rendered_as_recorded(Format::parse(name).unwrap(), &h);
            }
        }
    }

    proptest::proptest! {
        /// Any mix of parts renders in every format to JSON that parses, with the format's
        /// fields in it.
        #[test]
        fn any_history_renders_to_valid_json_in_every_format(seed in 200u64..) {
            let h = generated_history(seed);
            for name in Format::NAMES {
                let format = Format::parse(name).unwrap();
                let (fields, _) = super::render(format, &h);
                let names: Vec<&str> = fields.iter().map(|(k, _)| *k).collect();
                let json = Out::Object(fields).to_json_vec();
                let parsed: Value = serde_json::from_slice(&json)
                    .unwrap_or_else(|e| panic!("{name}: {e}: {}", String::from_utf8_lossy(&json)));
                for key in names {
                    proptest::prop_assert!(parsed.get(key).is_some(), "{name} lost {key}");
                }
            }
        }
    }
}
