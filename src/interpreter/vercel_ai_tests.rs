//! The `ai.*` convention over spans recorded from the real packages, and the shapes they do not
//! reach (v4 parts, damaged prompts, configured conversation keys).

use super::fixtures::{spans, V6, V7_GENAI, V7_LEGACY};
use super::*;
use crate::interpreter::{interpret_span, Convention};
use crate::test_fixtures::kv;

fn test_cut() -> Cut {
    Cut::new(&crate::limits::Limits::default())
}

/// The interpretation of every span of a recording (none may be refused).
fn interpreted(recorded: &[u8]) -> Vec<(Span, Interpreted)> {
    spans(recorded)
        .into_iter()
        .map(|s| {
            let i = interpret_span(&s).unwrap_or_else(|| panic!("{} not interpreted", s.name));
            (s, i)
        })
        .collect()
}

/// The body of the `n`-th input message of a model-request interpretation.
fn input_body(i: &Interpreted, n: usize) -> &Value {
    let hash = i.fact.input.as_ref().unwrap()[n].hash;
    i.bodies().find(|(h, _)| **h == hash).unwrap().1
}

fn output_body(i: &Interpreted) -> &Value {
    let hash = i.fact.output.as_ref().unwrap()[0].hash;
    i.bodies().find(|(h, _)| **h == hash).unwrap().1
}

#[test]
fn v6_generate_and_stream_spans_map_onto_one_run_each() {
    let all = interpreted(V6);
    assert_eq!(all.len(), 14);
    let generate_trace = &all
        .iter()
        .find(|(s, _)| s.name == "ai.generateText")
        .unwrap()
        .0
        .trace_id;
    for (span, i) in &all {
        let attrs = Attributes(&span.attributes);
        assert_eq!(
            super::super::convention::detect(&attrs),
            Convention::VercelAi
        );
        assert_eq!(i.fact.agent_name.as_deref(), Some("travel-agent"));
        let kind = if &span.trace_id == generate_trace {
            "generate"
        } else {
            "stream"
        };
        assert_eq!(
            i.fact.conversation_id.as_deref(),
            Some(format!("vercel-session-{kind}").as_str())
        );
    }
    // Per trace: one run; every other span is keyed by it.
    for root_name in ["ai.generateText", "ai.streamText"] {
        let (root, run) = all.iter().find(|(s, _)| s.name == root_name).unwrap();
        assert_eq!(run.fact.kind, FactKind::AgentRun);
        let in_trace: Vec<&Interpreted> = all
            .iter()
            .filter(|(s, _)| s.trace_id == root.trace_id)
            .map(|(_, i)| i)
            .collect();
        assert_eq!(in_trace.len(), 7);
        let kinds = |k: FactKind| in_trace.iter().filter(|i| i.fact.kind == k).count();
        assert_eq!(kinds(FactKind::ModelRequest), 3);
        assert_eq!(kinds(FactKind::ToolCall), 3);
        for i in &in_trace {
            assert_eq!(i.run_span_id, run.fact.span_id, "{}", i.fact.name);
        }
    }
}

#[test]
fn v6_tool_calls_carry_ids_arguments_results_and_errors() {
    let all = interpreted(V6);
    let tool = |id: &str| {
        all.iter()
            .map(|(_, i)| i)
            .find(|i| i.fact.tool_call_id.as_deref() == Some(id))
            .unwrap()
            .fact
            .clone()
    };
    let weather = tool("g-w1");
    assert_eq!(weather.tool_name.as_deref(), Some("weather"));
    assert_eq!(weather.arguments, Some(json!({"city": "Paris"})));
    assert_eq!(
        weather.result,
        Some(json!({"city": "Paris", "sky": "sunny", "celsius": 21}))
    );
    assert!(weather.error.is_none());
    // A string result is JSON text of a string.
    assert_eq!(tool("s-t1").result, Some(json!("10:30 in Paris")));
    let book = tool("g-b1");
    assert_eq!(book.arguments, Some(json!({"city": "Paris", "nights": 2})));
    assert!(book.result.is_none());
    assert_eq!(book.error.as_deref(), Some("Error: no rooms left"));
}

#[test]
fn v6_model_requests_carry_the_provider_prompt_as_history() {
    let all = interpreted(V6);
    for prefix in ["g", "s"] {
        let requests: Vec<&Interpreted> = all
            .iter()
            .map(|(_, i)| i)
            .filter(|i| {
                i.fact.kind == FactKind::ModelRequest
                    && input_body(i, 0)["parts"][0]["content"]
                        .as_str()
                        .is_some_and(|t| t.ends_with(&format!("({prefix}).")))
            })
            .collect();
        assert_eq!(requests.len(), 3, "{prefix}");
        let mut requests = requests;
        requests.sort_by_key(|i| i.fact.input.as_ref().unwrap().len());
        let [first, second, third] = requests[..] else {
            unreachable!()
        };
        // The system message is the instructions, not history.
        assert_eq!(
            first.fact.system_instructions,
            Some(json!([{"type": "text", "content": "You are a travel agent. Be brief."}]))
        );
        assert_eq!(first.fact.input.as_ref().unwrap().len(), 1);
        // The first response: text, then both parallel calls, with parsed arguments.
        let out = output_body(first);
        assert_eq!(out["role"], "assistant");
        assert_eq!(out["parts"][0]["type"], "text");
        assert_eq!(out["parts"][1]["id"], format!("{prefix}-w1"));
        assert_eq!(out["parts"][2]["arguments"], json!({"city": "Paris"}));
        let requested: Vec<&str> = first
            .fact
            .requested_calls
            .iter()
            .map(|c| c.id.as_str())
            .collect();
        assert_eq!(requested, [format!("{prefix}-w1"), format!("{prefix}-t1")]);
        // Each step's output is the next step's history, message for message.
        assert_eq!(
            first.fact.output.as_ref().unwrap()[0].hash,
            second.fact.input.as_ref().unwrap()[1].hash
        );
        assert_eq!(
            second.fact.output.as_ref().unwrap()[0].hash,
            third.fact.input.as_ref().unwrap()[3].hash
        );
        // Tool results: json and text outputs as the value, an error output marked failed.
        let results = input_body(second, 2);
        assert_eq!(results["role"], "tool");
        assert_eq!(results["parts"][0]["response"]["sky"], "sunny");
        assert_eq!(results["parts"][1]["response"], "10:30 in Paris");
        assert!(results["parts"][0].get("outcome").is_none());
        let failed = input_body(third, 4);
        assert_eq!(failed["parts"][0]["response"], "no rooms left");
        assert_eq!(failed["parts"][0]["outcome"], "failed");
        assert_eq!(failed["parts"][0]["name"], "book");
        assert_eq!(third.fact.input_tokens, Some(10));
        assert_eq!(third.fact.model.as_deref(), Some("mock-model"));
        assert_eq!(third.fact.provider.as_deref(), Some("mock-provider"));
        assert_eq!(
            output_body(third)["parts"][0]["content"],
            format!("Paris is sunny; booking failed ({prefix}).")
        );
    }
}

#[test]
fn v7_legacy_tool_calls_nest_in_the_model_request() {
    let all = interpreted(V7_LEGACY);
    let (_, run) = all
        .iter()
        .find(|(s, _)| s.name == "ai.generateText")
        .unwrap();
    // 7.0.173's LegacyOpenTelemetry drops `ai.telemetry.metadata.*`: no conversation id.
    assert_eq!(run.fact.conversation_id, None);
    assert_eq!(run.fact.agent_name.as_deref(), Some("travel-agent"));
    for (_, i) in all.iter().filter(|(s, _)| s.name == "ai.toolCall") {
        // Keyed by the model request it nests in, which groups its children under the run.
        let parent = all
            .iter()
            .find(|(_, p)| p.fact.span_id == i.run_span_id)
            .unwrap();
        assert_eq!(parent.1.fact.kind, FactKind::ModelRequest);
        assert!(crate::interpreter::groups_children(&parent.1.fact));
        assert_eq!(parent.1.run_span_id, run.fact.span_id);
    }
    assert_eq!(
        all.iter()
            .filter(|(_, i)| i.fact.kind == FactKind::ToolCall)
            .count(),
        3
    );
}

#[test]
fn v7_genai_steps_group_and_the_merged_root_output_is_not_history() {
    let all = interpreted(V7_GENAI);
    let (_, root) = all
        .iter()
        .find(|(s, _)| s.name.starts_with("invoke_agent"))
        .unwrap();
    assert_eq!(root.fact.kind, FactKind::AgentRun);
    assert_eq!(root.fact.agent_name.as_deref(), Some("travel-agent"));
    // The root's merged output is not read as messages.
    assert!(root.fact.all_messages.is_none() && root.fact.output.is_none());
    assert!(root.messages.is_empty());
    let steps: Vec<&Interpreted> = all
        .iter()
        .filter(|(s, _)| s.name.starts_with("step "))
        .map(|(_, i)| i)
        .collect();
    assert_eq!(steps.len(), 3);
    for step in &steps {
        assert_eq!(step.fact.kind, FactKind::Group);
        assert_eq!(step.run_span_id, root.fact.span_id);
    }
    for (s, i) in &all {
        if s.name.starts_with("chat ") || s.name.starts_with("execute_tool ") {
            assert!(steps.iter().any(|g| g.fact.span_id == i.run_span_id));
        }
    }
}

#[test]
fn v4_parts_args_and_result_are_read() {
    let prompt = json!([
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [
            {"type": "tool-call", "toolCallId": "c1", "toolName": "f", "args": {"x": 1}}]},
        {"role": "tool", "content": [
            {"type": "tool-result", "toolCallId": "c1", "toolName": "f", "result": {"y": 2}},
            {"type": "tool-result", "toolCallId": "c2", "toolName": "f", "result": "bad",
             "isError": true}]},
        {"role": "system", "content": "later"},
    ]);
    let s = crate::test_fixtures::span(
        2,
        1,
        "ai.generateText.doGenerate",
        10,
        vec![
            kv("ai.operationId", "ai.generateText.doGenerate"),
            kv("ai.prompt.messages", &prompt.to_string()),
            kv("ai.telemetry.metadata.threadId", "t-9"),
            kv("ai.usage.promptTokens", "7"),
        ],
    );
    let i = super::interpret_span(&s, None, &mut test_cut()).unwrap();
    assert_eq!(i.fact.conversation_id.as_deref(), Some("t-9"));
    assert_eq!(i.fact.input_tokens, Some(7));
    assert!(i.fact.output.is_none());
    assert_eq!(input_body(&i, 0)["parts"][0]["content"], "hi");
    assert_eq!(input_body(&i, 1)["parts"][0]["arguments"]["x"], 1);
    let results = input_body(&i, 2);
    assert_eq!(results["parts"][0]["response"]["y"], 2);
    assert_eq!(results["parts"][1]["outcome"], "failed");
    // A system message after the conversation began stays in place.
    assert_eq!(input_body(&i, 3)["role"], "system");
}

#[test]
fn damaged_prompts_are_content_problems_and_other_operations_are_ignored() {
    let request = |prompt: &str| {
        crate::test_fixtures::span(
            2,
            1,
            "ai.streamText.doStream",
            10,
            vec![
                kv("ai.operationId", "ai.streamText.doStream"),
                kv("ai.prompt.messages", prompt),
            ],
        )
    };
    for damaged in [
        r#"[{"role":"user","content":[{"type":"te"#,
        r#"{"a":1}"#,
        r#"[{"x":1}]"#,
    ] {
        let i = super::interpret_span(&request(damaged), None, &mut test_cut()).unwrap();
        assert!(i.fact.input.is_none(), "{damaged}");
        assert!(i.fact.content_problem.is_some(), "{damaged}");
    }
    let without = crate::test_fixtures::span(
        2,
        1,
        "ai.streamText.doStream",
        10,
        vec![kv("ai.operationId", "ai.streamText.doStream")],
    );
    let i = super::interpret_span(&without, None, &mut test_cut()).unwrap();
    assert!(i
        .fact
        .content_problem
        .as_deref()
        .is_some_and(|p| p.contains("recordInputs")));
    let embed =
        crate::test_fixtures::span(2, 1, "ai.embed", 10, vec![kv("ai.operationId", "ai.embed")]);
    assert!(super::interpret_span(&embed, None, &mut test_cut()).is_none());
}

#[test]
fn conversation_keys_default_in_order() {
    let attrs = vec![
        kv("ai.telemetry.metadata.threadId", "thread"),
        kv("ai.telemetry.metadata.session_id", "snake"),
    ];
    let keys = conversation_attributes();
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    assert_eq!(Attributes(&attrs).str(&keys).as_deref(), Some("snake"));
}

/// What an interpretation gives, whatever holds the bodies: the fact and every body in order.
fn outcome(i: &Interpreted) -> (SpanFact, String, Vec<(crate::domain::MessageHash, Value)>) {
    let bodies = i.bodies().map(|(h, v)| (*h, v.clone())).collect();
    (i.fact.clone(), i.run_span_id.clone(), bodies)
}

#[test]
fn prompts_read_through_the_memo_give_what_a_full_read_gives() {
    use crate::interpreter::{interpret_span_with, PrefixMemo};
    let limits = crate::limits::Limits::default();
    // The recordings, span by span, through one memo.
    for recorded in [V6, V7_LEGACY] {
        let memo = PrefixMemo::default();
        for s in spans(recorded) {
            let plain = interpret_span(&s);
            let memoised = interpret_span_with(&s, &memo, &limits).ok();
            assert_eq!(plain.as_ref().map(outcome), memoised.as_ref().map(outcome));
        }
    }
    // Steps of growing prompts, with and without a leading system message, with a changed
    // early message, a message without a role and a prompt nested too deep in between.
    let deep = (0..80).fold(json!("x"), |v, _| json!([v]));
    for system in [false, true] {
        let memo = PrefixMemo::default();
        let mut prompt: Vec<Value> = Vec::new();
        if system {
            prompt.push(json!({"role": "system", "content": "be brief"}));
        }
        prompt.push(json!({"role": "user", "content": [{"type": "text", "text": "go"}]}));
        for k in 0..6 {
            let mut sent = prompt.clone();
            match k {
                2 => sent[usize::from(system)] = json!({"role": "user", "content": "changed"}),
                3 => sent.push(json!({"content": "no role"})),
                4 => sent.push(json!({"role": "user", "content": [{"type": "x", "v": deep}]})),
                _ => {}
            }
            let s = crate::test_fixtures::span(
                2,
                1,
                "ai.generateText.doGenerate",
                10,
                vec![
                    kv("ai.operationId", "ai.generateText.doGenerate"),
                    kv("ai.prompt.messages", &Value::Array(sent).to_string()),
                    kv("ai.response.text", &format!("answer {k}")),
                ],
            );
            let plain = interpret_span(&s).unwrap();
            let memoised = interpret_span_with(&s, &memo, &limits).unwrap();
            assert_eq!(
                outcome(&plain),
                outcome(&memoised),
                "system {system}, step {k}"
            );
            // Step 3's message without a role makes the whole prompt a content problem.
            if k != 3 {
                assert!(plain.fact.input.is_some(), "step {k}");
                assert_eq!(plain.fact.system_instructions.is_some(), system);
            }
            prompt.push(json!({"role": "assistant", "content": [
                {"type": "tool-call", "toolCallId": format!("c{k}"), "toolName": "f",
                 "input": {"k": k}}]}));
            prompt.push(json!({"role": "tool", "content": [
                {"type": "tool-result", "toolCallId": format!("c{k}"), "toolName": "f",
                 "output": {"type": "json", "value": k}}]}));
        }
    }
}
