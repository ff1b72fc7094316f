//! `api`: the query API router (`api::router`, through `tower::ServiceExt::oneshot`) with
//! arbitrary methods, paths, queries and `Authorization` headers, over a temp store holding
//! the seed runs (Pydantic AI, OpenInference, OpenLLMetry, Strands, legacy events).
//!
//! Input: byte 0 `R` → the rest is the raw request target (path and query); otherwise the
//! bytes build one from path segments (API words, the stored run ids and aliases, text,
//! percent escapes) and query parameters (known names and values, text).
//!
//! Invariants: no panic; no server error (5xx) for any request; every answer is JSON (or the
//! metrics text).

use std::sync::Arc;

use axum::body::Body;
use axum::Router;
use tower::ServiceExt;

use crate::api::{router, ApiState};
use crate::continuation::Continuations;
use crate::exporter::Outbox;
use crate::fuzzing::engine::{note, Target};
use crate::fuzzing::Source;
use crate::ingest::Ingest;
use crate::media::Media;
use crate::store::{RunFilter, Store};

use super::ingest::{apply, block_on};
use super::{seeds, trace_input};

/// The target.
pub const TARGET: Target = Target {
    name: "api",
    about: "api::router with arbitrary paths, queries and headers over a temp store",
    run,
    max_len: 4096,
    scale: crate::fuzzing::engine::repeat_bytes,
    probes: crate::fuzzing::engine::no_probes,
    seeds: api_seeds,
};

/// A router over a store with the seed runs, and the words its requests are built from.
struct Fixture {
    router: Router,
    ids: Vec<String>,
    _dir: crate::fuzzing::ScratchDir,
}

thread_local! {
    static FIXTURE: Option<Fixture> = fixture();
}

fn fixture() -> Option<Fixture> {
    let dir = crate::fuzzing::ScratchDir::new().ok()?;
    let store = Arc::new(Store::open(dir.path(), false).ok()?);
    for spans in seeds::span_sets() {
        apply(&store, &trace_input(spans), 0, 0);
    }
    let (_, logs) = seeds::legacy_events();
    apply(&store, &super::logs_input(logs), 0, 0);
    let (runs, _) = store.list_runs(&RunFilter::default(), None, 100).ok()?;
    let mut ids: Vec<String> = runs.iter().map(|r| r.run_id.clone()).collect();
    ids.extend(runs.iter().flat_map(|r| r.aliases.clone()));
    let router = block_on(async {
        let ingest = Arc::new(Ingest::new(store.clone(), Arc::new(Outbox::disabled())));
        router(ApiState {
            ingest,
            access: Arc::new(crate::api::ApiAccess::open().with_token("tok")),
            continuations: Arc::new(Continuations::new(
                store.clone(),
                Arc::new(Media::in_memory(Some(64))),
            )),
            store,
        })
    });
    Some(Fixture {
        router,
        ids,
        _dir: dir,
    })
}

const SEGMENTS: &[&str] = &[
    "v1",
    "runs",
    "events",
    "effects",
    "snapshots",
    "continuation",
    "recovery",
    "abandon",
    "healthz",
    "metrics",
    "",
    "..",
    ".",
    "%2F",
    "%00",
    "%ff",
    "%",
    "{run_id}",
];
const PARAMS: &[&str] = &[
    "format",
    "at",
    "include_interrupted",
    "repair",
    "media",
    "limit",
    "cursor",
    "conversation_id",
    "parent_run_id",
    "agent_name",
    "status",
    "trace_id",
    "unresolved",
    "x",
];
const VALUES: &[&str] = &[
    "otel",
    "pydantic-ai",
    "openai-chat",
    "openai-responses",
    "anthropic",
    "gemini",
    "strands",
    "vercel-ai",
    "inline",
    "reference",
    "true",
    "false",
    "1",
    "0",
    "",
    "-1",
    "4294967296",
    "99999999999999999999",
    "running",
    "completed",
    "abandoned",
    "conv-f",
    "%zz",
    "%ff%fe",
    "a+b",
    "AAAA",
    "%00",
];

fn target_of(src: &mut Source, ids: &[String]) -> String {
    let mut path = String::new();
    let segments = 1 + src.below(6);
    for _ in 0..segments {
        path.push('/');
        match src.below(8) {
            0..=4 => path.push_str(src.pick(SEGMENTS)),
            5 | 6 if !ids.is_empty() => path.push_str(&ids[src.below(ids.len())]),
            _ => path.push_str(&escape(&src.text())),
        }
    }
    if src.flag() {
        let params = src.count(16);
        for i in 0..params {
            path.push(if i == 0 { '?' } else { '&' });
            path.push_str(&match src.below(5) {
                0 => escape(&src.text()),
                _ => src.pick(PARAMS).to_string(),
            });
            if src.below(8) != 0 {
                path.push('=');
                path.push_str(&match src.below(4) {
                    0 => escape(&src.text()),
                    1 if !ids.is_empty() => ids[src.below(ids.len())].clone(),
                    _ => src.pick(VALUES).to_string(),
                });
            }
        }
    }
    path
}

/// Percent-encodes what a request target cannot hold.
fn escape(text: &str) -> String {
    let mut out = String::new();
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn run(data: &[u8]) {
    FIXTURE.with(|f| {
        let Some(f) = f else {
            panic!("the fuzz harness could not build the API fixture");
        };
        let (method, uri, auth) = match data.split_first() {
            Some((b'R', rest)) => (
                "GET",
                String::from_utf8_lossy(rest).into_owned(),
                Some("Bearer tok".to_string()),
            ),
            _ => {
                let mut src = Source::new(data);
                let method = src.pick(&["GET", "GET", "GET", "POST", "HEAD", "PUT", "OPTIONS"]);
                let auth = match src.below(6) {
                    0 => None,
                    1 => Some("bearer tok".to_string()),
                    2 => Some(format!("Bearer {}", src.text())),
                    _ => Some("Bearer tok".to_string()),
                };
                (method, target_of(&mut src, &f.ids), auth)
            }
        };
        let mut builder = http::Request::builder().method(method).uri(uri.as_str());
        if let Some(a) = &auth {
            if let Ok(v) = http::HeaderValue::from_str(a) {
                builder = builder.header(http::header::AUTHORIZATION, v);
            }
        }
        let Ok(request) = builder.body(Body::empty()) else {
            note("not a request");
            return;
        };
        let (status, body) = block_on(async {
            let response = match f.router.clone().oneshot(request).await {
                Ok(r) => r,
                Err(e) => match e {},
            };
            let status = response.status();
            let body = axum::body::to_bytes(response.into_body(), 64 << 20).await;
            (status, body)
        });
        note(("status", status.as_u16(), method));
        let body = match body {
            Ok(b) => b,
            Err(e) => panic!("{method} {uri}: the answer body cannot be read: {e}"),
        };
        assert!(
            !status.is_server_error(),
            "{method} {uri}: server error {status}: {}",
            String::from_utf8_lossy(&body[..body.len().min(300)])
        );
        if !uri.starts_with("/metrics") && method != "HEAD" && !body.is_empty() {
            if let Err(e) = serde_json::from_slice::<serde_json::Value>(&body) {
                panic!("{method} {uri}: the answer is not JSON: {e}");
            }
        }
    });
}

fn api_seeds() -> Vec<Vec<u8>> {
    let run = format!("{}-{}", hex::encode([7u8; 16]), hex::encode([1u8; 8]));
    let mut out: Vec<Vec<u8>> = [
        "/v1/runs".to_string(),
        "/v1/runs?conversation_id=conv-f&limit=2".into(),
        format!("/v1/runs/{run}"),
        format!("/v1/runs/{run}/events"),
        format!("/v1/runs/{run}/effects?unresolved=true"),
        format!("/v1/runs/{run}/snapshots"),
        format!(
            "/v1/runs/{run}/continuation?format=pydantic-ai&include_interrupted=true&repair=true"
        ),
        format!("/v1/runs/{run}/continuation?format=anthropic&at=1&media=reference"),
        format!("/v1/runs/{run}/recovery"),
        "/v1/runs/outer-call/continuation?format=gemini".into(),
        "/healthz".into(),
        "/metrics".into(),
    ]
    .into_iter()
    .map(|t| [b"R".to_vec(), t.into_bytes()].concat())
    .collect();
    out.push(vec![0, 3, 2, 0, 1, 0, 7, 1, 3, 0, 0, 0, 0]);
    out.push(vec![3, 3, 2, 0, 1, 0, 7, 1, 3, 0, 0, 0, 0]);
    out
}
