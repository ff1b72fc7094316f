//! What the writer costs per agent span: the bytes a loadgen-shaped Pydantic AI run (ten model
//! requests resending the whole history, nine tools, the agent span, all in one request)
//! commits per column family, and the store reads the writer makes for it. The budgets keep
//! the cuts made for issue 15 from creeping back.

use std::collections::BTreeMap;
use std::sync::Mutex;

use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::trace::v1::Span;

use super::*;
use crate::interpreter::{interpret_span_with, PrefixMemo};
use crate::store::kv::{KvBatch, KvStore, Op, Visit};
use crate::store::{Cf, MemoryKv};

/// Reads and written bytes per column family, counted on the way to a [`MemoryKv`].
#[derive(Default)]
struct Counts {
    /// Point reads (get, contains, one per multi-get key) per column family.
    reads: BTreeMap<Cf, u64>,
    /// Scans (forwards or backwards) per column family.
    scans: BTreeMap<Cf, u64>,
    /// Key and value bytes put per column family.
    put_bytes: BTreeMap<Cf, u64>,
    /// Puts per column family.
    puts: BTreeMap<Cf, u64>,
}

/// A [`MemoryKv`] that counts what goes through it.
struct Counting {
    inner: MemoryKv,
    counts: std::sync::Arc<Mutex<Counts>>,
}

impl Counting {
    fn count(&self, f: impl FnOnce(&mut Counts)) {
        f(&mut self.counts.lock().unwrap_or_else(|p| p.into_inner()));
    }
}

impl KvStore for Counting {
    fn get(&self, cf: Cf, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.count(|c| *c.reads.entry(cf).or_default() += 1);
        self.inner.get(cf, key)
    }
    fn contains(&self, cf: Cf, key: &[u8]) -> Result<bool, StoreError> {
        self.count(|c| *c.reads.entry(cf).or_default() += 1);
        self.inner.contains(cf, key)
    }
    fn multi_get(&self, cf: Cf, keys: &[Vec<u8>]) -> Result<Vec<Option<Vec<u8>>>, StoreError> {
        self.count(|c| *c.reads.entry(cf).or_default() += keys.len() as u64);
        self.inner.multi_get(cf, keys)
    }
    fn scan(&self, cf: Cf, prefix: &[u8], from: &[u8], visit: Visit<'_>) -> Result<(), StoreError> {
        self.count(|c| *c.scans.entry(cf).or_default() += 1);
        self.inner.scan(cf, prefix, from, visit)
    }
    fn scan_back(
        &self,
        cf: Cf,
        prefix: &[u8],
        from: Option<&[u8]>,
        visit: Visit<'_>,
    ) -> Result<(), StoreError> {
        self.count(|c| *c.scans.entry(cf).or_default() += 1);
        self.inner.scan_back(cf, prefix, from, visit)
    }
    fn write(&self, batch: KvBatch, sync: bool) -> Result<u64, StoreError> {
        self.count(|c| {
            for op in batch.ops() {
                if let Op::Put { cf, key, value } = op {
                    *c.put_bytes.entry(*cf).or_default() += (key.len() + value.len()) as u64;
                    *c.puts.entry(*cf).or_default() += 1;
                }
            }
        });
        self.inner.write(batch, sync)
    }
    fn flush(&self) -> Result<(), StoreError> {
        self.inner.flush()
    }
    fn compact(&self) -> Result<(), StoreError> {
        self.inner.compact()
    }
    fn compact_range(&self, cf: Cf, from: &[u8], to: &[u8]) -> Result<(), StoreError> {
        self.inner.compact_range(cf, from, to)
    }
    fn estimated_keys(&self, cf: Cf) -> Result<u64, StoreError> {
        self.inner.estimated_keys(cf)
    }
    fn live_bytes(&self, cf: Cf) -> u64 {
        self.inner.live_bytes(cf)
    }
}

fn text_kv(key: &str, value: impl Into<String>) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.into())),
        }),
        key_strindex: 0,
    }
}

fn int_kv(key: &str, value: i64) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::IntValue(value)),
        }),
        key_strindex: 0,
    }
}

/// Text of about `n` bytes, different for each `seed`.
fn text(seed: u64, n: usize) -> String {
    let words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta"];
    let mut s = String::with_capacity(n + 8);
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    while s.len() < n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.push_str(words[(x % words.len() as u64) as usize]);
        s.push(' ');
    }
    s
}

/// A loadgen-shaped Pydantic AI run `r` (see `examples/loadgen.rs`, `build_run`): `steps`
/// model requests, each resending the history so far, a tool after each but the last, and the
/// agent span with the whole history; children first, agent span last.
fn agent_run(r: u8, steps: u64) -> Vec<Span> {
    let trace = [r; 16];
    let root = [r, 0, 0, 0, 0, 0, 0, 1];
    let seed = u64::from(r) * 1000;
    let call_id = format!("call-{r}");
    let instructions =
        serde_json::json!([{"type": "text", "content": text(seed, 400)}]).to_string();
    let mut history = vec![
        serde_json::json!({"role": "user", "parts": [{"type": "text", "content": text(seed + 1, 400)}]}),
    ];
    let span = |n: u64, name: &str, start: u64, end: u64, attrs: Vec<KeyValue>| Span {
        trace_id: trace.to_vec(),
        span_id: if n == 0 {
            root.to_vec()
        } else {
            let mut id = [r, 1, 0, 0, 0, 0, 0, 0];
            id[6..].copy_from_slice(&(n as u16).to_be_bytes());
            id.to_vec()
        },
        parent_span_id: if n == 0 { vec![] } else { root.to_vec() },
        name: name.into(),
        start_time_unix_nano: start,
        end_time_unix_nano: end,
        attributes: attrs,
        ..Default::default()
    };
    let mut spans = Vec::new();
    let mut t = 1_000_000u64;
    let mut final_answer = String::new();
    for k in 0..steps {
        let last = k + 1 == steps;
        let tool_call_id = format!("call_{r}_{k}");
        let arguments = serde_json::json!({"query": text(seed + 10 + k, 100)});
        let assistant = if last {
            final_answer = text(seed + 30 + k, 400);
            serde_json::json!({"role": "assistant", "parts": [{"type": "text", "content": final_answer}], "finish_reason": "stop"})
        } else {
            serde_json::json!({"role": "assistant", "parts": [{"type": "tool_call", "id": tool_call_id, "name": "search", "arguments": arguments}], "finish_reason": "tool_call"})
        };
        let input = serde_json::Value::Array(history.clone()).to_string();
        let output = serde_json::json!([assistant]).to_string();
        let attrs = vec![
            text_kv("gen_ai.operation.name", "chat"),
            text_kv("gen_ai.provider.name", "openai"),
            text_kv("gen_ai.system", "openai"),
            text_kv("gen_ai.request.model", "gpt-4o"),
            text_kv("gen_ai.response.model", "gpt-4o"),
            text_kv("gen_ai.response.id", format!("resp_{r}_{k}")),
            text_kv("server.address", "api.example.com"),
            text_kv("gen_ai.agent.name", "support"),
            text_kv("gen_ai.agent.call.id", call_id.clone()),
            text_kv("gen_ai.conversation.id", format!("conv-{r}")),
            text_kv("gen_ai.input.messages", input),
            text_kv("gen_ai.output.messages", output),
            text_kv("gen_ai.system_instructions", instructions.clone()),
            int_kv("gen_ai.usage.input_tokens", 100),
            int_kv("gen_ai.usage.output_tokens", 20),
        ];
        spans.push(span(2 * k + 1, "chat gpt-4o", t, t + 1_000_000, attrs));
        t += 2_000_000;
        history.push(assistant);
        if !last {
            let result = text(seed + 50 + k, 400);
            let attrs = vec![
                text_kv("gen_ai.operation.name", "execute_tool"),
                text_kv("gen_ai.tool.name", "search"),
                text_kv("gen_ai.tool.call.id", tool_call_id.clone()),
                text_kv("gen_ai.tool.call.arguments", arguments.to_string()),
                text_kv("gen_ai.tool.call.result", result.clone()),
            ];
            spans.push(span(
                2 * k + 2,
                "execute_tool search",
                t,
                t + 500_000,
                attrs,
            ));
            t += 1_000_000;
            history.push(serde_json::json!({"role": "user", "parts": [{"type": "tool_call_response", "id": tool_call_id, "name": "search", "result": result}]}));
        }
    }
    let attrs = vec![
        text_kv("gen_ai.operation.name", "invoke_agent"),
        text_kv("gen_ai.agent.name", "support"),
        text_kv("gen_ai.agent.call.id", call_id),
        text_kv("gen_ai.conversation.id", format!("conv-{r}")),
        text_kv("model_name", "gpt-4o"),
        text_kv("agent_name", "support"),
        text_kv(
            "pydantic_ai.all_messages",
            serde_json::Value::Array(history).to_string(),
        ),
        text_kv("gen_ai.system_instructions", instructions),
        text_kv("final_result", final_answer),
        int_kv("gen_ai.usage.input_tokens", 1000),
        int_kv("gen_ai.usage.output_tokens", 200),
    ];
    spans.push(span(0, "invoke_agent support", 0, t + 1_000_000, attrs));
    spans
}

/// Applies `runs` agent runs, one request each as loadgen sends them (interpreted through the
/// memo, as the receiver does), to a counting store; gives the counts and the spans sent.
fn apply_runs(runs: u8) -> (Counts, u64, Store) {
    let counts = std::sync::Arc::new(Mutex::new(Counts::default()));
    let kv = Counting {
        inner: MemoryKv::new(),
        counts: counts.clone(),
    };
    let store = Store::over(Box::new(kv), false, "memory").unwrap();
    *counts.lock().unwrap() = Counts::default();
    let memo = PrefixMemo::default();
    let mut spans = 0;
    for r in 1..=runs {
        let request: Vec<Interpreted> = agent_run(r, 10)
            .iter()
            .filter_map(|s| interpret_span_with(s, &memo, &Default::default()).ok())
            .collect();
        spans += request.len() as u64;
        let work = Work::Received {
            spans: request,
            logs: Vec::new(),
            outbox: None,
        };
        apply_group(&store, &[work], u64::from(r)).unwrap();
    }
    let counts = std::mem::take(&mut *counts.lock().unwrap());
    (counts, spans, store)
}

/// Per span: what a loadgen agent run commits (bytes per column family) and reads, printed
/// for the benchmark notes, and held under the budgets.
#[test]
fn an_agent_run_in_one_request_commits_and_reads_within_budget() {
    let (counts, spans, store) = apply_runs(8);
    assert_eq!(spans, 8 * 20);
    let total: u64 = counts.put_bytes.values().sum();
    let puts: u64 = counts.puts.values().sum();
    let reads: u64 = counts.reads.values().sum();
    let scans: u64 = counts.scans.values().sum();
    eprintln!(
        "per span: {} bytes in {:.1} puts, {:.2} point reads, {:.2} scans",
        total / spans,
        puts as f64 / spans as f64,
        reads as f64 / spans as f64,
        scans as f64 / spans as f64
    );
    for (cf, bytes) in &counts.put_bytes {
        eprintln!(
            "  {cf:?}: {} bytes, {:.2} puts per span",
            bytes / spans,
            counts.puts[cf] as f64 / spans as f64
        );
    }
    for (cf, n) in &counts.reads {
        eprintln!("  reads {cf:?}: {:.2} per span", *n as f64 / spans as f64);
    }
    for (cf, n) in &counts.scans {
        eprintln!("  scans {cf:?}: {:.2} per span", *n as f64 / spans as f64);
    }
    // Every run reads back whole.
    for r in 1..=8u8 {
        let run_id = format!(
            "{}-{}",
            hex::encode([r; 16]),
            hex::encode([r, 0, 0, 0, 0, 0, 0, 1])
        );
        let run = store
            .run_record(&run_id)
            .unwrap()
            .expect("the run is stored");
        assert_eq!(
            (run.model_request_count, run.tool_call_count),
            (10, 9),
            "{run:?}"
        );
        // A stored fact names its instructions by the key of their body, and reads back with
        // them.
        let stored = store.stored_facts(&run_id).unwrap();
        let with_instructions = |kind| stored.iter().filter(move |s| s.fact.kind == kind);
        assert_eq!(with_instructions(FactKind::ModelRequest).count(), 10);
        for s in
            with_instructions(FactKind::ModelRequest).chain(with_instructions(FactKind::AgentRun))
        {
            assert!(s.instructions.is_some() && s.fact.system_instructions.is_none());
        }
        let facts = store.facts(&run_id).unwrap();
        for f in facts.iter().filter(|f| f.kind != FactKind::ToolCall) {
            let text = f
                .system_instructions
                .as_ref()
                .and_then(|v| v[0]["content"].as_str());
            assert!(text.is_some_and(|t| t.len() >= 400), "{f:?}");
        }
    }
    // Budgets (measured: 2,644 bytes, 10.4 puts, 1.45 point reads and 0 scans per span;
    // 1.45 scans before the runs waiting for a history or a tool span were looked for only in a
    // store that may hold one; before the second round of issue 15 it committed 2,902 bytes in
    // 10.8 puts and read 1.9 keys and scanned 1.95 times per span, before the first 6.8 keys and
    // 2.5 scans).
    assert!(total / spans <= 2_750, "{} bytes per span", total / spans);
    assert!(puts * 10 <= 105 * spans, "{puts} puts for {spans} spans");
    assert!(
        reads * 100 <= 150 * spans,
        "{reads} point reads for {spans} spans"
    );
    // Nothing waits for these runs' histories or tool spans: nothing is scanned for.
    assert_eq!(scans, 0, "{:?}", counts.scans);
    // A new run has no fact to scan for; an answer to the run's own call (its tool loop) is
    // neither indexed nor looked up.
    for cf in [Cf::Facts, Cf::RunIndex] {
        assert_eq!(counts.scans.get(&cf), None, "scans of {cf:?}");
    }
    assert_eq!(counts.reads.get(&Cf::RunState), None, "reads of run state");
    // Facts name their instructions: a fact is under 900 bytes on average.
    assert!(counts.put_bytes[&Cf::Facts] / spans <= 900);
    // The facts of a new run are read with one scan, its grouping-span parent and history keys
    // once: nothing is read per span from these column families.
    for cf in [
        Cf::Facts,
        Cf::GroupSpans,
        Cf::RunKeys,
        Cf::History,
        Cf::Messages,
    ] {
        let n = counts.reads.get(&cf).copied().unwrap_or(0);
        assert!(n <= 2 * 8, "{n} reads of {cf:?} for 8 runs");
    }
    // No log record was ever stored: no span looks for its log records.
    assert_eq!(counts.scans.get(&Cf::SpanLogs), None);
}

/// A log record stored before a restart is found after it: the store notes at opening that it
/// holds log records (spans look for theirs only then), and a store that never held one finds
/// a record as soon as one is put.
#[test]
fn log_records_are_found_after_a_restart_and_once_the_first_is_put() {
    use crate::interpreter::LogEvent;
    let event = |span: &str| LogEvent {
        trace_id: "aa".repeat(16),
        span_id: span.to_string(),
        message_index: Some(0),
        time_ns: 5,
        name: "gen_ai.user.message".into(),
        body: serde_json::Map::new(),
    };
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open(dir.path(), false).unwrap();
        assert!(store.span_logs(&"aa".repeat(16), "s1").unwrap().is_empty());
        apply_group(
            &store,
            &[Work::Received {
                spans: Vec::new(),
                logs: vec![event("s1")],
                outbox: None,
            }],
            1,
        )
        .unwrap();
        assert_eq!(
            store.span_logs(&"aa".repeat(16), "s1").unwrap(),
            vec![event("s1")]
        );
    }
    let reopened = Store::open(dir.path(), false).unwrap();
    assert_eq!(
        reopened.span_logs(&"aa".repeat(16), "s1").unwrap(),
        vec![event("s1")]
    );
    assert!(reopened
        .span_logs(&"aa".repeat(16), "s2")
        .unwrap()
        .is_empty());
}
