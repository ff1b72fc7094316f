use super::*;
use crate::test_fixtures::{kv, span};

fn cut() -> Cut {
    Cut::new(&crate::limits::Limits::default())
}

#[test]
fn chains_are_runs_at_the_root_or_when_named_like_their_agent_else_groups() {
    let root = span(
        1,
        0,
        "LangGraph",
        10,
        vec![
            kv("langsmith.span.kind", "chain"),
            kv("langsmith.trace.session_name", "my-project"),
            kv("langsmith.metadata.thread_id", "t-1"),
        ],
    );
    let i = interpret_span(&root, &mut cut()).unwrap();
    assert_eq!(i.fact.kind, FactKind::AgentRun);
    assert_eq!(i.fact.agent_name.as_deref(), Some("LangGraph"));
    assert_eq!(i.fact.conversation_id.as_deref(), Some("t-1"));
    let node = span(2, 1, "model", 11, vec![kv("langsmith.span.kind", "chain")]);
    assert_eq!(
        interpret_span(&node, &mut cut()).unwrap().fact.kind,
        FactKind::Group
    );
    let nested = span(
        3,
        2,
        "researcher",
        12,
        vec![
            kv("langsmith.span.kind", "chain"),
            kv("langsmith.metadata.lc_agent_name", "researcher"),
        ],
    );
    let i = interpret_span(&nested, &mut cut()).unwrap();
    assert_eq!(
        (i.fact.kind, i.run_span_id.as_str()),
        (FactKind::AgentRun, "0303030303030303")
    );
}

#[test]
fn model_and_tool_spans_read_the_raw_run_json() {
    let llm = span(
        2,
        1,
        "ChatModel",
        10,
        vec![
            kv("langsmith.span.kind", "llm"),
            kv("gen_ai.operation.name", "chat"),
            kv(
                "gen_ai.prompt",
                r#"{"messages":[[{"lc":1,"type":"constructor","id":["langchain","schema","messages","SystemMessage"],"kwargs":{"content":"Be brief.","type":"system"}},{"lc":1,"type":"constructor","id":["langchain","schema","messages","HumanMessage"],"kwargs":{"content":"hi","type":"human"}}]]}"#,
            ),
            kv(
                "gen_ai.completion",
                r#"{"generations":[[{"text":"","message":{"lc":1,"type":"constructor","id":["langchain","schema","messages","AIMessage"],"kwargs":{"content":"","type":"ai","tool_calls":[{"name":"f","args":{"x":1},"id":"c1","type":"tool_call"}]}}}]],"type":"LLMResult"}"#,
            ),
        ],
    );
    let i = interpret_span(&llm, &mut cut()).unwrap();
    assert_eq!(i.fact.input.as_ref().unwrap().len(), 1);
    assert_eq!(
        i.fact.system_instructions.as_ref().unwrap()[0]["content"],
        "Be brief."
    );
    assert_eq!(i.fact.requested_calls[0].id, "c1");
    assert_eq!(
        i.fact.requested_calls[0].arguments,
        Some(serde_json::json!({"x": 1}))
    );

    let tool = span(
        3,
        1,
        "f",
        20,
        vec![
            kv("langsmith.span.kind", "tool"),
            kv("gen_ai.tool.call.id", "c1"),
            kv("gen_ai.prompt", r#"{"x":1}"#),
            kv(
                "gen_ai.completion",
                r#"{"output":{"content":"ok","type":"tool","tool_call_id":"c1","status":"success"}}"#,
            ),
        ],
    );
    let i = interpret_span(&tool, &mut cut()).unwrap();
    assert_eq!(i.fact.tool_call_id.as_deref(), Some("c1"));
    assert_eq!(i.fact.result, Some(serde_json::json!("ok")));
    assert_eq!(i.fact.arguments, Some(serde_json::json!({"x": 1})));

    let cut_short = span(
        4,
        1,
        "ChatModel",
        30,
        vec![
            kv("langsmith.span.kind", "llm"),
            kv("gen_ai.prompt", r#"{"messages":[[{"lc""#),
        ],
    );
    let i = interpret_span(&cut_short, &mut cut()).unwrap();
    assert!(i.fact.content_problem.unwrap().contains("not valid JSON"));
}
