//! Provider formats checked against an oracle that is not ours: Pydantic AI's own model classes.
//!
//! A real Pydantic AI agent (`format_scenario.py`: an image in the prompt, thinking, parallel tool
//! calls, a failing tool and its retry, a structured result) exports its spans to the real
//! stepline binary. For every snapshot of that run, `format_oracle.py` loads stepline's
//! `pydantic-ai` continuation and lets OpenAIChatModel, OpenAIResponsesModel, AnthropicModel and
//! GoogleModel build the request they would send (captured by a mock HTTP transport). This test
//! compares those requests with stepline's own `openai-chat`, `openai-responses`, `anthropic` and
//! `gemini` exports of the same snapshot (interrupted snapshots with `repair=true` on both sides).
//!
//! The only differences allowed are deliberate and listed in [`normalize_oracle`]: Pydantic AI
//! carries thinking that has no provider signature as tagged text (or, for Gemini, as an unsigned
//! thought), where stepline drops it and says so in `warnings`.

mod support;

use std::time::Duration;

use serde_json::{json, Map, Value};
use support::{encode, run_script, truncate, Stepline};

const FORMATS: &[&str] = &["openai-chat", "openai-responses", "anthropic", "gemini"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_formats_match_pydantic_ai_model_classes() {
    let stepline = Stepline::start().await;
    let scenario = run_script(
        "format_scenario.py",
        &["--endpoint", &stepline.otlp_http_url()],
        Duration::from_secs(180),
    )
    .await
    .json_line();
    assert_eq!(scenario["export"]["failed_batches"], 0, "{scenario}");
    let run_id = scenario["run_id"].as_str().expect("run_id").to_string();
    let run_path = format!("/v1/runs/{}", encode(&run_id));

    let snapshots: Vec<Value> = stepline
        .wait_for(
            "the scenario run, completed, with its six snapshots",
            Duration::from_secs(30),
            || async {
                let run = stepline.get(&run_path).await;
                let snaps = stepline.get(&format!("{run_path}/snapshots")).await;
                match (run.json.as_ref(), snaps.json.as_ref()) {
                    (Some(r), Some(s))
                        if r["status"] == "completed"
                            && s["snapshots"].as_array().is_some_and(|a| a.len() == 6) =>
                    {
                        Ok(s["snapshots"].as_array().cloned().unwrap_or_default())
                    }
                    _ => Err(format!("{} / {}", run.text, snaps.text)),
                }
            },
        )
        .await;

    let oracle = run_script(
        "format_oracle.py",
        &["--api", &stepline.api_url(""), "--run-id", &run_id],
        Duration::from_secs(180),
    )
    .await
    .json_line();

    let mut compared = 0;
    for snap in &snapshots {
        let seq = snap["seq"].as_u64().expect("seq");
        let interrupted = snap["state"] != "complete";
        for format in FORMATS {
            let mut path = format!("{run_path}/continuation?format={format}&at={seq}");
            if interrupted {
                path.push_str("&repair=true");
            }
            let ours = stepline.get_ok(&path).await;
            let expected = normalize_oracle(format, &oracle[seq.to_string()][*format]);
            let actual = request_fields(format, &ours);
            assert_eq!(
                actual,
                expected,
                "seq {seq}, {format}: stepline's export differs from Pydantic AI's request\n\
                 stepline: {}\noracle:   {}\nwarnings: {}",
                truncate(&actual.to_string(), 6000),
                truncate(&expected.to_string(), 6000),
                ours["warnings"]
            );
            check_warnings(format, seq, &ours);
            if interrupted {
                assert!(
                    ours["repaired"].as_array().is_some_and(|r| !r.is_empty()),
                    "seq {seq}, {format}: repaired calls listed: {ours}"
                );
            }
            compared += 1;
        }
    }
    assert_eq!(compared, 6 * FORMATS.len());
}

/// What stepline dropped must be said: thinking (no signature) once the model has thought, and
/// for OpenAI Chat the structured tool result sent as JSON text.
fn check_warnings(format: &str, seq: u64, body: &Value) {
    let warnings: Vec<&str> = body["warnings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    if seq >= 1 {
        assert!(
            warnings.iter().any(|w| w.contains("thinking")),
            "seq {seq}, {format}: thinking was dropped without a warning: {warnings:?}"
        );
    }
    if seq >= 4 && format.starts_with("openai") {
        assert!(
            warnings.iter().any(|w| w.contains("is not text")),
            "seq {seq}, {format}: structured result stringified without a warning: {warnings:?}"
        );
    }
}

/// The provider request fields of stepline's export, in the oracle's spelling.
fn request_fields(format: &str, body: &Value) -> Value {
    match format {
        "openai-chat" => json!({"messages": body["messages"]}),
        "openai-responses" => json!({"instructions": body["instructions"], "input": body["input"]}),
        "anthropic" => {
            json!({"system": body.get("system").cloned().unwrap_or(Value::Null), "messages": body["messages"]})
        }
        "gemini" => camel_keys(&json!({
            "systemInstruction": body["system_instruction"],
            "contents": body["contents"],
        })),
        other => panic!("unknown format {other}"),
    }
}

/// Pydantic AI's request, minus what stepline deliberately does differently:
/// - thinking without a provider signature: Pydantic AI sends it as `<think>` text (OpenAI Chat:
///   inside the assistant content; Responses: an extra assistant message), as an
///   `<assistant_thinking>` user block (Anthropic), or as an unsigned thought part (Gemini);
///   stepline drops it with a warning (providers.md: thinking needs its signature);
/// - Anthropic `system` given as text blocks: stepline gives the same text as one string;
/// - Gemini: the SDK leaves `inline_data.mime_type` in snake case and adds `role` to
///   `systemInstruction`; protobuf JSON accepts either spelling, so keys are compared in camel case.
fn normalize_oracle(format: &str, oracle: &Value) -> Value {
    let mut o = oracle.clone();
    match format {
        "openai-chat" => {
            for m in o["messages"].as_array_mut().into_iter().flatten() {
                if let Some(text) = m["content"].as_str() {
                    if let Some(rest) = strip_think(text) {
                        m["content"] = if rest.is_empty() {
                            Value::Null
                        } else {
                            json!(rest)
                        };
                    }
                }
            }
        }
        "openai-responses" => {
            if let Some(items) = o["input"].as_array_mut() {
                items.retain(|i| {
                    !(i["role"] == "assistant"
                        && i["content"]
                            .as_str()
                            .is_some_and(|t| t.starts_with("<think>")))
                });
            }
        }
        "anthropic" => {
            let system: Vec<&str> = o["system"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|b| b["text"].as_str())
                .collect();
            let system = if system.is_empty() {
                Value::Null
            } else {
                json!(system.join("\n\n"))
            };
            let mut merged: Vec<Value> = Vec::new();
            for m in o["messages"].as_array().into_iter().flatten() {
                let blocks: Vec<Value> = m["content"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|b| {
                        !b["text"]
                            .as_str()
                            .is_some_and(|t| t.starts_with("<assistant_thinking>"))
                    })
                    .cloned()
                    .collect();
                if blocks.is_empty() {
                    continue;
                }
                match merged.last_mut() {
                    Some(last) if last["role"] == m["role"] => {
                        if let Some(a) = last["content"].as_array_mut() {
                            a.extend(blocks);
                        }
                    }
                    _ => merged.push(json!({"role": m["role"], "content": blocks})),
                }
            }
            o = json!({"system": system, "messages": merged});
        }
        "gemini" => {
            for c in o["contents"].as_array_mut().into_iter().flatten() {
                if let Some(parts) = c["parts"].as_array_mut() {
                    parts.retain(|p| p["thought"] != json!(true));
                }
            }
            if let Some(si) = o["systemInstruction"].as_object_mut() {
                si.remove("role");
            }
            o = camel_keys(&o);
        }
        other => panic!("unknown format {other}"),
    }
    o
}

/// `<think>\n…\n</think>` followed by the rest, if the text starts with it.
fn strip_think(text: &str) -> Option<String> {
    let rest = text.strip_prefix("<think>")?;
    let end = rest.find("</think>")?;
    Some(rest[end + "</think>".len()..].trim_start().to_string())
}

/// Object keys in lower camel case, recursively (`mime_type` → `mimeType`), except inside
/// function arguments and responses, which are user data.
fn camel_keys(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut out = Map::new();
            for (k, v) in map {
                let data = matches!(k.as_str(), "args" | "response");
                out.insert(camel(k), if data { v.clone() } else { camel_keys(v) });
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(camel_keys).collect()),
        other => other.clone(),
    }
}

fn camel(key: &str) -> String {
    let mut out = String::new();
    let mut upper = false;
    for c in key.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}
