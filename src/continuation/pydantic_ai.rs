//! Pydantic AI `ModelMessage` JSON, loadable with `ModelMessagesTypeAdapter`.
//!
//! Consecutive non-assistant OTel messages make one `ModelRequest` (Pydantic AI splits a request
//! into one message per role); each assistant message is one `ModelResponse`. Timestamps are always
//! emitted (an omitted one would default to "now" on load): a request's is the start of the first
//! model request that sent it, a response's the end of the model request that produced it.

use std::collections::HashMap;

use serde_json::{json, Map, Value};

use super::History;
use crate::domain::{format_timestamp, MessageHash};

/// Renders `messages` as a list of `ModelMessage`.
pub fn render(history: &History) -> (Map<String, Value>, Vec<String>) {
    let mut warnings = Vec::new();
    let instructions = instructions_text(history.system_instructions.as_ref());
    let fallback_ns = history.models().last().map(|m| m.end_ns).unwrap_or(0);
    let run_alias = history.run.aliases.first().cloned();
    let conversation = history.run.conversation_id.clone();
    let effects = history.effects_by_id();
    let mut seen_returns: HashMap<String, usize> = HashMap::new();

    let mut out: Vec<Value> = Vec::new();
    let mut request: Option<(Vec<Value>, u64)> = None;
    let flush = |request: &mut Option<(Vec<Value>, u64)>, out: &mut Vec<Value>| {
        if let Some((parts, at)) = request.take() {
            let mut m = Map::new();
            m.insert("kind".into(), json!("request"));
            m.insert("parts".into(), Value::Array(parts));
            m.insert("timestamp".into(), json!(format_timestamp(at)));
            m.insert("instructions".into(), json!(instructions));
            if let Some(id) = &run_alias {
                m.insert("run_id".into(), json!(id));
            }
            if let Some(c) = &conversation {
                m.insert("conversation_id".into(), json!(c));
            }
            out.push(Value::Object(m));
        }
    };

    for (index, (message, hash)) in history
        .messages
        .iter()
        .zip(history.hashes.iter())
        .enumerate()
    {
        let role = message
            .get("role")
            .and_then(Value::as_str)
            .unwrap_or("user");
        let parts = message
            .get("parts")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        if role == "assistant" {
            flush(&mut request, &mut out);
            out.push(response(
                history,
                message,
                hash,
                &parts,
                index,
                &mut warnings,
                fallback_ns,
                run_alias.as_deref(),
                conversation.as_deref(),
            ));
            continue;
        }
        let at = history.first_sent(hash).unwrap_or(fallback_ns);
        let stamp = format_timestamp(at);
        let (parts_out, _) = request.get_or_insert_with(|| (Vec::new(), at));
        // A user message with media was one multimodal user prompt (a list of text and media).
        let multimodal = role == "user"
            && parts
                .iter()
                .any(|p| matches!(p.get("type").and_then(Value::as_str), Some("blob" | "uri")));
        let mut prompt_items: Vec<Value> = Vec::new();
        for part in &parts {
            let kind = part.get("type").and_then(Value::as_str).unwrap_or("");
            match kind {
                "text" if multimodal => prompt_items.push(text_of(part)),
                "blob" | "uri" if multimodal => match media_content(part) {
                    Some(content) => prompt_items.push(content),
                    None => warnings.push(format!(
                        "message {index}: {kind} part without data or uri was dropped"
                    )),
                },
                "text" if role == "system" => parts_out.push(json!({
                    "part_kind": "system-prompt",
                    "content": text_of(part),
                    "timestamp": stamp,
                })),
                "text" => parts_out.push(json!({
                    "part_kind": "user-prompt",
                    "content": text_of(part),
                    "timestamp": stamp,
                })),
                "tool_call_response" => {
                    let id = part.get("id").and_then(Value::as_str).unwrap_or("").to_string();
                    let n = seen_returns.entry(id.clone()).or_insert(0);
                    let effect = effects.get(id.as_str()).and_then(|list| list.get(*n)).copied();
                    *n += 1;
                    let content = part
                        .get("response")
                        .or_else(|| part.get("result"))
                        .cloned()
                        .unwrap_or(Value::Null);
                    let mut p = Map::new();
                    p.insert("part_kind".into(), json!("tool-return"));
                    p.insert(
                        "tool_name".into(),
                        json!(part
                            .get("name")
                            .and_then(Value::as_str)
                            .or(effect.map(|e| e.tool_name.as_str()))
                            .unwrap_or("")),
                    );
                    p.insert("content".into(), content);
                    p.insert("tool_call_id".into(), json!(id));
                    p.insert("timestamp".into(), json!(stamp));
                    if let Some(outcome) = part.get("outcome").and_then(Value::as_str) {
                        // A synthesized result (repair=true) says its own outcome.
                        p.insert("outcome".into(), json!(outcome));
                        parts_out.push(Value::Object(p));
                        continue;
                    }
                    match effect.and_then(|e| e.retry.clone()) {
                        Some(retry) => {
                            p.insert("outcome".into(), json!("retried"));
                            p.insert("retry".into(), retry);
                        }
                        None => {
                            let failed = effect.is_some_and(|e| e.error.is_some());
                            p.insert("outcome".into(), json!(if failed { "failed" } else { "success" }));
                        }
                    }
                    parts_out.push(Value::Object(p));
                }
                "blob" | "uri" => match media_content(part) {
                    Some(content) => parts_out.push(json!({
                        "part_kind": "user-prompt",
                        "content": [content],
                        "timestamp": stamp,
                    })),
                    None => warnings.push(format!(
                        "message {index}: {kind} part without data or uri was dropped"
                    )),
                },
                other => warnings.push(format!(
                    "message {index}: part type {other:?} has no Pydantic AI request equivalent and was dropped"
                )),
            }
        }
        if !prompt_items.is_empty() {
            parts_out.push(json!({
                "part_kind": "user-prompt",
                "content": prompt_items,
                "timestamp": stamp,
            }));
        }
    }
    flush(&mut request, &mut out);

    let mut fields = Map::new();
    fields.insert("messages".into(), Value::Array(out));
    (fields, warnings)
}

#[allow(clippy::too_many_arguments)]
fn response(
    history: &History,
    _message: &Value,
    hash: &MessageHash,
    parts: &[Value],
    index: usize,
    warnings: &mut Vec<String>,
    fallback_ns: u64,
    run_alias: Option<&str>,
    conversation: Option<&str>,
) -> Value {
    let producer = history.producer_of(hash);
    let mut parts_out = Vec::new();
    for part in parts {
        match part.get("type").and_then(Value::as_str).unwrap_or("") {
            "text" => parts_out.push(json!({"part_kind": "text", "content": text_of(part)})),
            "tool_call" => parts_out.push(json!({
                "part_kind": "tool-call",
                "tool_name": part.get("name").cloned().unwrap_or(json!("")),
                "args": part.get("arguments").cloned().unwrap_or(Value::Null),
                "tool_call_id": part.get("id").cloned().unwrap_or(json!("")),
            })),
            "reasoning" | "thinking" => parts_out.push(json!({"part_kind": "thinking", "content": text_of(part)})),
            other => warnings.push(format!(
                "message {index}: part type {other:?} has no Pydantic AI response equivalent and was dropped"
            )),
        }
    }
    let mut m = Map::new();
    m.insert("kind".into(), json!("response"));
    m.insert("parts".into(), Value::Array(parts_out));
    m.insert(
        "timestamp".into(),
        json!(format_timestamp(
            producer.map(|p| p.end_ns).unwrap_or(fallback_ns)
        )),
    );
    if let Some(p) = producer {
        if let Some(model) = &p.model {
            m.insert("model_name".into(), json!(model));
        }
        m.insert(
            "usage".into(),
            json!({
                "input_tokens": p.input_tokens.unwrap_or(0),
                "output_tokens": p.output_tokens.unwrap_or(0),
            }),
        );
    }
    if let Some(id) = run_alias {
        m.insert("run_id".into(), json!(id));
    }
    if let Some(c) = conversation {
        m.insert("conversation_id".into(), json!(c));
    }
    Value::Object(m)
}

fn text_of(part: &Value) -> Value {
    part.get("content").cloned().unwrap_or(json!(""))
}

/// A `blob` or `uri` part as Pydantic AI user content (`BinaryContent` / `ImageUrl`...).
fn media_content(part: &Value) -> Option<Value> {
    let mime = part.get("mime_type").and_then(Value::as_str);
    let modality = part.get("modality").and_then(Value::as_str).unwrap_or("");
    if let Some(data) = part.get("content").and_then(Value::as_str) {
        return Some(json!({
            "kind": "binary",
            "data": data,
            "media_type": mime.unwrap_or("application/octet-stream"),
        }));
    }
    let uri = part.get("uri").and_then(Value::as_str)?;
    let kind = match modality {
        "image" => "image-url",
        "audio" => "audio-url",
        "video" => "video-url",
        _ => "document-url",
    };
    Some(json!({"kind": kind, "url": uri}))
}

/// Pydantic AI keeps instructions as one string on each request.
fn instructions_text(parts: Option<&Value>) -> Option<String> {
    let texts: Vec<&str> = parts?
        .as_array()?
        .iter()
        .filter_map(|p| p.get("content").and_then(Value::as_str))
        .collect();
    (!texts.is_empty()).then(|| texts.join("\n\n"))
}
