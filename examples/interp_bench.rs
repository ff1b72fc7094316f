//! Span decode and interpretation benchmark, without a server or a store: the part of ingest
//! that turns an OTLP export request into interpreted facts (protobuf decode, then
//! `interpret_span_with` over every span with one prefix memo, as the ingest does).
//!
//! Two modes:
//! - `capture ADDR FILE`: an OTLP/gRPC trace receiver on the loopback `ADDR` that appends each
//!   request it receives (protobuf, length-prefixed) to `FILE`; point `loadgen --grpc ADDR` at
//!   it to record a realistic workload of any convention.
//! - `run FILE [ROUNDS]`: decodes and interprets the recorded requests `ROUNDS` times (default
//!   1) and prints spans, facts and the time per span of each phase.
//!
//! Under `valgrind --tool=callgrind` the inclusive instruction counts of `decode_phase` and
//! `interpret_phase` (and the calls to the allocator under each) give per-span costs that do
//! not depend on the machine's load (`--collect-atstart=no --toggle-collect='*interpret_phase*'`).
//!
//! Built with `--features count-allocations`, `run` also reports the heap bytes a request holds
//! once decoded, and once interpreted too (the request and its facts alive together, as in the
//! ingest until they reach the writer), per byte of its protobuf encoding: over all requests and
//! the largest of one. The ingest's in-flight budget charges a request its encoded bytes times a
//! factor taken from these figures.
//!
//! ```text
//! cargo build --release --example interp_bench --example loadgen
//! target/release/examples/interp_bench capture 127.0.0.1:39999 /tmp/agent.bin &
//! target/release/examples/loadgen --transport grpc --grpc 127.0.0.1:39999 --runs 200 --seed 7
//! target/release/examples/interp_bench run /tmp/agent.bin 3
//! ```

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use prost::Message;
use stepline::interpreter::{interpret_span_with, Interpreted, PrefixMemo};
use stepline::limits::Limits;

/// Heap bytes held per encoded byte, over the requests seen.
#[derive(Default)]
struct Held {
    encoded: usize,
    decoded: usize,
    interpreted: usize,
    max_decoded: f64,
    max_interpreted: f64,
}

impl Held {
    fn note(&mut self, encoded: usize, decoded: usize, interpreted: usize) {
        self.encoded += encoded;
        self.decoded += decoded;
        self.interpreted += interpreted;
        let per = |held: usize| held as f64 / encoded.max(1) as f64;
        self.max_decoded = self.max_decoded.max(per(decoded));
        self.max_interpreted = self.max_interpreted.max(per(interpreted));
    }

    /// The figures as a JSON object, or `null` without the allocation count.
    fn json(&self) -> String {
        if stepline::heap::live_bytes().is_none() {
            return "null".to_string();
        }
        let per = |held: usize| held as f64 / self.encoded.max(1) as f64;
        format!(
            "{{\"decoded\":{:.2},\"decoded_max\":{:.2},\"interpreted\":{:.2},\"interpreted_max\":{:.2}}}",
            per(self.decoded),
            self.max_decoded,
            per(self.interpreted),
            self.max_interpreted
        )
    }
}

/// The capturing receiver: every request, encoded again, appended to one file.
struct Capture {
    out: Mutex<std::fs::File>,
}

#[tonic::async_trait]
impl TraceService for Capture {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let bytes = request.into_inner().encode_to_vec();
        let len = u32::try_from(bytes.len())
            .map_err(|_| tonic::Status::resource_exhausted("request over 4 GiB"))?;
        let mut out = self
            .out
            .lock()
            .map_err(|_| tonic::Status::internal("capture file lock poisoned"))?;
        out.write_all(&len.to_le_bytes())
            .and_then(|_| out.write_all(&bytes))
            .map_err(|e| tonic::Status::internal(e.to_string()))?;
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

async fn capture(addr: SocketAddr, file: PathBuf) -> Result<()> {
    if !addr.ip().is_loopback() {
        bail!("capture listens on loopback addresses only");
    }
    let out = std::fs::File::create(&file).with_context(|| format!("creating {file:?}"))?;
    let service = TraceServiceServer::new(Capture {
        out: Mutex::new(out),
    })
    .max_decoding_message_size(64 << 20);
    tonic::transport::Server::builder()
        .add_service(service)
        .serve(addr)
        .await?;
    Ok(())
}

/// The recorded requests of `file`.
fn load(file: &PathBuf) -> Result<Vec<Vec<u8>>> {
    let data = std::fs::read(file).with_context(|| format!("reading {file:?}"))?;
    let mut requests = Vec::new();
    let mut at = 0;
    while at < data.len() {
        let Some(len) = data.get(at..at + 4) else {
            bail!("truncated length at byte {at}");
        };
        let len = u32::from_le_bytes([len[0], len[1], len[2], len[3]]) as usize;
        let Some(body) = data.get(at + 4..at + 4 + len) else {
            bail!("truncated request at byte {at}");
        };
        requests.push(body.to_vec());
        at += 4 + len;
    }
    Ok(requests)
}

/// Decodes one request, as the receiver does for protobuf bodies.
#[inline(never)]
fn decode_phase(body: &[u8]) -> Result<ExportTraceServiceRequest> {
    Ok(ExportTraceServiceRequest::decode(body)?)
}

/// Interprets every span of a request with `memo`, as the ingest does.
#[inline(never)]
fn interpret_phase(
    request: &ExportTraceServiceRequest,
    memo: &PrefixMemo,
    limits: &Limits,
) -> Vec<Interpreted> {
    request
        .resource_spans
        .iter()
        .flat_map(|r| &r.scope_spans)
        .flat_map(|s| &s.spans)
        .filter(|s| s.trace_id.len() == 16 && s.span_id.len() == 8)
        .filter_map(|s| interpret_span_with(s, memo, limits).ok())
        .collect()
}

/// Drops what a request gave (apart, so its cost shows as its own frame).
#[inline(never)]
fn drop_phase(request: ExportTraceServiceRequest, facts: Vec<Interpreted>) {
    drop(facts);
    drop(request);
}

fn run(file: PathBuf, rounds: usize) -> Result<()> {
    let requests = load(&file)?;
    let limits = Limits::default();
    let (mut spans, mut facts, mut messages) = (0usize, 0usize, 0usize);
    let (mut decode, mut interpret) = (Duration::ZERO, Duration::ZERO);
    let mut held = Held::default();
    let live = || stepline::heap::live_bytes().unwrap_or(0);
    for _ in 0..rounds {
        // A fresh memo per round: every round sees the runs as new, as a server would.
        let memo = PrefixMemo::default();
        for body in &requests {
            let before = live();
            let t = Instant::now();
            let request = decode_phase(body)?;
            decode += t.elapsed();
            let decoded = live().saturating_sub(before);
            spans += request
                .resource_spans
                .iter()
                .flat_map(|r| &r.scope_spans)
                .map(|s| s.spans.len())
                .sum::<usize>();
            let t = Instant::now();
            let out = interpret_phase(&request, &memo, &limits);
            interpret += t.elapsed();
            held.note(body.len(), decoded, live().saturating_sub(before));
            facts += out.len();
            messages += out.iter().map(|i| i.bodies().count()).sum::<usize>();
            drop_phase(request, out);
        }
    }
    let per = |d: Duration| d.as_secs_f64() * 1e6 / spans.max(1) as f64;
    println!(
        "{{\"requests\":{},\"rounds\":{rounds},\"spans\":{spans},\"facts\":{facts},\"message_bodies\":{messages},\"decode_us_per_span\":{:.3},\"interpret_us_per_span\":{:.3},\"held_per_encoded_byte\":{}}}",
        requests.len(),
        per(decode),
        per(interpret),
        held.json()
    );
    Ok(())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["capture", addr, file] => capture(addr.parse()?, file.into()).await,
        ["run", file] => run(file.into(), 1),
        ["run", file, rounds] => run(file.into(), rounds.parse()?),
        _ => bail!("usage: interp_bench capture ADDR FILE | run FILE [ROUNDS]"),
    }
}
