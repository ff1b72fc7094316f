//! History storage and continuation benchmark: one long run (default 1,000 steps) ingested step by
//! step through the real ingest service into a real RocksDB store, then measured.
//!
//! ```sh
//! cargo run --release --example history_bench -- --steps 1000 --iterations 200
//! ```
//!
//! `--formats otel,pydantic-ai` and `--modes cold,next-step,prefetched,render,warm,restart,
//! restart-prefetched,restart-asked-before` measure some continuations only;
//! `--checkpoints 10,100` sets the steps after which a report is printed besides the last.
//! `--store DIR` keeps the store in DIR: the first run ingests into it, a later one finds the
//! bench run there and measures the continuations only. Instruction counts of the timed path:
//! `valgrind --tool=callgrind --collect-atstart=no
//! --toggle-collect='stepline::continuation::respond::answer'
//! --toggle-collect='stepline::continuation::respond::Continuations::kept_or_loaded'
//! --toggle-collect='stepline::continuation::context::ContextCache::get' history_bench --store
//! DIR ...` (the context is read on a thread of its own; the untimed loads of
//! `restart-prefetched` and `restart-asked-before` read it too, and `next-step`'s untimed
//! ingest writes through the same paths).
//!
//! Each step is one OTLP export request holding a Pydantic-AI-shaped `chat` span (the whole history
//! so far in `gen_ai.input.messages`, one tool call out) and the `execute_tool` span answering it.
//! Reported:
//! - storage: the sum of the distinct messages' bytes (canonical JSON) against the uncompressed
//!   key + value bytes of every column family, and the SST bytes on disk after a flush and a full
//!   compaction (compressed);
//! - ingest: the time and the bytes committed of each step's export (interpret + apply + commit),
//!   early vs late, the time of interpreting the same spans alone, and of applying them to a
//!   second store alone (the store's part: merge, append or derive, durable commit);
//! - continuation: the answer for the latest snapshot, through the API's own path, p50/p99 per
//!   format: cold, right after one more step was ingested (on a copy of the store, the read
//!   before it having left the history and context of the step before in memory), right after
//!   the service loaded
//!   the run ahead, rendered from cached history, and kept from an earlier request; and, after
//!   the run (the store closed and opened again before each read, so RocksDB's block cache and
//!   every cache of the process start empty), the first read after a restart, without the load
//!   ahead the service does at start, with it for a format not asked for before the restart,
//!   and with it for a format that was (whose answer the load ahead renders).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use serde_json::{json, Value};
use stepline::continuation::{self, prefetch, Continuations, Format};
use stepline::domain::{IdMap, MessageHash, SnapshotState};
use stepline::exporter::Outbox;
use stepline::ingest::{apply_group, Ingest, Work};
use stepline::interpreter::{interpret_span_with, PrefixMemo};
use stepline::media::Media;
use stepline::store::{keys::cf, Store};

const TRACE: [u8; 16] = [9; 16];
const ALIAS: &str = "bench-run";

struct Args {
    steps: usize,
    /// Steps after which the full report is printed too (so a long run that is stopped early
    /// still reports).
    checkpoints: Vec<usize>,
    iterations: usize,
    text_bytes: usize,
    /// Formats whose continuation is measured (all by default).
    formats: Vec<Format>,
    /// Continuation modes measured (`cold`, `prefetched`, `warm`; all by default).
    modes: Vec<String>,
    /// A directory to keep the store in: ingested into when it holds no bench run yet, else
    /// reused as it is (no ingest), so the continuation part alone can be measured, e.g. under
    /// callgrind.
    store: Option<std::path::PathBuf>,
}

/// Steps ingested and read, not timed, before `next-step`'s timed ones (see [`next_steps`]).
const NEXT_STEP_WARMUP: usize = 5;

/// The continuation modes, in the order they are measured.
const MODES: [&str; 8] = [
    "cold",
    "next-step",
    "prefetched",
    "render",
    "warm",
    "restart",
    "restart-prefetched",
    "restart-asked-before",
];

/// The modes measured once the run is over, on a store opened again before each read.
const RESTART_MODES: [&str; 3] = ["restart", "restart-prefetched", "restart-asked-before"];

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args {
        steps: 1000,
        checkpoints: vec![10, 100, 250, 500, 750],
        iterations: 200,
        text_bytes: 200,
        formats: Format::NAMES
            .iter()
            .filter_map(|n| Format::parse(n))
            .collect(),
        modes: MODES.iter().map(|m| m.to_string()).collect(),
        store: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| anyhow!("{flag} needs a value"))?;
        match flag.as_str() {
            "--formats" => {
                args.formats = value
                    .split(',')
                    .map(|n| Format::parse(n).ok_or_else(|| anyhow!("unknown format {n:?}")))
                    .collect::<anyhow::Result<_>>()?;
                continue;
            }
            "--modes" => {
                args.modes = value.split(',').map(str::to_string).collect();
                if let Some(m) = args.modes.iter().find(|m| !MODES.contains(&m.as_str())) {
                    bail!("unknown mode {m:?} (modes: {})", MODES.join(", "));
                }
                continue;
            }
            "--store" => {
                args.store = Some(value.into());
                continue;
            }
            "--checkpoints" => {
                args.checkpoints = value
                    .split(',')
                    .map(|n| n.parse().with_context(|| format!("--checkpoints: {n:?}")))
                    .collect::<anyhow::Result<_>>()?;
                continue;
            }
            _ => {}
        }
        let n: usize = value
            .parse()
            .with_context(|| format!("{flag} takes a whole number, not {value:?}"))?;
        match flag.as_str() {
            "--steps" => args.steps = n,
            "--iterations" => args.iterations = n,
            "--text-bytes" => args.text_bytes = n,
            other => return Err(anyhow!("unknown option {other}")),
        }
    }
    Ok(args)
}

fn kv(key: &str, value: String) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value)),
        }),
        key_strindex: 0,
    }
}

fn span(
    trace: [u8; 16],
    id: u64,
    parent: u64,
    name: &str,
    (start, end): (u64, u64),
    attrs: Vec<KeyValue>,
) -> Span {
    Span {
        trace_id: trace.to_vec(),
        span_id: id.to_be_bytes().to_vec(),
        parent_span_id: if parent == 0 {
            vec![]
        } else {
            parent.to_be_bytes().to_vec()
        },
        name: name.into(),
        start_time_unix_nano: start,
        end_time_unix_nano: end,
        attributes: attrs,
        ..Default::default()
    }
}

fn request(spans: Vec<Span>) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    let temp = tempfile::tempdir()?;
    let dir = args
        .store
        .clone()
        .unwrap_or_else(|| temp.path().to_path_buf());
    let store = Arc::new(Store::open(&dir, false)?);
    if store.resolve_run(ALIAS)?.is_some() {
        println!("reusing the bench run in {}", dir.display());
        continuation_report(&store, &args).await?;
        let Ok(store) = Arc::try_unwrap(store) else {
            bail!("the store is still shared after the run");
        };
        drop(store);
        return after_restart(&dir, &args).await;
    }
    let apply_dir = tempfile::tempdir()?;
    let apply_store = Store::open(apply_dir.path(), false)?;
    // No exporters: the benchmark measures interpretation and storage, not forwarding.
    let ingest = Ingest::new(store.clone(), Arc::new(Outbox::disabled()));
    let filler = "x".repeat(args.text_bytes);

    let mut run = BenchRun::new(TRACE, ALIAS, &filler);
    let mut step_times: Vec<Duration> = Vec::with_capacity(args.steps);
    let mut step_bytes: Vec<u64> = Vec::with_capacity(args.steps);
    let mut interpret_times: Vec<Duration> = Vec::with_capacity(args.steps);
    let mut apply_times: Vec<Duration> = Vec::with_capacity(args.steps);
    // The interpretation alone runs with a memo of its own, as the ingest service's does (the
    // service's memo sees each history once too, so neither reads the other's work).
    let memo = PrefixMemo::default();

    for step in 1..=args.steps {
        let t = run.time_of(step);
        let (chat, tool) = run.step(step, &filler);
        // The interpretation alone (parse and hash the history the span carries): the part of
        // a step that grows with the history whatever the store does.
        let started = Instant::now();
        let interpreted: Vec<_> = [&chat, &tool]
            .into_iter()
            .filter_map(|span| interpret_span_with(span, &memo, &Default::default()).ok())
            .collect();
        interpret_times.push(started.elapsed());
        if interpreted.len() != 2 {
            return Err(anyhow!("step {step}: a span was not interpreted"));
        }
        // The store's part alone: the same spans applied to a second store (merge facts,
        // append or derive, one durable commit), as the writer does.
        let work = Work::Received {
            spans: interpreted,
            logs: Vec::new(),
            outbox: None,
        };
        let works = [work];
        let started = Instant::now();
        apply_group(&apply_store, &works, t)?;
        apply_times.push(started.elapsed());
        // Freeing the interpreted history (a JSON tree per message the span carried) is the
        // interpretation's cost, not the store's: outside the measurement.
        drop(works);
        let bytes_before = store.committed_bytes();
        let started = Instant::now();
        ingest
            .export_traces(request(vec![chat, tool]))
            .await
            .map_err(|e| anyhow!("step {step}: {e}"))?;
        step_times.push(started.elapsed());
        step_bytes.push(store.committed_bytes() - bytes_before);

        if step % 100 == 0 {
            eprintln!("step {step}: {:.2} ms", ms(step_times[step - 1]));
        }
        if args.checkpoints.contains(&step) || step == args.steps {
            let steps = Steps {
                times: &step_times,
                bytes: &step_bytes,
                interpret: &interpret_times,
                apply: &apply_times,
            };
            report(&store, &run.history, &steps, &args).await?;
        }
    }
    second_run(&ingest, &filler, &step_times).await?;
    // Every holder of the store lets go, so RocksDB is closed and can be opened again.
    drop(ingest);
    let Ok(store) = Arc::try_unwrap(store) else {
        bail!("the store is still shared after the run");
    };
    drop(store);
    after_restart(&dir, &args).await
}

/// The first continuation after a restart, per format: before each read the store is opened
/// anew (RocksDB's block cache empty, no cache of the process held; the operating system's page
/// cache stays warm) and, in `restart-prefetched` and `restart-asked-before`, the runs active at
/// start loaded ahead as the service does when it starts (not timed): in the first with no
/// request kept from before the restart (the history is loaded ahead, the answer rendered when
/// asked), in the second with this format's request kept as the one asked for before it (its
/// answer rendered ahead too).
async fn after_restart(dir: &std::path::Path, args: &Args) -> anyhow::Result<()> {
    let modes: Vec<&str> = args
        .modes
        .iter()
        .map(String::as_str)
        .filter(|m| RESTART_MODES.contains(m))
        .collect();
    if modes.is_empty() {
        return Ok(());
    }
    println!(
        "continuation of the latest snapshot after a restart ({} iterations each; the store \
         opened again before each read): restart: the first read; restart-prefetched: the first \
         read after the service's load ahead at start, the format not asked for before the \
         restart; restart-asked-before: the same, the format asked for before it:",
        args.iterations
    );
    for &format in &args.formats {
        let request = continuation::Request::latest(format);
        for &mode in &modes {
            let mut times = Vec::with_capacity(args.iterations);
            let mut size = 0;
            for _ in 0..args.iterations {
                let store = Arc::new(Store::open(dir, false)?);
                match mode {
                    "restart-asked-before" => store.keep_recent_request_lines(&[request.line()])?,
                    _ => store.keep_recent_request_lines(&[])?,
                }
                let continuations = Arc::new(Continuations::new(
                    store.clone(),
                    Arc::new(Media::in_memory(None)),
                ));
                if mode != "restart" {
                    let loaded =
                        prefetch::load_ahead_at_open(&continuations, prefetch::MIN_MESSAGES)
                            .await?;
                    if loaded == 0 {
                        bail!("the run was not loaded ahead at start");
                    }
                }
                let started = Instant::now();
                let body = continuations.respond(ALIAS, request).await?;
                times.push(started.elapsed());
                size = body.len();
            }
            times.sort();
            println!(
                "  {:<17} {mode:<18} p50 {:>7.3} ms  p99 {:>7.3} ms  max {:>7.3} ms  ({size} bytes)",
                format.as_str(),
                ms(percentile(&times, 0.50)),
                ms(percentile(&times, 0.99)),
                ms(percentile(&times, 1.0)),
            );
        }
    }
    Ok(())
}

/// One bench run: its trace, alias and the history its next model request carries.
struct BenchRun {
    trace: [u8; 16],
    alias: &'static str,
    history: Vec<Value>,
}

impl BenchRun {
    fn new(trace: [u8; 16], alias: &'static str, filler: &str) -> Self {
        Self {
            trace,
            alias,
            history: vec![json!({"role": "user", "parts": [
                {"type": "text", "content": format!("Start the long task. {filler}")}
            ]})],
        }
    }

    /// Start of a step's model request, in nanoseconds since the epoch.
    fn time_of(&self, step: usize) -> u64 {
        1_800_000_000_000_000_000 + step as u64 * 1_000_000
    }

    /// The spans of one step: a `chat` span carrying the whole history so far and asking for
    /// one tool call, and the `execute_tool` span answering it. The history then holds both.
    /// The history after `steps` steps, without making their spans (to go on with a run stored
    /// by an earlier bench).
    fn after(trace: [u8; 16], alias: &'static str, filler: &str, steps: usize) -> Self {
        let mut run = Self::new(trace, alias, filler);
        for step in 1..=steps {
            let (call, answer) = Self::step_messages(step, filler);
            run.history.push(call);
            run.history.push(answer);
        }
        run
    }

    /// The two messages a step adds to the history: the model's tool call and its answer.
    fn step_messages(step: usize, filler: &str) -> (Value, Value) {
        let call_id = format!("call_{step}");
        let call = json!({"role": "assistant", "parts": [
            {"type": "text", "content": format!("Step {step}: working. {filler}")},
            {"type": "tool_call", "id": call_id, "name": "work", "arguments": {"step": step}}
        ]});
        let answer = json!({"role": "user", "parts": [
            {"type": "tool_call_response", "id": call_id, "name": "work",
             "result": format!("result of step {step}: {filler}")}
        ]});
        (call, answer)
    }

    fn step(&mut self, step: usize, filler: &str) -> (Span, Span) {
        const AGENT_SPAN: u64 = 1;
        let t = self.time_of(step);
        let call_id = format!("call_{step}");
        let (call, answer) = Self::step_messages(step, filler);
        let output = Value::Array(vec![call.clone()]);
        let result = format!("result of step {step}: {filler}");
        let chat = span(
            self.trace,
            (step as u64) * 2,
            AGENT_SPAN,
            "chat bench-model",
            (t, t + 100_000),
            vec![
                kv("gen_ai.operation.name", "chat".into()),
                kv("gen_ai.agent.call.id", self.alias.into()),
                kv("gen_ai.request.model", "bench-model".into()),
                kv(
                    "gen_ai.input.messages",
                    Value::Array(self.history.clone()).to_string(),
                ),
                kv("gen_ai.output.messages", output.to_string()),
            ],
        );
        let tool = span(
            self.trace,
            (step as u64) * 2 + 1,
            AGENT_SPAN,
            "execute_tool work",
            (t + 200_000, t + 300_000),
            vec![
                kv("gen_ai.operation.name", "execute_tool".into()),
                kv("gen_ai.tool.call.id", call_id.clone()),
                kv("gen_ai.tool.name", "work".into()),
                kv("gen_ai.tool.call.result", result.clone()),
            ],
        );
        self.history.push(call);
        self.history.push(answer);
        (chat, tool)
    }
}

/// Steps 1-15 of a second run in the same store, after the long one: what an early step costs
/// once the store holds a long run, beside the long run's own early and late steps (so the
/// growth from the history's length is told apart from the growth of the store).
async fn second_run(ingest: &Ingest, filler: &str, first: &[Duration]) -> anyhow::Result<()> {
    let mut run = BenchRun::new([7; 16], "bench-run-2", filler);
    let mut times = Vec::with_capacity(15);
    for step in 1..=15 {
        let (chat, tool) = run.step(step, filler);
        let started = Instant::now();
        ingest
            .export_traces(request(vec![chat, tool]))
            .await
            .map_err(|e| anyhow!("second run, step {step}: {e}"))?;
        times.push(started.elapsed());
    }
    let mean = |d: &[Duration]| d.iter().map(|d| ms(*d)).sum::<f64>() / d.len().max(1) as f64;
    let n = first.len();
    let late = mean(&first[n.saturating_sub(10)..]);
    let second = mean(&times[5..]);
    println!(
        "ingest of a second run in the same store, steps 6-15: {second:.3} ms; the long run's \
         steps {}-{n}: {late:.3} ms: {:.1}x",
        n.saturating_sub(9).max(1),
        late / second,
    );
    Ok(())
}

/// What each step cost so far.
struct Steps<'a> {
    /// Export request to durable acknowledgement.
    times: &'a [Duration],
    /// Bytes committed to the store.
    bytes: &'a [u64],
    /// Interpretation of the step's spans alone.
    interpret: &'a [Duration],
    /// Applying the interpreted spans to a store and committing, alone.
    apply: &'a [Duration],
}

/// Column families that hold histories: message bodies, history chains, snapshot records and
/// the run keys that name them.
const HISTORY_CFS: [stepline::store::Cf; 4] =
    [cf::MESSAGES, cf::HISTORY, cf::SNAPSHOTS, cf::RUN_KEYS];

/// Prints storage, ingest and continuation figures for the run as it stands.
async fn report(
    store: &Arc<Store>,
    history: &[Value],
    steps: &Steps<'_>,
    args: &Args,
) -> anyhow::Result<()> {
    let mut distinct: IdMap<MessageHash, usize> = IdMap::default();
    for m in history {
        distinct
            .entry(MessageHash::of(m))
            .or_insert_with(|| serde_json::to_vec(m).map(|v| v.len()).unwrap_or(0));
    }
    let message_bytes: usize = distinct.values().sum();
    let ratio = |b: u64| b as f64 / message_bytes as f64;

    // Storage.
    store.flush()?;
    store.compact()?;
    let mut logical_total = 0u64;
    let mut logical_history = 0u64;
    let mut sst_history = 0u64;
    let (mut logical_facts, mut sst_facts) = (0u64, 0u64);
    let mut per_cf = Vec::new();
    for &name in cf::ALL {
        let b = store.logical_bytes(name)?;
        let sst = store.cf_live_bytes(name);
        logical_total += b;
        if HISTORY_CFS.contains(&name) {
            logical_history += b;
            sst_history += sst;
        }
        if name == cf::FACTS {
            (logical_facts, sst_facts) = (b, sst);
        }
        per_cf.push((name.name(), b, sst));
    }
    println!(
        "run: {} steps, {} messages ({} distinct), {} bytes of distinct messages",
        steps.times.len(),
        history.len(),
        distinct.len(),
        message_bytes
    );
    println!(
        "storage: logical (keys + values, before compression) and SST (after flush + compaction):"
    );
    for (name, b, sst) in &per_cf {
        println!("  {name:<16} {b:>12} bytes {sst:>12} bytes on disk");
    }
    let sst_total = store.live_bytes();
    println!(
        "  history CFs      {logical_history:>12} bytes = {:.2}x the distinct message bytes; on disk {sst_history} bytes = {:.2}x",
        ratio(logical_history),
        ratio(sst_history)
    );
    let (logical_with_facts, sst_with_facts) =
        (logical_history + logical_facts, sst_history + sst_facts);
    println!(
        "  + facts          {logical_with_facts:>12} bytes = {:.2}x the distinct message bytes; on disk {sst_with_facts} bytes = {:.2}x",
        ratio(logical_with_facts),
        ratio(sst_with_facts)
    );
    println!(
        "  all CFs          {logical_total:>12} bytes = {:.2}x the distinct message bytes; on disk {sst_total} bytes = {:.2}x",
        ratio(logical_total),
        ratio(sst_total)
    );

    // Ingest cost.
    let n = steps.times.len();
    let mean_ms = |d: &[Duration], from: usize, to: usize| -> f64 {
        let slice = &d[from.saturating_sub(1)..to.min(d.len())];
        slice.iter().map(|d| ms(*d)).sum::<f64>() / slice.len().max(1) as f64
    };
    // Medians too: a memtable flush or a compaction landing in one step of a window of ten moves
    // its mean, not its median.
    let median_ms = |d: &[Duration], from: usize, to: usize| -> f64 {
        let mut slice = d[from.saturating_sub(1)..to.min(d.len())].to_vec();
        slice.sort();
        slice.get(slice.len() / 2).map_or(0.0, |d| ms(*d))
    };
    let mean_bytes = |from: usize, to: usize| -> f64 {
        let slice = &steps.bytes[from.saturating_sub(1)..to.min(steps.bytes.len())];
        slice.iter().sum::<u64>() as f64 / slice.len().max(1) as f64
    };
    let (early_to, late_from) = (15.min(n), n.saturating_sub(9).max(1));
    let early = mean_ms(steps.times, 6, early_to);
    let late = mean_ms(steps.times, late_from, n);
    let early_i = mean_ms(steps.interpret, 6, early_to);
    let late_i = mean_ms(steps.interpret, late_from, n);
    let (early_b, late_b) = (mean_bytes(6, early_to), mean_bytes(late_from, n));
    println!(
        "ingest per step, steps 6-{early_to} vs {late_from}-{n} (means; step 10 {:.3} ms, step {n} {:.3} ms):",
        ms(steps.times[9.min(n - 1)]),
        ms(steps.times[n - 1]),
    );
    let (early_m, late_m) = (
        median_ms(steps.times, 6, early_to),
        median_ms(steps.times, late_from, n),
    );
    println!(
        "  export to durable ack  {early:>8.3} ms vs {late:>8.3} ms: {:.1}x (medians {early_m:.3} vs {late_m:.3} ms: {:.1}x)",
        late / early,
        late_m / early_m
    );
    println!(
        "  of which interpreting  {early_i:>8.3} ms vs {late_i:>8.3} ms (the span carries the whole history)"
    );
    let early_a = mean_ms(steps.apply, 6, early_to);
    let late_a = mean_ms(steps.apply, late_from, n);
    let (early_am, late_am) = (
        median_ms(steps.apply, 6, early_to),
        median_ms(steps.apply, late_from, n),
    );
    println!(
        "  store: apply + commit  {early_a:>8.3} ms vs {late_a:>8.3} ms: {:.1}x (medians {:.1}x; step 10 {:.3} ms, step {n} {:.3} ms)",
        late_a / early_a,
        late_am / early_am,
        ms(steps.apply[9.min(n - 1)]),
        ms(steps.apply[n - 1]),
    );
    println!(
        "  bytes committed        {early_b:>8.0} B  vs {late_b:>8.0} B: {:.2}x",
        late_b / early_b
    );

    continuation_report(store, args).await
}

/// The next-step reads of the bench run in one format, on a copy of the store (so the run
/// measured by the other modes is left as it is): each of `--iterations` more steps (after
/// [`NEXT_STEP_WARMUP`] untimed ones) is ingested through the ingest service (not timed), and
/// the continuation at the new revision is read right after it, as an orchestrator asks once a
/// step is done. What the read before left in memory (the history of the step before, the
/// context read at the revision before) stays, as in the service. Gives the times and the size
/// of the last answer.
async fn next_steps(
    store: &Arc<Store>,
    run_id: &str,
    asked: continuation::Request,
    args: &Args,
) -> anyhow::Result<(Vec<Duration>, usize)> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("next-step");
    if !store.checkpoint(&path)? {
        bail!("the store cannot be copied");
    }
    let copy = Arc::new(Store::open(&path, false)?);
    let ingest = Ingest::new(copy.clone(), Arc::new(Outbox::disabled()));
    let continuations = Arc::new(Continuations::new(
        copy.clone(),
        Arc::new(Media::in_memory(None)),
    ));
    let filler = "x".repeat(args.text_bytes);
    let steps = copy.model_requests(run_id)?.len();
    let mut run = BenchRun::after(TRACE, ALIAS, &filler, steps);
    // The read after the last step stored, as the one before the first step measured; then a
    // few steps not timed: the copy is a store just opened, whose first reads fill RocksDB's
    // block cache and contend with its first compactions (6-15 ms here, where a store open for
    // a while takes under 1 ms; the restart modes measure a store just opened).
    continuations.respond(run_id, asked).await?;
    let mut times = Vec::with_capacity(args.iterations);
    let mut size = 0;
    let measured = steps + NEXT_STEP_WARMUP + 1;
    for step in steps + 1..measured + args.iterations {
        let (chat, tool) = run.step(step, &filler);
        ingest
            .export_traces(request(vec![chat, tool]))
            .await
            .map_err(|e| anyhow!("step {step}: {e}"))?;
        let started = Instant::now();
        let body = continuations.respond(run_id, asked).await?;
        if step >= measured {
            times.push(started.elapsed());
        }
        size = body.len();
    }
    // The steps went on from the stored run's history: the latest snapshot holds all of it.
    let latest = copy
        .snapshots(run_id)?
        .iter()
        .filter(|s| s.meta.state == SnapshotState::Complete)
        .map(|s| s.meta.message_count as usize)
        .max();
    if latest != Some(run.history.len()) {
        bail!(
            "next-step: the copy's latest snapshot holds {latest:?} messages, the bench run {}",
            run.history.len()
        );
    }
    times.sort();
    drop((continuations, ingest));
    Ok((times, size))
}

/// Prints the continuation figures for the bench run as it stands.
async fn continuation_report(store: &Arc<Store>, args: &Args) -> anyhow::Result<()> {
    let iterations = args.iterations;
    // Continuation latency.
    let run_id = store
        .resolve_run(ALIAS)?
        .ok_or_else(|| anyhow!("the bench run was not stored"))?;
    println!(
        "continuation of the latest snapshot ({} iterations each; the whole answer: load + render + \
         JSON, as the API gives it). cold: every cache emptied before each read (RocksDB's block \
         cache stays warm); next-step: one more step ingested before each read, on a copy of the store (the run grows by one step a read), with what the read before left in memory; prefetched: emptied, then the run loaded ahead as the service does \
         once a run is quiet (history, effects, provenance, and the answers to the requests seen \
         most recently, this format's among them), and the first read after it timed; render: \
         history and context cached, the answer rendered again each time; warm: the kept answer:",
        iterations
    );
    let continuations = Arc::new(Continuations::new(
        store.clone(),
        Arc::new(Media::in_memory(None)),
    ));
    for &format in &args.formats {
        let name = format.as_str();
        let request = continuation::Request::latest(format);
        for mode in args
            .modes
            .iter()
            .map(String::as_str)
            .filter(|m| !RESTART_MODES.contains(m))
        {
            let mut times = Vec::with_capacity(iterations);
            let mut size = 0;
            if mode == "next-step" {
                (times, size) = next_steps(store, &run_id, request, args).await?;
            }
            for _ in 0..iterations {
                if mode == "next-step" {
                    break;
                }
                if mode != "warm" {
                    continuations.rendered().clear();
                }
                if mode == "cold" || mode == "prefetched" {
                    store.clear_history_cache();
                    continuations.contexts().clear();
                }
                if mode == "prefetched" {
                    // What the service does once the run has been quiet (not timed).
                    prefetch::load_ahead(&continuations, &run_id, 0).await?;
                }
                let started = Instant::now();
                let body = continuations.respond(&run_id, request).await?;
                times.push(started.elapsed());
                size = body.len();
            }
            times.sort();
            println!(
                "  {name:<17} {mode:<10} p50 {:>7.3} ms  p99 {:>7.3} ms  max {:>7.3} ms  ({size} bytes)",
                ms(percentile(&times, 0.50)),
                ms(percentile(&times, 0.99)),
                ms(percentile(&times, 1.0)),
            );
        }
    }
    Ok(())
}
