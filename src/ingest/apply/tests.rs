use super::*;
use crate::interpreter::LogEvent;
use crate::store::keys::cf;

/// A received request holding these interpreted spans.
fn spans_work(spans: Vec<Interpreted>) -> Work {
    Work::Received {
        spans,
        logs: Vec::new(),
        outbox: None,
    }
}

/// A received logs request holding these events.
fn logs_work(logs: Vec<LogEvent>) -> Work {
    Work::Received {
        spans: Vec::new(),
        logs,
        outbox: None,
    }
}
use crate::domain::{EffectStatus, RunStatus};
use crate::interpreter::{interpret_span, interpret_span_with, PrefixMemo};
use crate::test_fixtures::{delegate_scenario as spans, run_id};
use opentelemetry_proto::tonic::trace::v1::Span;

fn interpreted(spans: &[Span]) -> Vec<Interpreted> {
    spans.iter().filter_map(interpret_span).collect()
}

fn outer_id() -> String {
    run_id(1)
}

fn delegate_id() -> String {
    run_id(4)
}

#[test]
fn delegate_links_to_parent_whichever_arrives_first_and_duplicates_change_nothing() {
    for order in [[0usize, 1, 2, 3, 4], [4, 3, 2, 1, 0], [2, 0, 4, 1, 3]] {
        let store = Store::in_memory();
        let all = spans();
        // One span per request, in this order: each request is its own commit.
        for &i in &order {
            apply_group(&store, &[spans_work(interpreted(&all[i..=i]))], 1).unwrap();
        }
        let delegate = store.run(&delegate_id()).unwrap().unwrap();
        assert_eq!(delegate.parent_run_id, Some(outer_id()), "order {order:?}");
        let outer = store.run(&outer_id()).unwrap().unwrap();
        assert_eq!(outer.status, RunStatus::Completed);
        assert_eq!(store.resolve_run("outer-call").unwrap(), Some(outer_id()));

        let before = (
            store.events(&outer_id()).unwrap(),
            store.effects(&outer_id()).unwrap(),
            store.snapshots(&outer_id()).unwrap(),
        );
        let sst_before = store.run_meta(&outer_id()).unwrap();
        apply_group(&store, &[spans_work(interpreted(&all))], 2).unwrap();
        let after = (
            store.events(&outer_id()).unwrap(),
            store.effects(&outer_id()).unwrap(),
            store.snapshots(&outer_id()).unwrap(),
        );
        assert_eq!(before, after);
        assert_eq!(
            sst_before,
            store.run_meta(&outer_id()).unwrap(),
            "a duplicate must not even touch last_seen"
        );
    }
}

/// Everything stored for every run, for order-independence checks.
type Everything = Vec<(
    crate::domain::Run,
    Vec<crate::domain::StepEvent>,
    Vec<crate::domain::ToolEffect>,
    Vec<crate::domain::SnapshotRecord>,
)>;

fn everything(store: &Store) -> Everything {
    let (runs, _) = store
        .list_runs(&crate::store::RunFilter::default(), None, 100)
        .unwrap();
    runs.into_iter()
        .map(|r| {
            let id = r.run_id.clone();
            (
                r,
                store.events(&id).unwrap(),
                store.effects(&id).unwrap(),
                store.snapshots(&id).unwrap(),
            )
        })
        .collect()
}

#[test]
fn a_schema_6_store_has_its_records_moved_under_run_keys_and_reads_and_ingests_as_before() {
    let dir = tempfile::tempdir().unwrap();
    let all = spans();
    let (first, last) = all.split_at(4);
    let (before, facts) = {
        let store = Store::open(dir.path(), false).unwrap();
        apply_group(&store, &[spans_work(interpreted(first))], 1).unwrap();
        let facts = store.facts(&outer_id()).unwrap();
        assert!(!facts.is_empty());
        (everything(&store), facts)
    };
    assert!(before
        .iter()
        .any(|(_, events, effects, _)| { !events.is_empty() && !effects.is_empty() }));
    crate::store::key_by_run_id(dir.path());
    let store = Store::open(dir.path(), false).unwrap();
    assert_eq!(everything(&store), before);
    assert_eq!(store.facts(&outer_id()).unwrap(), facts);
    assert!(store.check_readable().unwrap().is_empty());
    // Nothing is left under a run id: every key starts with a run key.
    for cf_name in crate::store::keys::REKEYED_CFS {
        let keys = store.keys_with_prefix(cf_name, b"").unwrap();
        assert!(!keys.is_empty(), "{cf_name}");
        for key in keys {
            assert_eq!(key.first(), Some(&0), "{cf_name} {key:?}");
        }
    }
    // The rest of the runs arrives after the migration: as if it had all arrived on one build.
    apply_group(&store, &[spans_work(interpreted(last))], 2).unwrap();
    let reference = Store::in_memory();
    apply_group(&reference, &[spans_work(interpreted(first))], 1).unwrap();
    apply_group(&reference, &[spans_work(interpreted(last))], 2).unwrap();
    assert_eq!(everything(&store), everything(&reference));
    assert_eq!(
        store.facts(&outer_id()).unwrap(),
        reference.facts(&outer_id()).unwrap()
    );
}

#[test]
fn strands_children_reach_the_run_through_cycles_in_any_order() {
    let all = crate::test_fixtures::strands_scenario();
    let mut reference: Option<Everything> = None;
    let orders: [&[usize]; 5] = [
        &[0, 1, 2, 3, 4, 5],
        &[5, 4, 3, 2, 1, 0],
        &[2, 4, 5, 0, 1, 3],
        &[0, 3, 5, 1, 4, 2],
        &[3, 0, 1, 4, 2, 5],
    ];
    for order in orders {
        let store = Store::in_memory();
        for &i in order {
            apply_group(&store, &[spans_work(interpreted(&all[i..=i]))], 1).unwrap();
        }
        let got = everything(&store);
        assert_eq!(got.len(), 1, "one run, no orphans, order {order:?}");
        let run = &got[0].0;
        assert_eq!(run.run_id, run_id(1));
        assert_eq!(run.conversation_id.as_deref(), Some("s-1"));
        assert_eq!(run.model_request_count, 2);
        assert_eq!(got[0].2.len(), 1);
        assert_eq!(got[0].2[0].status, EffectStatus::Completed, "{order:?}");
        // The merged runs' records went with them: what is left is the run's.
        let run_key = store.run_key(&run_id(1)).unwrap().unwrap();
        assert_eq!(
            store.keys_with_prefix(cf::RUN_KEYS, b"").unwrap(),
            vec![run_id(1).into_bytes()]
        );
        for cf_name in [
            cf::FACTS,
            cf::EVENTS,
            cf::EFFECTS,
            cf::MESSAGES,
            cf::HISTORY,
            cf::SNAPSHOTS,
            cf::MODEL_REQUESTS,
        ] {
            for key in store.keys_with_prefix(cf_name, b"").unwrap() {
                assert!(key.starts_with(&run_key.0), "left-over {cf_name} key");
            }
        }
        match &reference {
            None => reference = Some(got),
            Some(r) => assert_eq!(r, &got, "order {order:?}"),
        }
    }
    // All in one request gives the same.
    let store = Store::in_memory();
    apply_group(&store, &[spans_work(interpreted(&all))], 1).unwrap();
    assert_eq!(reference.unwrap(), everything(&store));
}

/// The spans of two traces: the Pydantic-AI-shaped delegate scenario, and the Strands run
/// (moved to its own trace so span ids do not clash).
/// Applies `all` as one request into a fresh store (the reference), then `sequence` (indexes
/// into `all`) into another, cut into requests after each `true` in `cuts` and consecutive
/// requests into commits after each `true` in `commit_cuts`. Returns the reference and the
/// replayed store (with its directory, which must outlive it).
fn replay(
    all: &[Span],
    sequence: &[usize],
    cuts: &[bool],
    commit_cuts: &[bool],
) -> (Everything, tempfile::TempDir, Store) {
    let reference = {
        let store = Store::in_memory();
        apply_group(&store, &[spans_work(interpreted(all))], 1).unwrap();
        assert_readable(&store);
        everything(&store)
    };
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), false).unwrap();
    let mut requests: Vec<Vec<Span>> = vec![Vec::new()];
    for (n, &i) in sequence.iter().enumerate() {
        requests.last_mut().unwrap().push(all[i].clone());
        if cuts[n % cuts.len()] {
            requests.push(Vec::new());
        }
    }
    let mut group: Vec<Work> = Vec::new();
    for (n, request) in requests.iter().enumerate() {
        group.push(spans_work(interpreted(request)));
        if commit_cuts[n % commit_cuts.len()] {
            apply_group(&store, &group, n as u64).unwrap();
            group.clear();
        }
    }
    apply_group(&store, &group, 99).unwrap();
    // Every record written, in any order and split, reads back with its type.
    assert_readable(&store);
    (reference, dir, store)
}

/// Every record of the store reads back with its type.
fn assert_readable(store: &Store) {
    let unreadable = store.check_readable().unwrap();
    assert!(
        unreadable.is_empty(),
        "records that do not read back: {unreadable:?}"
    );
}

fn two_traces() -> Vec<Span> {
    let mut all = spans();
    all.extend(crate::test_fixtures::pending_spans());
    let strands = crate::test_fixtures::strands_scenario()
        .into_iter()
        .chain(crate::test_fixtures::strands_delegate());
    for mut s in strands {
        s.trace_id = vec![8; 16];
        all.push(s);
    }
    all
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 48, ..Default::default() })]

    /// Any arrival order, any split into requests, any grouping of requests into commits,
    /// with duplicates: the same runs, events, effects and snapshots as one request with all.
    #[test]
    fn any_arrival_order_gives_the_same_runs(
        order in proptest::strategy::Strategy::prop_shuffle(proptest::strategy::Just((0..16usize).collect::<Vec<_>>())),
        cuts in proptest::collection::vec(proptest::bool::ANY, 16),
        commit_cuts in proptest::collection::vec(proptest::bool::ANY, 16),
        dups in proptest::collection::vec(0..16usize, 0..4),
    ) {
        let all = two_traces();
        let sequence: Vec<usize> = order.iter().copied().chain(dups.iter().copied()).collect();
        let (reference, _dir, store) = replay(&all, &sequence, &cuts, &commit_cuts);
        let got = everything(&store);
        proptest::prop_assert_eq!(got.len(), 4);
        proptest::prop_assert_eq!(reference, got);
        let delegate = store.run(&delegate_id()).unwrap().unwrap();
        proptest::prop_assert_eq!(delegate.parent_run_id, Some(outer_id()));
        // The Strands delegate links to the Strands run, through the tool's cycle.
        let trace8 = hex::encode([8u8; 16]);
        let helper = store
            .run(&format!("{trace8}-{}", hex::encode([7u8; 8])))
            .unwrap()
            .unwrap();
        proptest::prop_assert_eq!(
            helper.parent_run_id,
            Some(format!("{trace8}-{}", hex::encode([1u8; 8])))
        );
        proptest::prop_assert_eq!(helper.model_request_count, 1);
    }
}

thread_local! {
    /// Runs written incrementally on this thread.
    pub(super) static APPENDS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// A Pydantic-AI-shaped run (span 1) of `steps` model requests (spans 2k) and tools (2k+1):
/// each request sends the whole history so far; `variant` bits pick a step whose tool fails,
/// one whose tool span never comes (the next input answers it), a call id used twice,
/// parallel calls, and tool spans without call ids (joined to the calls by name and order,
/// with run warnings), so appends meet every ledger rule.
fn linear_run(steps: u8, variant: u8, with_agent: bool) -> Vec<Span> {
    linear_run_answering(steps, variant, with_agent, ("user", "result"))
}

/// [`linear_run`] whose requests show tool returns under `role`, results under `key`.
fn linear_run_answering(
    steps: u8,
    variant: u8,
    with_agent: bool,
    (role, key): (&str, &str),
) -> Vec<Span> {
    use crate::test_fixtures::{kv, span};
    let op = |v: &str| kv("gen_ai.operation.name", v);
    let mut history =
        vec![serde_json::json!({"role": "user", "parts": [{"type": "text", "content": "go"}]})];
    let mut spans = Vec::new();
    for k in 1..=steps {
        let start = 1000 + u64::from(k) * 100;
        let parallel = variant & 8 != 0 && k == 2;
        let id = if variant & 4 != 0 && k % 3 == 0 {
            "dup".to_string()
        } else {
            format!("c{k}")
        };
        let mut calls = vec![
            serde_json::json!({"type": "tool_call", "id": id, "name": "work", "arguments": {"k": k}}),
        ];
        if parallel {
            calls.push(serde_json::json!({"type": "tool_call", "id": "p2", "name": "work", "arguments": {}}));
        }
        let last = k == steps;
        let output = if last && with_agent {
            serde_json::json!([{"role": "assistant", "parts": [{"type": "text", "content": "done"}]}])
        } else {
            serde_json::json!([{"role": "assistant", "parts": calls}])
        };
        let mut attrs = vec![
            op("chat"),
            kv("gen_ai.agent.call.id", "lin-call"),
            kv(
                "gen_ai.input.messages",
                &serde_json::Value::Array(history.clone()).to_string(),
            ),
            kv("gen_ai.output.messages", &output.to_string()),
            kv("gen_ai.usage.input_tokens", "3"),
        ];
        if k % 2 == 1 {
            attrs.push(kv(
                "gen_ai.system_instructions",
                r#"[{"type":"text","content":"be brief"}]"#,
            ));
        }
        spans.push(span(2 * k, 1, "chat m", start, attrs));
        history.push(output[0].clone());
        if last && with_agent {
            break;
        }
        let mut answers = Vec::new();
        for call in &calls {
            let cid = call["id"].as_str().unwrap_or_default().to_string();
            let fails = variant & 1 != 0 && k == 2;
            let missing = variant & 2 != 0 && k == 3;
            if !missing && cid != "p2" {
                let mut tool = vec![
                    op("execute_tool"),
                    kv("gen_ai.tool.name", "work"),
                    kv("gen_ai.tool.call.result", &format!("r{k}")),
                ];
                if variant & 16 == 0 {
                    tool.push(kv("gen_ai.tool.call.id", &cid));
                }
                if fails {
                    tool.push(kv("error.type", "boom"));
                }
                let mut s = span(2 * k + 1, 1, "execute_tool work", start + 20, tool);
                if fails {
                    s.status = Some(opentelemetry_proto::tonic::trace::v1::Status {
                        code: 2,
                        message: "boom".into(),
                    });
                }
                spans.push(s);
            }
            answers.push(serde_json::json!({"type": "tool_call_response", "id": cid, "name": "work", key: format!("r{k}")}));
        }
        history.push(serde_json::json!({"role": role, "parts": answers}));
    }
    if with_agent {
        spans.push(span(
            1,
            0,
            "invoke_agent a",
            1000,
            vec![
                op("invoke_agent"),
                kv("gen_ai.agent.name", "a"),
                kv("gen_ai.agent.call.id", "lin-call"),
            ],
        ));
        if let Some(agent) = spans.last_mut() {
            agent.end_time_unix_nano = 1000 + u64::from(steps) * 100 + 90;
        }
    }
    spans
}

/// [`linear_run`]'s run as LangGraph exports it through OpenInference: the `weather_agent`
/// AGENT span 1 (no `agent.name`), and per step `k` a `model` CHAIN (4k) holding the LLM span
/// (4k+1: lc-serialised `input.value`, `LLMResult` output, flattened messages) and a `tools`
/// CHAIN (4k+2, 4k+3 for a parallel second call) holding each TOOL span (ids 64+..: the call id
/// only inside the `ToolMessage` of `output.value`). `variant` bits as in [`linear_run`]: a
/// failing tool (status `error`), a missing tool span, a reused call id, parallel calls, and
/// `ToolMessage`s without call id (joined by name, arguments and order).
fn langgraph_run(steps: u8, variant: u8, with_agent: bool) -> Vec<Span> {
    use crate::test_fixtures::{kv, span};
    use serde_json::json;
    let kind = |k: &str| kv("openinference.span.kind", k);
    let meta = kv(
        "metadata",
        r#"{"lc_agent_name":"weather_agent","thread_id":"t-lg"}"#,
    );
    let session = kv("session.id", "t-lg");
    let mut lc = vec![
        json!({"lc":1,"type":"constructor","id":["langchain","schema","messages","HumanMessage"],"kwargs":{"content":"go","type":"human"}}),
    ];
    let mut n_in = 1;
    let mut inputs = vec![
        kv("llm.input_messages.0.message.role", "user"),
        kv("llm.input_messages.0.message.content", "go"),
    ];
    let mut spans = Vec::new();
    for k in 1..=steps {
        let start = 1000 + u64::from(k) * 100;
        let last = k == steps && with_agent;
        let id = if variant & 4 != 0 && k % 3 == 0 {
            "dup".to_string()
        } else {
            format!("c{k}")
        };
        let mut calls = vec![(id, json!({"k": k}))];
        if variant & 8 != 0 && k == 2 {
            calls.push(("p2".to_string(), json!({"k": 0})));
        }
        let mut attrs = vec![kind("LLM"), session.clone(), meta.clone()];
        attrs.extend(inputs.iter().cloned());
        let reply = if last {
            attrs.push(kv("llm.output_messages.0.message.role", "assistant"));
            attrs.push(kv("llm.output_messages.0.message.content", "done"));
            json!({"content":"done","type":"ai"})
        } else {
            attrs.push(kv("llm.output_messages.0.message.role", "assistant"));
            for (j, (cid, args)) in calls.iter().enumerate() {
                let key =
                    |f: &str| format!("llm.output_messages.0.message.tool_calls.{j}.tool_call.{f}");
                attrs.push(kv(&key("id"), cid));
                attrs.push(kv(&key("function.name"), "work"));
                attrs.push(kv(&key("function.arguments"), &args.to_string()));
            }
            let tc: Vec<_> = calls
                .iter()
                .map(|(cid, a)| json!({"name":"work","args":a,"id":cid}))
                .collect();
            json!({"content":"","type":"ai","tool_calls":tc})
        };
        attrs.push(kv(
            "input.value",
            &json!({"messages": [lc.clone()]}).to_string(),
        ));
        attrs.push(kv("output.value", &json!({"generations":[[{"text":"","message":
            {"lc":1,"type":"constructor","id":["langchain","schema","messages","AIMessage"],"kwargs":reply}}]],
            "type":"LLMResult"}).to_string()));
        spans.push(span(4 * k + 1, 4 * k, "ChatModel", start + 1, attrs));
        spans.push(span(
            4 * k,
            1,
            "model",
            start,
            vec![kind("CHAIN"), session.clone(), meta.clone()],
        ));
        lc.push(json!({"lc":1,"type":"constructor","id":["langchain","schema","messages","AIMessage"],"kwargs":reply}));
        let base = format!("llm.input_messages.{n_in}.message");
        inputs.push(kv(&format!("{base}.role"), "assistant"));
        if last {
            inputs.push(kv(&format!("{base}.content"), "done"));
            break;
        }
        for (j, (cid, args)) in calls.iter().enumerate() {
            let key = format!("{base}.tool_calls.{j}.tool_call");
            inputs.push(kv(&format!("{key}.id"), cid));
            inputs.push(kv(&format!("{key}.function.name"), "work"));
            inputs.push(kv(&format!("{key}.function.arguments"), &args.to_string()));
        }
        n_in += 1;
        for (j, (cid, args)) in calls.iter().enumerate() {
            let fails = variant & 1 != 0 && k == 2;
            let missing = variant & 2 != 0 && k == 3;
            let chain = 4 * k + 2 + j as u8;
            let t = start + 20 + j as u64;
            if !missing {
                let id_in_output = if variant & 16 == 0 {
                    json!(cid)
                } else {
                    json!(null)
                };
                let status = if fails { "error" } else { "success" };
                let output = json!({"type":"tool","data":{"content":format!("r{k}"),"type":"tool",
                    "name":"work","tool_call_id":id_in_output,"status":status}});
                spans.push(span(
                    64 + chain,
                    chain,
                    "work",
                    t + 1,
                    vec![
                        kind("TOOL"),
                        session.clone(),
                        meta.clone(),
                        kv("tool.name", "work"),
                        kv("input.value", &args.to_string()),
                        kv("output.value", &output.to_string()),
                    ],
                ));
            }
            spans.push(span(
                chain,
                1,
                "tools",
                t,
                vec![kind("CHAIN"), session.clone(), meta.clone()],
            ));
            let base = format!("llm.input_messages.{n_in}.message");
            inputs.push(kv(&format!("{base}.role"), "tool"));
            inputs.push(kv(&format!("{base}.tool_call_id"), cid));
            inputs.push(kv(&format!("{base}.content"), &format!("r{k}")));
            lc.push(json!({"lc":1,"type":"constructor","id":["langchain","schema","messages","ToolMessage"],
                "kwargs":{"content":format!("r{k}"),"type":"tool","tool_call_id":cid}}));
            n_in += 1;
        }
    }
    if with_agent {
        let mut root = span(
            1,
            0,
            "weather_agent",
            1000,
            vec![kind("AGENT"), session, meta],
        );
        root.end_time_unix_nano = 1000 + u64::from(steps) * 100 + 90;
        spans.push(root);
    }
    spans
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 40, ..Default::default() })]

    /// Spans of a long run arriving in order (in any split into requests and commits, with
    /// redelivery and the odd neighbour swapped) are appended to the stored run; the result
    /// is exactly what a full derivation of all facts at once gives.
    #[test]
    fn incremental_application_equals_full_derivation(
        steps in 2u8..9,
        variant in 0u8..32,
        with_agent in proptest::bool::ANY,
        cuts in proptest::collection::vec(proptest::bool::ANY, 24),
        swaps in proptest::collection::vec(0..24usize, 0..2),
        dups in proptest::collection::vec(0..24usize, 0..3),
        langgraph in proptest::bool::ANY,
    ) {
        let all = if langgraph {
            langgraph_run(steps, variant, with_agent)
        } else {
            linear_run(steps, variant, with_agent)
        };
        let reference = {
            let store = Store::in_memory();
            apply_group(&store, &[spans_work(interpreted(&all))], 1).unwrap();
            everything(&store)
        };
        let mut order: Vec<usize> = (0..all.len()).collect();
        for &s in &swaps {
            let i = s % (order.len() - 1);
            order.swap(i, i + 1);
        }
        order.extend(dups.iter().map(|d| d % all.len()));
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), false).unwrap();
        let before = APPENDS.with(|n| n.get());
        let mut request: Vec<Span> = Vec::new();
        for (n, &i) in order.iter().enumerate() {
            request.push(all[i].clone());
            if cuts[n % cuts.len()] || n + 1 == order.len() {
                apply_group(&store, &[spans_work(interpreted(&request))], n as u64).unwrap();
                request.clear();
            }
        }
        proptest::prop_assert_eq!(&reference, &everything(&store));
        if !langgraph && variant & 24 == 24 && (steps > 2 || !with_agent) {
            // The id-less tool span of the parallel step (step 2, when it has tool spans) is
            // joined by order, with a warning.
            proptest::prop_assert!(reference.iter().any(|r| !r.0.warnings.is_empty()));
        }
        // LangGraph runs come child first (a model or tool span ends before its `model` / `tools`
        // CHAIN): each request then holds an orphan run that the CHAIN merges later, so such runs
        // are derived in full, not appended to, and the run warnings of linear_run's id-less
        // parallel step do not apply (their tool spans carry the arguments the join needs).
        if variant & 16 != 0 {
            // Joins by name and order depend on the whole run: once an id-less tool span is
            // stored, no working state is kept, so nothing more is appended to the run.
            proptest::prop_assert!(store.run_state(&run_id(1)).unwrap().is_none());
        } else if !langgraph && !with_agent && swaps.is_empty() && dups.is_empty() && cuts[..order.len() - 1].iter().any(|c| *c) {
            proptest::prop_assert!(APPENDS.with(|n| n.get()) > before, "no batch was appended");
        }
        // The state survives a reopen: more redelivery appends nothing new.
        drop(store);
        let store = Store::open(dir.path(), false).unwrap();
        apply_group(&store, &[spans_work(interpreted(&all))], 500).unwrap();
        proptest::prop_assert_eq!(&reference, &everything(&store));
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 32, ..Default::default() })]

    /// Inputs read through the interpreter's memo (reused prefixes, bodies shared rather than
    /// copied) store exactly what full parses store, also when requests interpreted through
    /// the memo are refused before their commit (the memo then holds histories the store
    /// never got) and sent again at once, at the end, or never.
    #[test]
    fn memoised_interpretation_stores_what_full_parses_store(
        steps in 2u8..9,
        variant in 0u8..32,
        with_agent in proptest::bool::ANY,
        cuts in proptest::collection::vec(proptest::bool::ANY, 24),
        refusals in proptest::collection::vec(0u8..5, 24),
    ) {
        let all = linear_run(steps, variant, with_agent);
        let memo = PrefixMemo::default();
        let through_memo = |spans: &[Span]| -> Vec<Interpreted> {
            spans.iter().filter_map(|s| interpret_span_with(s, &memo, &Default::default()).ok()).collect()
        };
        let mut requests: Vec<Vec<Span>> = vec![Vec::new()];
        for (n, span) in all.iter().enumerate() {
            requests.last_mut().unwrap().push(span.clone());
            if cuts[n % cuts.len()] {
                requests.push(Vec::new());
            }
        }
        let (full_dir, memo_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let full = Store::open(full_dir.path(), false).unwrap();
        let memoised = Store::open(memo_dir.path(), false).unwrap();
        let mut later = Vec::new();
        for (n, request) in requests.iter().enumerate() {
            let refusal = refusals[n % refusals.len()];
            if refusal <= 2 {
                // Interpreted, then refused (overload, a failed commit): never stored.
                drop(through_memo(request));
            }
            match refusal {
                0 => continue, // never sent again
                1 => {
                    later.push(request.clone());
                    continue;
                }
                _ => {}
            }
            apply_group(&memoised, &[spans_work(through_memo(request))], n as u64).unwrap();
            apply_group(&full, &[spans_work(interpreted(request))], n as u64).unwrap();
        }
        for request in &later {
            apply_group(&memoised, &[spans_work(through_memo(request))], 50).unwrap();
            apply_group(&full, &[spans_work(interpreted(request))], 50).unwrap();
        }
        let reference = everything(&full);
        proptest::prop_assert_eq!(&reference, &everything(&memoised));
        // Every snapshot's history has its bodies stored, the same as the full parse's.
        for (run, _, _, snapshots) in &reference {
            for s in snapshots {
                let expected = full.history(&run.run_id, &s.history).unwrap();
                let got = memoised.history(&run.run_id, &s.history).unwrap();
                proptest::prop_assert_eq!(&expected.messages, &got.messages);
            }
        }
    }
}

/// Message bodies stored for a run (each distinct body is one key).
fn stored_messages(store: &Store, run: &str) -> usize {
    let key = store.run_key(run).unwrap().expect("the run has a key");
    store.keys_with_prefix(cf::MESSAGES, &key.0).unwrap().len()
}

/// A run's spans arriving one per commit, in order, as an agent exports them: each tool
/// span is answered by a reconstructed snapshot before the next request shows the answer.
/// Reconstructed answers take the form the run's requests showed, so from the second step
/// on they are the observed messages (one body each), whatever the producer's form.
#[test]
fn reconstructed_answers_in_the_runs_form_are_stored_once() {
    // 4 requests: "go", 4 calls, 3 observed answers; the instructions; the answer to the
    // last call (not observed yet). The first step's answer, before the run showed any,
    // is in the default form (`tool` + `response`): one more body unless that is the run's.
    for (form, expected) in [
        (("user", "result"), 11),   // Pydantic AI 2.x, instrumentation v5 (default)
        (("tool", "result"), 11),   // Pydantic AI, instrumentation v6
        (("tool", "response"), 10), // OTel GenAI semantic conventions
    ] {
        let all = linear_run_answering(4, 0, false, form);
        let store = Store::in_memory();
        let before = APPENDS.with(|n| n.get());
        for (n, span) in all.iter().enumerate() {
            let work = spans_work(interpreted(std::slice::from_ref(span)));
            apply_group(&store, &[work], n as u64).unwrap();
        }
        assert!(APPENDS.with(|n| n.get()) > before, "{form:?}: appended");
        let run = run_id(1);
        assert_eq!(stored_messages(&store, &run), expected, "{form:?}");
        // The latest snapshot answers the last call in the run's form.
        let latest = store.snapshots(&run).unwrap().pop().unwrap();
        assert_eq!(
            latest.meta.source,
            crate::domain::SnapshotSource::Reconstructed
        );
        let history = store.history(&run, &latest.history).unwrap();
        let (role, key) = form;
        assert_eq!(
            history.messages.last().map(|m| &**m),
            Some(&serde_json::json!({"role": role, "parts": [
                {"type": "tool_call_response", "id": "c4", "name": "work", key: "r4"}]}))
        );
        // The same run derived in full at once stores the same snapshots.
        let full = Store::in_memory();
        apply_group(&full, &[spans_work(interpreted(&all))], 1).unwrap();
        assert_eq!(everything(&full), everything(&store), "{form:?}");
    }
}

/// The history cache serves a continuation only for the snapshot it was read for: a new step
/// (a new tip) is read from disk, and after a reopen the first read is cold and the same.
#[test]
fn continuation_history_cache_follows_the_latest_snapshot_and_survives_reopen() {
    use crate::continuation::{load as load_history, Selector};
    let all = linear_run(6, 0, false);
    let dir = tempfile::tempdir().unwrap();
    let selector = Selector {
        include_interrupted: true,
        ..Selector::default()
    };
    let contexts = crate::continuation::ContextCache::default();
    let read = |store: &Store| {
        let run = store.run(&run_id(1)).unwrap().unwrap();
        let h = load_history(store, &contexts, run, selector).unwrap();
        (h.snapshot.meta.seq, h.messages.to_vec(), h.hashes.to_vec())
    };
    let store = Store::open(dir.path(), false).unwrap();
    apply_group(&store, &[spans_work(interpreted(&all[..4]))], 1).unwrap();
    let cold = read(&store);
    assert!(store.history_cache_messages() > 0);
    assert_eq!(
        cold,
        read(&store),
        "a warm read gives what the cold one did"
    );
    // The next steps move the latest snapshot: the cached history is not served for it.
    apply_group(&store, &[spans_work(interpreted(&all[4..]))], 2).unwrap();
    let later = read(&store);
    assert!(
        later.1.len() > cold.1.len(),
        "{} vs {}",
        later.1.len(),
        cold.1.len()
    );
    assert_eq!(later.1.len(), later.2.len());
    // A re-derivation (every fact again plus redelivery) keeps the same answer.
    apply_group(&store, &[spans_work(interpreted(&all))], 3).unwrap();
    assert_eq!(later, read(&store));
    drop(store);
    let store = Store::open(dir.path(), false).unwrap();
    assert_eq!(store.history_cache_messages(), 0, "the cache starts empty");
    assert_eq!(later, read(&store));
}

/// The effects and provenance a continuation reads are reused only while the run's revision
/// is unchanged: a write that changes the ledger without moving the snapshot (an abandon) is
/// seen by the next read.
#[test]
fn quiet_long_runs_have_their_continuation_loaded_ahead() {
    use crate::continuation::{load as load_history, prefetch, ContextCache, Selector};
    let all = linear_run(6, 0, true);
    let store = Store::in_memory();
    let contexts = ContextCache::default();
    // What the prefetch does each tick: the runs quiet since their last write, loaded
    // when long enough; how many were.
    let warm_quiet_runs = |min_messages: u32| {
        store
            .take_quiet_runs(std::time::Duration::ZERO)
            .iter()
            .filter(|r| prefetch::warm(&store, &contexts, &r.run_id, min_messages).unwrap())
            .count()
    };
    // Too short a history to load ahead: taken, not loaded.
    apply_group(&store, &[spans_work(interpreted(&all[..5]))], 1).unwrap();
    assert_eq!(warm_quiet_runs(1_000), 0);
    assert_eq!(store.history_cache_messages(), 0);
    assert_eq!(contexts.held(), 0);
    // The rest of the run: loaded once it is quiet, and only once.
    apply_group(&store, &[spans_work(interpreted(&all[5..]))], 2).unwrap();
    assert_eq!(warm_quiet_runs(4), 1);
    assert_eq!(warm_quiet_runs(4), 0);
    let held = store.history_cache_messages();
    assert!(held >= 4, "the history is in the cache ({held} messages)");
    assert!(
        contexts.held() > 0,
        "effects and provenance are in the cache"
    );
    // The request that follows is served from what was loaded.
    let run = store.run(&run_id(1)).unwrap().unwrap();
    let selector = Selector {
        provenance: true,
        ..Selector::default()
    };
    let before = contexts.held();
    let h = load_history(&store, &contexts, run, selector).unwrap();
    assert_eq!(h.messages.len(), h.snapshot.meta.message_count as usize);
    assert_eq!(store.history_cache_messages(), held);
    assert_eq!(contexts.held(), before);
    assert!(!h.models().is_empty());
}

/// A run derived in full is noted for the prefetch with the most messages of its snapshots (a
/// quiet run whose histories are all short is then not read); an appended one with none.
#[test]
fn written_runs_are_noted_with_their_longest_history_when_derived_in_full() {
    let all = linear_run(6, 0, false);
    let store = Store::in_memory();
    let (mut full, mut appended) = (0, 0);
    for (n, span) in all.iter().enumerate() {
        let appends = APPENDS.with(|n| n.get());
        let work = spans_work(interpreted(std::slice::from_ref(span)));
        apply_group(&store, &[work], n as u64).unwrap();
        let noted = store.take_quiet_runs(std::time::Duration::ZERO);
        let expected = if APPENDS.with(|n| n.get()) > appends {
            appended += 1;
            WrittenRun::of(&run_id(1))
        } else {
            full += 1;
            let snapshots = store.snapshots(&run_id(1)).unwrap();
            let longest = snapshots.iter().map(|s| s.meta.message_count).max();
            WrittenRun {
                run_id: run_id(1),
                longest_history: Some(longest.unwrap_or(0)),
            }
        };
        assert_eq!(noted, [expected], "span {n}");
    }
    assert!(
        full > 0 && appended > 0,
        "{full} derived in full, {appended} appended"
    );
}

#[test]
fn continuation_context_follows_the_run_revision() {
    use crate::continuation::{load as load_history, ContextCache, Selector};
    let all = linear_run(6, 0, false);
    let store = Store::in_memory();
    let contexts = ContextCache::default();
    let selector = Selector {
        include_interrupted: true,
        provenance: true,
        ..Selector::default()
    };
    let revision = |store: &Store| store.run_meta(&run_id(1)).unwrap().unwrap().revision;
    let read = |store: &Store| {
        let run = store.run(&run_id(1)).unwrap().unwrap();
        load_history(store, &contexts, run, selector).unwrap()
    };
    // Up to a model request whose tool call has not finished: one effect is open.
    apply_group(&store, &[spans_work(interpreted(&all[..3]))], 1).unwrap();
    let first = revision(&store);
    let h = read(&store);
    // What a continuation reads of the ledger: every entry's outcome, and the unresolved
    // entries whole.
    let ledger = |store: &Store| {
        let full = store.effects(&run_id(1)).unwrap();
        let outcomes: Vec<crate::domain::EffectOutcome> = full.iter().map(Into::into).collect();
        let unresolved: Vec<_> = full
            .into_iter()
            .filter(|e| e.status.is_unresolved())
            .collect();
        (outcomes, unresolved)
    };
    assert_eq!(
        (h.effects.outcomes().to_vec(), h.unresolved.to_vec()),
        ledger(&store)
    );
    assert!(!h.unresolved.is_empty());
    assert!(h
        .effects
        .outcomes()
        .iter()
        .any(|e| e.status.is_unresolved()));
    assert!(!h.models().is_empty(), "provenance was read");
    assert!(contexts.held() > 0);
    let again = read(&store);
    assert!(
        std::sync::Arc::ptr_eq(&h.effects, &again.effects),
        "an unchanged run is served from the cache"
    );
    // A duplicate delivery changes nothing and keeps the revision.
    apply_group(&store, &[spans_work(interpreted(&all[..3]))], 2).unwrap();
    assert_eq!(revision(&store), first);
    // Abandoning changes the ledger, not the snapshot.
    apply_group(
        &store,
        &[Work::Abandon {
            run: run_id(1),
            reason: "test".into(),
            at_ns: 3,
            silent_since_ns: 0,
        }],
        3,
    )
    .unwrap();
    assert!(revision(&store) > first);
    let after = read(&store);
    assert_eq!(after.snapshot.history, h.snapshot.history);
    assert_ne!(after.effects.outcomes(), h.effects.outcomes());
    assert_eq!(
        (after.effects.outcomes().to_vec(), after.unresolved.to_vec()),
        ledger(&store)
    );
    assert_eq!(after.models().len(), h.models().len());
}

fn new_conventions() -> Vec<Span> {
    let mut all = crate::test_fixtures::openinference_scenario();
    all.extend(crate::test_fixtures::openllmetry_scenario());
    all
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 32, ..Default::default() })]

    /// OpenInference and OpenLLMetry, whose tool spans carry no call id and whose runs are
    /// reached through grouping spans: any arrival order and split gives the same runs,
    /// events, effects and snapshots; the helper run links to calc through the task span.
    #[test]
    fn new_conventions_any_arrival_order_gives_the_same_runs(
        order in proptest::strategy::Strategy::prop_shuffle(proptest::strategy::Just((0..18usize).collect::<Vec<_>>())),
        cuts in proptest::collection::vec(proptest::bool::ANY, 18),
        commit_cuts in proptest::collection::vec(proptest::bool::ANY, 18),
        dups in proptest::collection::vec(0..18usize, 0..4),
    ) {
        let all = new_conventions();
        proptest::prop_assert_eq!(all.len(), 18);
        let sequence: Vec<usize> = order.iter().copied().chain(dups.iter().copied()).collect();
        let (reference, _dir, store) = replay(&all, &sequence, &cuts, &commit_cuts);
        let got = everything(&store);
        proptest::prop_assert_eq!(reference.clone(), got);
        // calc, helper (OpenInference) and calc (OpenLLMetry); no run for the workflow or a turn.
        proptest::prop_assert_eq!(reference.len(), 3);
        let oi = |n: u8| format!("{}-{}", hex::encode([9u8; 16]), hex::encode([n; 8]));
        let calc = store.run(&oi(3)).unwrap().unwrap();
        let helper = store.run(&oi(9)).unwrap().unwrap();
        proptest::prop_assert_eq!(helper.parent_run_id, Some(oi(3)));
        proptest::prop_assert_eq!(calc.status, RunStatus::Completed);
        proptest::prop_assert_eq!(calc.model_request_count, 2);
        proptest::prop_assert_eq!(calc.conversation_id.as_deref(), Some("oi-session"));
        let effects = store.effects(&oi(3)).unwrap();
        let joined: Vec<(&str, EffectStatus)> =
            effects.iter().map(|e| (e.tool_call_id.as_str(), e.status)).collect();
        proptest::prop_assert_eq!(
            joined,
            vec![("c_add", EffectStatus::Completed), ("c_help", EffectStatus::Completed)]
        );
        let tl = format!("{}-{}", hex::encode([10u8; 16]), hex::encode([1u8; 8]));
        let tl_run = store.run(&tl).unwrap().unwrap();
        proptest::prop_assert_eq!(tl_run.model_request_count, 2);
        proptest::prop_assert_eq!(tl_run.conversation_id.as_deref(), Some("tl-session"));
        let tl_effects = store.effects(&tl).unwrap();
        proptest::prop_assert_eq!(tl_effects.len(), 1);
        proptest::prop_assert_eq!(tl_effects[0].tool_call_id.as_str(), "t1");
        proptest::prop_assert_eq!(tl_effects[0].status, EffectStatus::Completed);
        let snapshots = store.snapshots(&tl).unwrap();
        proptest::prop_assert_eq!(
            snapshots.last().map(|s| s.meta.state),
            Some(crate::domain::SnapshotState::Complete)
        );
    }
}

/// A run (span 1) whose one model request (span 2) carries no content: its legacy events come
/// as log records (system, user, assistant tool call, tool return, choice).
fn logged_run() -> (Vec<Span>, Vec<LogEvent>) {
    use crate::test_fixtures::{kv, span};
    let op = |v: &str| kv("gen_ai.operation.name", v);
    let spans = vec![
        span(2, 1, "chat m", 20, vec![op("chat")]),
        span(1, 0, "invoke_agent a", 10, vec![op("invoke_agent")]),
    ];
    let event = |index: Option<i64>, time: u64, name: &str, body: serde_json::Value| LogEvent {
        trace_id: hex::encode(crate::test_fixtures::TRACE),
        span_id: hex::encode([2u8; 8]),
        message_index: index,
        time_ns: time,
        name: name.into(),
        body: body.as_object().cloned().unwrap_or_default(),
    };
    let logs = vec![
        event(
            None,
            21,
            "gen_ai.system.message",
            serde_json::json!({"content": "be brief"}),
        ),
        event(
            Some(0),
            21,
            "gen_ai.user.message",
            serde_json::json!({"content": "go"}),
        ),
        event(
            Some(1),
            21,
            "gen_ai.assistant.message",
            serde_json::json!({"tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}),
        ),
        event(
            Some(2),
            21,
            "gen_ai.tool.message",
            serde_json::json!({"content": "ok", "id": "c1"}),
        ),
        event(
            None,
            22,
            "gen_ai.choice",
            serde_json::json!({"index": 0, "message": {"role": "assistant", "content": "done"}}),
        ),
    ];
    (spans, logs)
}

#[test]
fn log_records_whose_span_never_arrives_are_pruned_after_their_age() {
    let store = Store::in_memory();
    let (spans, logs) = logged_run();
    // The same records for span 9, which never arrives.
    let orphans: Vec<LogEvent> = logs
        .iter()
        .cloned()
        .map(|mut e| {
            e.span_id = hex::encode([9u8; 8]);
            e
        })
        .collect();
    let mut all = logs.clone();
    all.extend(orphans);
    apply_group(
        &store,
        &[logs_work(all), spans_work(interpreted(&spans))],
        1,
    )
    .unwrap();
    let trace = hex::encode(crate::test_fixtures::TRACE);
    let orphan_span = hex::encode([9u8; 8]);
    // Too young: nothing is old enough.
    assert!(store.orphan_logs(20, 1000).unwrap().is_empty());
    let found = store.orphan_logs(1_000, 1000).unwrap();
    assert_eq!(found.len(), 5, "{found:?}");
    assert!(found
        .iter()
        .all(|(_, t, s)| *t == trace && *s == orphan_span));
    let applied = apply_group(&store, &[Work::PruneLogs { records: found }], 2).unwrap();
    assert_eq!(applied, vec![Applied::PrunedLogs(PrunedLogs(5))]);
    assert!(store.span_logs(&trace, &orphan_span).unwrap().is_empty());
    // The records of the span that arrived stay (a redelivered span needs them).
    assert_eq!(
        store
            .span_logs(&trace, &hex::encode([2u8; 8]))
            .unwrap()
            .len(),
        5
    );
    assert!(store.orphan_logs(1_000, 1000).unwrap().is_empty());
    // A span arriving between the scan and the prune keeps its records.
    let late = vec![(Vec::new(), trace.clone(), hex::encode([2u8; 8]))];
    let applied = apply_group(&store, &[Work::PruneLogs { records: late }], 3).unwrap();
    assert_eq!(applied, vec![Applied::PrunedLogs(PrunedLogs(0))]);
}

#[test]
fn log_records_land_on_their_step_before_or_after_the_span() {
    let (spans, logs) = logged_run();
    let chat = || spans_work(interpreted(&spans[0..1]));
    let agent = || spans_work(interpreted(&spans[1..2]));
    let some = |r: std::ops::Range<usize>| logs_work(logs[r].to_vec());
    let scenarios: Vec<Vec<Vec<Work>>> = vec![
        vec![vec![some(0..5)], vec![chat()], vec![agent()]],
        vec![vec![chat()], vec![some(0..5)], vec![agent()]],
        vec![
            vec![chat()],
            vec![agent()],
            vec![some(3..5)],
            vec![some(0..3)],
        ],
        vec![
            vec![some(1..4)],
            vec![chat(), agent()],
            vec![some(0..1), some(4..5)],
        ],
        vec![vec![chat(), some(0..5), agent()]],
        vec![vec![agent(), some(2..5)], vec![some(0..5)], vec![chat()]],
    ];
    let mut reference: Option<Everything> = None;
    for (n, scenario) in scenarios.into_iter().enumerate() {
        let store = Store::in_memory();
        for group in &scenario {
            apply_group(&store, group, 1).unwrap();
        }
        let got = everything(&store);
        assert_eq!(got.len(), 1, "scenario {n}");
        let snapshots = &got[0].3;
        let last = snapshots.last().expect("a snapshot");
        assert_eq!(last.meta.message_count, 4, "scenario {n}: {snapshots:?}");
        assert_eq!(got[0].0.continuation_unavailable, None, "scenario {n}");
        let facts = store.facts(&run_id(1)).unwrap();
        let model = facts
            .iter()
            .find(|f| f.kind == FactKind::ModelRequest)
            .unwrap();
        assert_eq!(
            model.input.as_ref().map(|i| i.len()),
            Some(3),
            "scenario {n}"
        );
        assert_eq!(
            model.system_instructions,
            Some(serde_json::json!([{"type": "text", "content": "be brief"}]))
        );
        match &reference {
            None => reference = Some(got),
            Some(r) => assert_eq!(r, &got, "scenario {n}"),
        }
    }
}

#[test]
fn pending_spans_show_started_work_and_the_real_spans_replace_them() {
    let store = Store::in_memory();
    let all = spans();
    // The first model request, then the pending spans of the run and of its tool.
    apply_group(&store, &[spans_work(interpreted(&all[0..1]))], 1).unwrap();
    let pending = crate::test_fixtures::pending_spans();
    apply_group(&store, &[spans_work(interpreted(&pending))], 2).unwrap();
    let run = store.run(&outer_id()).unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Running);
    assert_eq!(store.resolve_run("outer-call").unwrap(), Some(outer_id()));
    let effects = store.effects(&outer_id()).unwrap();
    assert_eq!(effects.len(), 1);
    assert_eq!(effects[0].status, EffectStatus::Started);
    assert!(effects[0].ended_at.is_none());
    let kinds: Vec<_> = store
        .events(&outer_id())
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect();
    assert!(kinds.contains(&crate::domain::EventKind::ToolCallStarted));
    assert!(!kinds.contains(&crate::domain::EventKind::ToolCallCompleted));

    // The real spans replace them; a late pending span changes nothing.
    apply_group(&store, &[spans_work(interpreted(&all))], 3).unwrap();
    apply_group(&store, &[spans_work(interpreted(&pending))], 4).unwrap();
    let effects = store.effects(&outer_id()).unwrap();
    assert_eq!(effects.len(), 1);
    assert_eq!(effects[0].status, EffectStatus::Completed);
    assert_eq!(
        store.run(&outer_id()).unwrap().unwrap().status,
        RunStatus::Completed
    );
    let fresh = tempfile::tempdir().unwrap();
    let without = Store::open(fresh.path(), false).unwrap();
    apply_group(&without, &[spans_work(interpreted(&all))], 1).unwrap();
    assert_eq!(everything(&store), everything(&without));
}

#[test]
fn abandon_marks_unsettled_calls_and_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open(dir.path(), true).unwrap();
        // Only the first model request arrived; the run span never will.
        apply_group(&store, &[spans_work(interpreted(&spans()[0..1]))], 1).unwrap();
        let effects = store.effects(&outer_id()).unwrap();
        assert_eq!(effects[0].status, EffectStatus::Requested);
        let applied = apply_group(
            &store,
            &[Work::Abandon {
                run: "outer-call".into(),
                reason: "abandoned by request".into(),
                at_ns: 500,
                silent_since_ns: 0,
            }],
            2,
        )
        .unwrap();
        assert_eq!(
            applied,
            vec![Applied::Abandon(SweepOutcome::Decided(
                AbandonOutcome::Abandoned(outer_id())
            ))]
        );
    }
    let store = Store::open(dir.path(), true).unwrap();
    let run = store.run(&outer_id()).unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Abandoned);
    assert_eq!(
        store.effects(&outer_id()).unwrap()[0].status,
        EffectStatus::UnknownAfterCrash
    );
    let (listed, _) = store
        .list_runs(
            &crate::store::RunFilter {
                status: Some("abandoned".into()),
                ..Default::default()
            },
            None,
            10,
        )
        .unwrap();
    assert_eq!(listed.len(), 1);
    let (running, _) = store
        .list_runs(
            &crate::store::RunFilter {
                status: Some("running".into()),
                ..Default::default()
            },
            None,
            10,
        )
        .unwrap();
    assert!(
        running.is_empty(),
        "the old status index entry must be gone"
    );
}

/// The spans of `spans` moved to trace `[t; 16]`.
fn in_trace(spans: Vec<Span>, t: u8) -> Vec<Span> {
    spans
        .into_iter()
        .map(|mut s| {
            s.trace_id = vec![t; 16];
            s
        })
        .collect()
}

#[test]
fn an_alias_stays_with_the_run_that_claimed_it_first() {
    let second = format!("{}-{}", hex::encode([8u8; 16]), hex::encode([1u8; 8]));
    for together in [false, true] {
        let store = Store::in_memory();
        let first = interpreted(&spans());
        let other = interpreted(&in_trace(spans(), 8));
        if together {
            apply_group(&store, &[spans_work(first), spans_work(other)], 1).unwrap();
        } else {
            apply_group(&store, &[spans_work(first)], 1).unwrap();
            apply_group(&store, &[spans_work(other)], 2).unwrap();
        }
        assert_eq!(
            store.resolve_run("outer-call").unwrap(),
            Some(outer_id()),
            "together: {together}"
        );
        let claimant = store.run(&second).unwrap().unwrap();
        assert!(
            claimant
                .warnings
                .iter()
                .any(|w| w.contains("outer-call") && w.contains(&outer_id())),
            "{:?}",
            claimant.warnings
        );
        assert!(store.run(&outer_id()).unwrap().unwrap().warnings.is_empty());
        assert_eq!(store.alias_conflicts(), 1);
        // More spans of the second run (a full derivation) change nothing.
        let mut late = in_trace(crate::test_fixtures::pending_spans(), 8);
        late.truncate(1);
        apply_group(&store, &[spans_work(interpreted(&late))], 3).unwrap();
        assert_eq!(store.resolve_run("outer-call").unwrap(), Some(outer_id()));
        assert_eq!(
            store.alias_conflicts(),
            1,
            "one refused claim, counted once"
        );
        let claimant = store.run(&second).unwrap().unwrap();
        assert_eq!(
            claimant
                .warnings
                .iter()
                .filter(|w| w.contains("outer-call"))
                .count(),
            1,
            "{:?}",
            claimant.warnings
        );
        assert_readable(&store);
    }
}

#[test]
fn a_merged_run_hands_its_alias_to_the_run_it_joins() {
    // Strands: children under a cycle arrive first (an orphan run keyed by the cycle), the
    // cycle then moves them into the run above; aliases follow.
    let all = crate::test_fixtures::strands_scenario();
    let store = Store::in_memory();
    for i in (0..all.len()).rev() {
        apply_group(&store, &[spans_work(interpreted(&all[i..=i]))], 1).unwrap();
    }
    let run = store.run(&run_id(1)).unwrap().unwrap();
    for alias in &run.aliases {
        assert_eq!(
            store.resolve_run(alias).unwrap(),
            Some(run_id(1)),
            "{alias}"
        );
    }
    assert!(
        run.warnings.iter().all(|w| !w.contains("alias")),
        "{:?}",
        run.warnings
    );
    assert_readable(&store);
}

#[test]
fn a_run_whose_records_cannot_be_read_fails_permanently_naming_it() {
    let store = Store::in_memory();
    // A run whose meta is garbage: its next span cannot be applied, and never will be.
    apply_group(&store, &[spans_work(interpreted(&spans()[0..1]))], 1).unwrap();
    let mut batch = store.batch();
    batch
        .put_raw(cf::RUN_META, outer_id().as_bytes(), b"{garbage")
        .unwrap();
    store.commit(batch).unwrap();
    let error = apply_group(&store, &[spans_work(interpreted(&spans()[3..4]))], 2).unwrap_err();
    assert!(!error.is_retryable(), "{error}");
    let (run, reason) = error.damaged_run().expect("names the damaged run");
    assert_eq!(run, outer_id());
    assert!(reason.contains(cf::RUN_META.name()), "{reason}");
    assert!(error.to_string().contains(&outer_id()), "{error}");
}

#[test]
fn many_log_records_for_one_span_cost_the_writer_linear_time() {
    use std::time::{Duration, Instant};
    let (spans, _) = logged_run();
    let trace = hex::encode(crate::test_fixtures::TRACE);
    let span = hex::encode([2u8; 8]);
    // `n` user messages of one model request, sent as log records with the span.
    let apply = |n: usize| -> Duration {
        let logs: Vec<LogEvent> = (0..n)
            .map(|k| LogEvent {
                trace_id: trace.clone(),
                span_id: span.clone(),
                message_index: Some(k as i64),
                time_ns: 21,
                name: "gen_ai.user.message".into(),
                body: serde_json::json!({ "content": format!("m{k}") })
                    .as_object()
                    .cloned()
                    .unwrap_or_default(),
            })
            .collect();
        let store = Store::in_memory();
        let works = [logs_work(logs), spans_work(interpreted(&spans[0..1]))];
        let started = Instant::now();
        apply_group(&store, &works, 1).unwrap();
        let took = started.elapsed();
        let facts = store.facts(&run_id(1)).unwrap();
        assert_eq!(facts[0].input.as_ref().map(|i| i.len()), Some(n));
        took
    };
    apply(500); // warm-up
    let small = apply(1_500);
    let large = apply(12_000);
    let ratio = large.as_secs_f64() / small.as_secs_f64().max(1e-6);
    println!(
        "log records for one span: 1500 in {small:?}, 12000 in {large:?} (x{ratio:.1} for x8)"
    );
    // Linear work gives about 8x; quadratic gives 64x.
    assert!(ratio < 24.0, "x{ratio:.1} for x8 the log records");
}

#[test]
fn a_run_whose_record_is_garbage_stays_listed_next_to_the_others() {
    let store = Store::in_memory();
    apply_group(&store, &[spans_work(interpreted(&spans()))], 1).unwrap();
    let before = everything(&store);
    assert_eq!(before.len(), 2);
    let mut batch = store.batch();
    batch
        .put_raw(cf::RUNS, outer_id().as_bytes(), b"\xff not json")
        .unwrap();
    store.commit(batch).unwrap();
    let (listed, _) = store
        .list_runs(&crate::store::RunFilter::default(), None, 10)
        .unwrap();
    assert_eq!(listed.len(), 2, "{listed:?}");
    let damaged = listed.iter().find(|r| r.run_id == outer_id()).unwrap();
    assert_eq!(
        damaged.started_ns,
        before[0].0.started_ns.min(before[1].0.started_ns)
    );
    assert!(damaged.warnings[0].starts_with(crate::store::DAMAGED_WARNING));
    assert!(damaged.continuation_unavailable.is_some());
    let other = listed.iter().find(|r| r.run_id == delegate_id()).unwrap();
    assert!(other.warnings.is_empty());
    assert_eq!(store.check_readable().unwrap().len(), 1);
}

/// Google ADK with `EVENT_ONLY` capture, in its own trace: `invoke_workflow` (1, not a run) →
/// `invoke_agent trip` (2) → `generate_content` (3, 7; content only in their
/// `gen_ai.client.inference.operation.details` log records) and `execute_tool` get_weather (4)
/// and add (5) under invented `adk-` ids the messages call `get_weather_0` / `add_1`, plus the
/// `execute_tool (merged)` span (6) of the parallel calls. Items are spans or single log records.
fn adk_scenario() -> Vec<Work> {
    use crate::test_fixtures::{kv, span};
    use serde_json::json;
    let trace = [11u8; 16];
    let op = |v: &str| kv("gen_ai.operation.name", v);
    let session = || kv("gen_ai.conversation.id", "adk-session");
    let mut spans = vec![
        span(
            1,
            0,
            "invoke_workflow trip",
            0,
            vec![op("invoke_workflow"), session()],
        ),
        span(
            2,
            1,
            "invoke_agent trip",
            5,
            vec![
                op("invoke_agent"),
                session(),
                kv("gen_ai.agent.name", "trip"),
            ],
        ),
        span(
            3,
            2,
            "generate_content m",
            20,
            vec![op("generate_content"), session()],
        ),
        span(
            4,
            2,
            "execute_tool get_weather",
            40,
            vec![
                op("execute_tool"),
                kv("gen_ai.tool.name", "get_weather"),
                kv("gen_ai.tool.call.id", "adk-aaa"),
                kv("gen_ai.tool.call.arguments", r#"{"city": "Paris"}"#),
            ],
        ),
        span(
            5,
            2,
            "execute_tool add",
            41,
            vec![
                op("execute_tool"),
                kv("gen_ai.tool.name", "add"),
                kv("gen_ai.tool.call.id", "adk-bbb"),
            ],
        ),
        span(
            6,
            2,
            "execute_tool (merged)",
            42,
            vec![
                op("execute_tool"),
                kv("gen_ai.tool.name", "(merged tools)"),
                kv("gen_ai.tool.call.id", "ev-1"),
            ],
        ),
        span(
            7,
            2,
            "generate_content m",
            60,
            vec![op("generate_content"), session()],
        ),
    ];
    for s in &mut spans {
        s.trace_id = trace.to_vec();
    }
    spans[1].end_time_unix_nano = 80;
    spans[0].end_time_unix_nano = 81;
    let user = json!({"role": "user", "parts": [{"type": "text", "content": "Paris, 2 + 3?"}]});
    let calls = json!({"role": "assistant", "parts": [
        {"type": "tool_call", "id": "get_weather_0", "name": "get_weather", "arguments": {"city": "Paris"}},
        {"type": "tool_call", "id": "add_1", "name": "add", "arguments": {"a": 2, "b": 3}}]});
    let results = json!({"role": "user", "parts": [
        {"type": "tool_call_response", "id": "get_weather_0", "response": {"sky": "sunny"}},
        {"type": "tool_call_response", "id": "add_1", "response": {"result": 5}}]});
    let answer = json!({"role": "assistant", "parts": [{"type": "text", "content": "Sunny; 5."}]});
    let system = json!([{"type": "text", "content": "You plan trips."}]);
    let details =
        |span_id: u8, time: u64, input: serde_json::Value, output: serde_json::Value| LogEvent {
            trace_id: hex::encode(trace),
            span_id: hex::encode([span_id; 8]),
            message_index: None,
            time_ns: time,
            name: "gen_ai.client.inference.operation.details".into(),
            body: json!({
                "gen_ai.input.messages": input,
                "gen_ai.output.messages": output,
                "gen_ai.system_instructions": system,
                "gen_ai.conversation.id": "adk-session",
            })
            .as_object()
            .cloned()
            .unwrap_or_default(),
        };
    let logs = vec![
        details(3, 30, json!([user]), json!([calls])),
        details(7, 70, json!([user, calls, results]), json!([answer])),
    ];
    let mut work: Vec<Work> = spans
        .iter()
        .map(|s| spans_work(interpreted(std::slice::from_ref(s))))
        .collect();
    work.extend(logs.into_iter().map(|l| logs_work(vec![l])));
    work
}

fn work_clone(w: &Work) -> Work {
    match w {
        Work::Received { spans, logs, .. } => Work::Received {
            spans: spans.clone(),
            logs: logs.clone(),
            outbox: None,
        },
        _ => unreachable!("only received work in the ADK scenario"),
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 32, ..Default::default() })]

    /// Google ADK: spans and log records in any arrival order, split into any commits, with
    /// duplicates, give the run the whole scenario gives at once: one run (not one for the
    /// workflow), the tool spans' `adk-` ids joined to the messages' calls, the content from the
    /// log records, a complete snapshot.
    #[test]
    fn adk_any_arrival_order_of_spans_and_logs_gives_the_same_run(
        order in proptest::strategy::Strategy::prop_shuffle(proptest::strategy::Just((0..9usize).collect::<Vec<_>>())),
        commit_cuts in proptest::collection::vec(proptest::bool::ANY, 9),
        dups in proptest::collection::vec(0..9usize, 0..3),
    ) {
        let all = adk_scenario();
        proptest::prop_assert_eq!(all.len(), 9);
        let reference = {
            let store = Store::in_memory();
            let group: Vec<Work> = all.iter().map(work_clone).collect();
            apply_group(&store, &group, 1).unwrap();
            everything(&store)
        };
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), false).unwrap();
        let mut group: Vec<Work> = Vec::new();
        for (n, &i) in order.iter().chain(dups.iter()).enumerate() {
            group.push(work_clone(&all[i]));
            if commit_cuts[n % commit_cuts.len()] {
                apply_group(&store, &group, n as u64).unwrap();
                group.clear();
            }
        }
        apply_group(&store, &group, 99).unwrap();
        assert_readable(&store);
        proptest::prop_assert_eq!(&reference, &everything(&store));
        proptest::prop_assert_eq!(reference.len(), 1);
        let run_id = format!("{}-{}", hex::encode([11u8; 16]), hex::encode([2u8; 8]));
        let run = store.run(&run_id).unwrap().unwrap();
        proptest::prop_assert_eq!(run.status, RunStatus::Completed);
        proptest::prop_assert_eq!(run.model_request_count, 2);
        proptest::prop_assert_eq!(run.conversation_id.as_deref(), Some("adk-session"));
        proptest::prop_assert!(
            run.warnings.iter().any(|w| w.contains("adk-aaa")),
            "{:?}", run.warnings
        );
        let effects = store.effects(&run_id).unwrap();
        let joined: Vec<(&str, Option<&str>, EffectStatus)> = effects
            .iter()
            .map(|e| (e.tool_call_id.as_str(), e.span_id.as_deref(), e.status))
            .collect();
        let (s4, s5) = (hex::encode([4u8; 8]), hex::encode([5u8; 8]));
        proptest::prop_assert_eq!(
            joined,
            vec![
                ("get_weather_0", Some(s4.as_str()), EffectStatus::Completed),
                ("add_1", Some(s5.as_str()), EffectStatus::Completed),
            ]
        );
        let snapshots = store.snapshots(&run_id).unwrap();
        proptest::prop_assert_eq!(
            snapshots.last().map(|s| (s.meta.state, s.meta.message_count)),
            Some((crate::domain::SnapshotState::Complete, 4))
        );
    }
}

/// The Vercel AI SDK recordings: v6 generateText and streamText (tool spans beside the model
/// requests), v7 `LegacyOpenTelemetry` (tool spans nested in the model requests) and v7
/// `@ai-sdk/otel` GenAI spans (`step {n}` groups), four traces of one run each.
fn vercel_ai_recordings() -> Vec<Span> {
    use crate::interpreter::vercel_ai::fixtures::{spans, V6, V7_GENAI, V7_LEGACY};
    let mut all = spans(V6);
    all.extend(spans(V7_LEGACY));
    all.extend(spans(V7_GENAI));
    all
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 32, ..Default::default() })]

    /// The Vercel AI SDK's span shapes, whose tool calls are siblings of, nested in, or grouped
    /// with the model requests: any arrival order and split gives the same four runs, each with
    /// its three model requests, its two completed and one failed tool call and a complete last
    /// snapshot; no run for a step or a model request.
    #[test]
    fn vercel_ai_any_arrival_order_gives_the_same_runs(
        order in proptest::strategy::Strategy::prop_shuffle(proptest::strategy::Just((0..31usize).collect::<Vec<_>>())),
        cuts in proptest::collection::vec(proptest::bool::ANY, 31),
        commit_cuts in proptest::collection::vec(proptest::bool::ANY, 31),
        dups in proptest::collection::vec(0..31usize, 0..4),
    ) {
        let all = vercel_ai_recordings();
        proptest::prop_assert_eq!(all.len(), 31);
        let sequence: Vec<usize> = order.iter().copied().chain(dups.iter().copied()).collect();
        let (reference, _dir, store) = replay(&all, &sequence, &cuts, &commit_cuts);
        proptest::prop_assert_eq!(reference.clone(), everything(&store));
        proptest::prop_assert_eq!(reference.len(), 4);
        let mut conversations = Vec::new();
        for (run, _, effects, snapshots) in &reference {
            proptest::prop_assert_eq!(run.agent_name.as_deref(), Some("travel-agent"));
            proptest::prop_assert_eq!(run.status, RunStatus::Completed);
            proptest::prop_assert_eq!(run.model_request_count, 3);
            proptest::prop_assert_eq!(run.tool_call_count, 3);
            let mut statuses: Vec<EffectStatus> = effects.iter().map(|e| e.status).collect();
            statuses.sort_by_key(|s| format!("{s:?}"));
            proptest::prop_assert_eq!(
                statuses,
                vec![EffectStatus::Completed, EffectStatus::Completed, EffectStatus::Failed]
            );
            proptest::prop_assert_eq!(
                snapshots.last().map(|s| s.meta.state),
                Some(crate::domain::SnapshotState::Complete)
            );
            conversations.extend(run.conversation_id.clone());
        }
        conversations.sort();
        proptest::prop_assert_eq!(
            conversations,
            vec!["vercel-session-generate".to_string(), "vercel-session-stream".to_string()]
        );
    }
}
