//! Routes and handlers of the query API.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};

use super::auth::{self, ApiAccess};
use super::error::ApiError;
use super::extract::{Params, RunId};
use crate::continuation::{Continuations, Format, MediaMode, Request as ContinuationRequest};
use crate::domain::{EffectStatus, Run, SnapshotMeta, SnapshotState};
use crate::ingest::{AbandonOutcome, Ingest};
use crate::store::{RunFilter, Store};

/// What the handlers share.
#[derive(Clone)]
pub struct ApiState {
    /// The store, for reads.
    pub store: Arc<Store>,
    /// The ingest service, for writes (abandon).
    pub ingest: Arc<Ingest>,
    /// Who may call what: tokens on `/v1/*` and `/metrics`, the `Host` allow-list.
    pub access: Arc<ApiAccess>,
    /// Continuations, with the caches and the media store they are answered from.
    pub continuations: Arc<Continuations>,
}

/// Page size of `GET /v1/runs` when `limit` is not given, and its maximum.
const DEFAULT_LIMIT: usize = 100;
const MAX_LIMIT: usize = 1000;

/// Builds the API router.
pub fn router(state: ApiState) -> Router {
    let v1 = Router::new()
        .route("/v1/runs", get(list_runs))
        .route("/v1/runs/{run_id}", get(get_run))
        .route("/v1/runs/{run_id}/events", get(get_events))
        .route("/v1/runs/{run_id}/effects", get(get_effects))
        .route("/v1/runs/{run_id}/snapshots", get(get_snapshots))
        .route("/v1/runs/{run_id}/continuation", get(get_continuation))
        .route("/v1/runs/{run_id}/recovery", get(get_recovery))
        .route("/v1/runs/{run_id}/abandon", post(abandon))
        .route_layer(middleware::from_fn_with_state(
            state.access.clone(),
            auth::require_token,
        ));
    let metrics_route =
        Router::new()
            .route("/metrics", get(metrics))
            .route_layer(middleware::from_fn_with_state(
                state.access.clone(),
                auth::require_metrics_token,
            ));
    let access = state.access.clone();
    Router::new()
        .route("/healthz", get(healthz))
        .merge(metrics_route)
        .merge(v1)
        .merge(crate::ui::router())
        .fallback(|| async { ApiError::NotFound("no such endpoint".into()) })
        .layer(middleware::from_fn_with_state(access, auth::check_host))
        .with_state(state)
}

/// `/healthz`: 200 `{"status":"ok"}` while ingest can commit, 503
/// `{"status":"unavailable","error":...}` once its writer thread has stopped.
async fn healthz(State(state): State<ApiState>) -> Response {
    if state.ingest.healthy() {
        return Json(json!({"status": "ok"})).into_response();
    }
    (
        http::StatusCode::SERVICE_UNAVAILABLE,
        Json(json!({
            "status": "unavailable",
            "error": "the ingest writer thread has stopped: no request can be committed",
        })),
    )
        .into_response()
}

async fn metrics(State(state): State<ApiState>) -> impl IntoResponse {
    let gauges = blocking(&state, |store| Ok(super::metrics::StoreGauges::read(store)))
        .await
        .ok()
        .flatten();
    let scrape = super::metrics::Scrape::new(
        state.ingest.clone(),
        state.continuations.clone(),
        gauges,
    );
    (
        [(http::header::CONTENT_TYPE, super::metrics::CONTENT_TYPE)],
        scrape.render(),
    )
}

/// Runs blocking store work on the blocking pool.
async fn blocking<T: Send + 'static>(
    state: &ApiState,
    work: impl FnOnce(&Store) -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    let store = state.store.clone();
    tokio::task::spawn_blocking(move || work(&store))
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))?
}

/// Rejects query parameters the endpoint does not know.
fn check_params(params: &HashMap<String, String>, allowed: &[&str]) -> Result<(), ApiError> {
    let mut unknown: Vec<&String> = params
        .keys()
        .filter(|k| !allowed.contains(&k.as_str()))
        .collect();
    unknown.sort();
    match unknown.first() {
        None => Ok(()),
        Some(k) => Err(ApiError::BadRequest(format!(
            "unknown query parameter {k:?}; this endpoint takes {}",
            if allowed.is_empty() {
                "none".to_string()
            } else {
                allowed.join(", ")
            }
        ))),
    }
}

fn parse_bool(params: &HashMap<String, String>, key: &str) -> Result<bool, ApiError> {
    match params.get(key).map(String::as_str) {
        None | Some("false") | Some("0") => Ok(false),
        Some("true") | Some("1") | Some("") => Ok(true),
        Some(other) => Err(ApiError::BadRequest(format!(
            "{key} must be true or false, not {other:?}"
        ))),
    }
}

/// Resolves a run id or alias to its record.
fn find_run(store: &Store, id: &str) -> Result<Run, ApiError> {
    let run_id = store
        .resolve_run(id)?
        .ok_or_else(|| ApiError::NotFound(format!("run {id:?} not found")))?;
    store
        .run(&run_id)?
        .ok_or_else(|| ApiError::NotFound(format!("run {id:?} not found")))
}

async fn list_runs(
    State(state): State<ApiState>,
    Params(params): Params,
) -> Result<Json<Value>, ApiError> {
    check_params(
        &params,
        &[
            "conversation_id",
            "parent_run_id",
            "agent_name",
            "status",
            "trace_id",
            "limit",
            "cursor",
        ],
    )?;
    if let Some(s) = params.get("status") {
        if crate::domain::RunStatus::parse(s).is_none() {
            return Err(ApiError::BadRequest(format!(
                "status must be one of running, completed, failed, abandoned, not {s:?}"
            )));
        }
    }
    let limit = match params.get("limit") {
        None => DEFAULT_LIMIT,
        Some(l) => l
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=MAX_LIMIT).contains(n))
            .ok_or_else(|| {
                ApiError::BadRequest(format!(
                    "limit must be a number from 1 to {MAX_LIMIT}, not {l:?}"
                ))
            })?,
    };
    let cursor = match params.get("cursor") {
        None => None,
        Some(c) => Some(hex::decode(c).map_err(|_| {
            ApiError::BadRequest(format!("cursor {c:?} is not one this API returned"))
        })?),
    };
    let filter = RunFilter {
        conversation_id: params.get("conversation_id").cloned(),
        parent_run_id: params.get("parent_run_id").cloned(),
        agent_name: params.get("agent_name").cloned(),
        status: params.get("status").cloned(),
        trace_id: params.get("trace_id").cloned(),
    };
    let (runs, next) = blocking(&state, move |s| {
        Ok(s.list_runs(&filter, cursor.as_deref(), limit)?)
    })
    .await?;
    Ok(Json(
        json!({"runs": runs, "next_cursor": next.map(hex::encode)}),
    ))
}

async fn get_run(
    State(state): State<ApiState>,
    RunId(run_id): RunId,
    Params(params): Params,
) -> Result<Json<Run>, ApiError> {
    check_params(&params, &[])?;
    Ok(Json(blocking(&state, move |s| find_run(s, &run_id)).await?))
}

async fn get_events(
    State(state): State<ApiState>,
    RunId(run_id): RunId,
    Params(params): Params,
) -> Result<Json<Value>, ApiError> {
    check_params(&params, &[])?;
    let events = blocking(&state, move |s| {
        let run = find_run(s, &run_id)?;
        Ok(s.events(&run.run_id)?)
    })
    .await?;
    Ok(Json(json!({"events": events})))
}

async fn get_effects(
    State(state): State<ApiState>,
    RunId(run_id): RunId,
    Params(params): Params,
) -> Result<Json<Value>, ApiError> {
    check_params(&params, &["unresolved"])?;
    let unresolved = parse_bool(&params, "unresolved")?;
    let effects = blocking(&state, move |s| {
        let run = find_run(s, &run_id)?;
        let mut effects = s.effects(&run.run_id)?;
        if unresolved {
            effects.retain(|e| e.status.is_unresolved());
        }
        Ok(effects)
    })
    .await?;
    Ok(Json(json!({"effects": effects})))
}

async fn get_snapshots(
    State(state): State<ApiState>,
    RunId(run_id): RunId,
    Params(params): Params,
) -> Result<Json<Value>, ApiError> {
    check_params(&params, &[])?;
    let snapshots: Vec<SnapshotMeta> = blocking(&state, move |s| {
        let run = find_run(s, &run_id)?;
        Ok(s.snapshots(&run.run_id)?
            .into_iter()
            .map(|r| r.meta)
            .collect())
    })
    .await?;
    Ok(Json(json!({"snapshots": snapshots})))
}

/// What an orchestrator needs to decide how to recover a run, in one answer: the latest complete
/// and latest overall snapshots, the effects whose outcome is unknown, and the tools that
/// completed or failed.
async fn get_recovery(
    State(state): State<ApiState>,
    RunId(run_id): RunId,
    Params(params): Params,
) -> Result<Json<Value>, ApiError> {
    check_params(&params, &[])?;
    blocking(&state, move |s| {
        let run = find_run(s, &run_id)?;
        let snapshots: Vec<SnapshotMeta> = s
            .snapshots(&run.run_id)?
            .into_iter()
            .map(|r| r.meta)
            .collect();
        let latest_complete = snapshots
            .iter()
            .rev()
            .find(|m| m.state == SnapshotState::Complete);
        let effects = s.effects(&run.run_id)?;
        let with = |keep: fn(EffectStatus) -> bool| -> Vec<_> {
            effects.iter().filter(|e| keep(e.status)).collect()
        };
        Ok(Json(json!({
            "run_id": run.run_id,
            "status": run.status,
            "latest_complete_snapshot": latest_complete,
            "latest_snapshot": snapshots.last(),
            "unresolved_effects": with(EffectStatus::is_unresolved),
            "completed_tools": with(|s| s == EffectStatus::Completed),
            "failed_tools": with(|s| s == EffectStatus::Failed),
        })))
    })
    .await
}

/// Reads `media`: how the continuation gives media parts whose data is in the media store.
fn parse_media(params: &HashMap<String, String>) -> Result<MediaMode, ApiError> {
    match params.get("media").map(String::as_str) {
        None | Some("inline") => Ok(MediaMode::Inline),
        Some("reference") => Ok(MediaMode::Reference),
        Some(other) => Err(ApiError::BadRequest(format!(
            "media must be inline or reference, not {other:?}"
        ))),
    }
}

async fn get_continuation(
    State(state): State<ApiState>,
    RunId(run_id): RunId,
    Params(params): Params,
) -> Result<Response, ApiError> {
    check_params(
        &params,
        &["format", "include_interrupted", "at", "repair", "media"],
    )?;
    let format_name = params.get("format").map(String::as_str).unwrap_or("otel");
    let format = Format::parse(format_name).ok_or_else(|| {
        ApiError::BadRequest(format!(
            "unknown format {format_name:?}; supported formats: {}",
            Format::NAMES.join(", ")
        ))
    })?;
    let request = ContinuationRequest {
        format,
        at: match params.get("at") {
            None => None,
            Some(a) => Some(a.parse::<u32>().map_err(|_| {
                ApiError::BadRequest(format!(
                    "at must be a snapshot seq (a whole number), not {a:?}"
                ))
            })?),
        },
        include_interrupted: parse_bool(&params, "include_interrupted")?,
        repair: parse_bool(&params, "repair")?,
        media: parse_media(&params)?,
    };
    let body = state.continuations.respond(&run_id, request).await?;
    Ok(([(header::CONTENT_TYPE, "application/json")], body).into_response())
}

async fn abandon(
    State(state): State<ApiState>,
    RunId(run_id): RunId,
    Params(params): Params,
) -> Result<Json<Run>, ApiError> {
    check_params(&params, &[])?;
    match state
        .ingest
        .abandon(&run_id, "abandoned by request")
        .await?
    {
        AbandonOutcome::Abandoned(id) => {
            Ok(Json(blocking(&state, move |s| find_run(s, &id)).await?))
        }
        AbandonOutcome::AlreadyOver(id, status) => Err(ApiError::Conflict(format!(
            "run {id} is already {status}; only a running run can be abandoned"
        ))),
        AbandonOutcome::UnknownRun => Err(ApiError::NotFound(format!("run {run_id:?} not found"))),
    }
}

#[cfg(test)]
mod tests_support {
    pub use super::*;
    use crate::media::Media;
    pub use crate::test_fixtures::{delegate_scenario, request, run_id};
    use axum::body::Body;
    use tower::ServiceExt;

    pub async fn app(token: Option<&str>) -> (Router, tempfile::TempDir) {
        let access = match token {
            Some(token) => ApiAccess::open().with_token(token),
            None => ApiAccess::open(),
        };
        app_with(access).await
    }

    pub async fn app_with(access: ApiAccess) -> (Router, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(dir.path(), false).unwrap());
        let ingest = Arc::new(Ingest::new(
            store.clone(),
            Arc::new(crate::exporter::Outbox::disabled()),
        ));
        ingest
            .export_traces(request(delegate_scenario()))
            .await
            .unwrap();
        let state = ApiState {
            ingest,
            access: Arc::new(access),
            continuations: Arc::new(Continuations::new(
                store.clone(),
                Arc::new(Media::in_memory(Some(64 * 1024))),
            )),
            store,
        };
        (router(state), dir)
    }

    pub async fn call(
        app: &Router,
        method: &str,
        uri: &str,
        token: Option<&str>,
    ) -> (http::StatusCode, Value) {
        let mut req = http::Request::builder().method(method).uri(uri);
        if let Some(t) = token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        let response = app
            .clone()
            .oneshot(req.body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::tests_support::*;

    #[tokio::test]
    async fn bad_path_and_query_answer_in_the_api_error_format() {
        let (app, _dir) = app(None).await;
        // Percent-escapes that are not UTF-8 in the run id, and a query string that does not parse.
        for uri in [
            "/v1/runs/outer%cachatll/continuation",
            "/v1/runs/r1/events?a%ff=1",
        ] {
            let (status, body) = call(&app, "GET", uri, None).await;
            assert_eq!(status, 400, "{uri}");
            let message = body["error"].as_str().unwrap_or_default();
            assert!(!message.is_empty(), "{uri}: {body}");
        }
    }

    #[tokio::test]
    async fn runs_filter_and_resolve_aliases() {
        let (app, _dir) = app(None).await;
        let (status, body) = call(&app, "GET", "/v1/runs?conversation_id=conv-f", None).await;
        assert_eq!(status, 200);
        assert_eq!(body["runs"].as_array().unwrap().len(), 1);
        assert_eq!(body["runs"][0]["run_id"], run_id(1));
        let (_, body) = call(
            &app,
            "GET",
            &format!("/v1/runs?parent_run_id={}&agent_name=delegate", run_id(1)),
            None,
        )
        .await;
        assert_eq!(body["runs"][0]["run_id"], run_id(4));
        let (_, body) = call(
            &app,
            "GET",
            "/v1/runs?agent_name=delegate&status=running",
            None,
        )
        .await;
        assert!(
            body["runs"].as_array().unwrap().is_empty(),
            "filters are AND-combined"
        );
        let (status, body) = call(&app, "GET", "/v1/runs/outer-call", None).await;
        assert_eq!(status, 200);
        assert_eq!(body["run_id"], run_id(1));
        // Pages of one, in start order.
        let (_, page1) = call(&app, "GET", "/v1/runs?limit=1", None).await;
        let cursor = page1["next_cursor"].as_str().unwrap().to_string();
        let (_, page2) = call(
            &app,
            "GET",
            &format!("/v1/runs?limit=1&cursor={cursor}"),
            None,
        )
        .await;
        assert_eq!(page1["runs"][0]["run_id"], run_id(1));
        assert_eq!(page2["runs"][0]["run_id"], run_id(4));
        assert!(page2["next_cursor"].is_null());
    }

    #[tokio::test]
    async fn bad_requests_get_clear_errors() {
        let (app, _dir) = app(None).await;
        let cases = [
            ("GET", "/v1/runs/nope", 404, "not found"),
            (
                "GET",
                "/v1/runs?status=sleeping",
                400,
                "status must be one of",
            ),
            ("GET", "/v1/runs?limit=0", 400, "limit must be"),
            ("GET", "/v1/runs?colour=red", 400, "unknown query parameter"),
            (
                "GET",
                "/v1/runs/outer-call/continuation?format=nope",
                400,
                "unknown format",
            ),
            (
                "GET",
                "/v1/runs/outer-call/continuation?at=x",
                400,
                "at must be",
            ),
            (
                "GET",
                "/v1/runs/outer-call/continuation?media=base64",
                400,
                "media must be inline or reference, not \"base64\"",
            ),
            (
                "GET",
                "/v1/runs/outer-call/continuation?at=99",
                404,
                "no snapshot 99",
            ),
            (
                "GET",
                "/v1/runs/outer-call/effects?unresolved=maybe",
                400,
                "true or false",
            ),
            (
                "POST",
                "/v1/runs/outer-call/abandon",
                409,
                "already completed",
            ),
            ("POST", "/v1/runs/nope/abandon", 404, "not found"),
            ("GET", "/v2/things", 404, "no such endpoint"),
        ];
        for (method, uri, want, text) in cases {
            let (status, body) = call(&app, method, uri, None).await;
            assert_eq!(status.as_u16(), want, "{method} {uri}: {body}");
            let error = body["error"].as_str().unwrap_or_default();
            assert!(
                error.contains(text),
                "{method} {uri}: {error:?} should mention {text:?}"
            );
        }
    }

    #[tokio::test]
    async fn bearer_token_guards_v1_but_not_health() {
        let (app, _dir) = app(Some("s3cret")).await;
        let (status, body) = call(&app, "GET", "/v1/runs", None).await;
        assert_eq!(status, 401);
        assert!(body["error"].as_str().unwrap().contains("bearer token"));
        assert_eq!(call(&app, "GET", "/v1/runs", Some("wrong")).await.0, 401);
        assert_eq!(call(&app, "GET", "/v1/runs", Some("s3cret")).await.0, 200);
        assert_eq!(call(&app, "GET", "/healthz", None).await.0, 200);
    }

    /// Sends `uri` with the given headers; status, `WWW-Authenticate` and JSON body.
    async fn send(
        app: &Router,
        uri: &str,
        headers: &[(&str, &str)],
    ) -> (http::StatusCode, Option<String>, Value) {
        use tower::ServiceExt;
        let mut request = http::Request::builder().uri(uri);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = app
            .clone()
            .oneshot(request.body(axum::body::Body::empty()).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let challenge = response
            .headers()
            .get(http::header::WWW_AUTHENTICATE)
            .map(|v| v.to_str().unwrap().to_owned());
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        (
            status,
            challenge,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }

    #[tokio::test]
    async fn token_scheme_is_case_insensitive_and_metrics_has_its_own_token() {
        let access = ApiAccess::open()
            .with_token("s3cret")
            .with_metrics_token("m3trics");
        let (app, _dir) = app_with(access).await;
        for value in [
            "Bearer s3cret",
            "bearer s3cret",
            "BEARER s3cret",
            "Bearer   s3cret",
        ] {
            let (status, _, body) = send(&app, "/v1/runs", &[("authorization", value)]).await;
            assert_eq!(status, 200, "{value:?}: {body}");
        }
        for value in ["Bearer s3cre", "Bearer s3cret2", "Basic s3cret", "s3cret"] {
            let (status, challenge, body) =
                send(&app, "/v1/runs", &[("authorization", value)]).await;
            assert_eq!(status, 401, "{value:?}");
            assert_eq!(challenge.as_deref(), Some("Bearer"));
            assert!(
                body["error"].as_str().unwrap().contains("bearer token"),
                "{body}"
            );
        }
        let (status, _, body) = send(&app, "/metrics", &[]).await;
        assert_eq!(status, 401, "{body}");
        assert!(body["error"]
            .as_str()
            .unwrap()
            .contains("missing Authorization header"));
        let api_token = [("authorization", "Bearer s3cret")];
        assert_eq!(send(&app, "/metrics", &api_token).await.0, 401);
        let metrics_token = [("authorization", "bearer m3trics")];
        assert_eq!(send(&app, "/metrics", &metrics_token).await.0, 200);
        assert_eq!(send(&app, "/v1/runs", &metrics_token).await.0, 401);
        assert_eq!(send(&app, "/healthz", &[]).await.0, 200);
    }

    #[tokio::test]
    async fn host_check_refuses_names_it_does_not_know() {
        let access = ApiAccess::open().with_host_check(&["stepline.internal"]);
        let (app, _dir) = app_with(access).await;
        for host in [
            "localhost:4320",
            "127.0.0.1:4320",
            "[::1]:4320",
            "localhost",
            "stepline.internal:80",
        ] {
            let (status, _, body) = send(&app, "/v1/runs", &[("host", host)]).await;
            assert_eq!(status, 200, "{host}: {body}");
        }
        for (path, host) in [
            ("/v1/runs", "evil.example:4320"),
            ("/healthz", "rebound.evil.example"),
            ("/metrics", "127.0.0.1.evil.example"),
            ("/nowhere", "evil.example"),
        ] {
            let (status, _, body) = send(&app, path, &[("host", host)]).await;
            assert_eq!(status, 403, "{path} {host}: {body}");
            let error = body["error"].as_str().unwrap();
            assert!(error.contains("is not allowed"), "{error}");
        }
        // A request without Host and without an authority in its URI is refused too.
        assert_eq!(send(&app, "/v1/runs", &[]).await.0, 403);
        assert_eq!(
            send(&app, "http://localhost:4320/v1/runs", &[]).await.0,
            200,
            "the URI's authority stands in for Host (HTTP/2)"
        );
    }

    #[tokio::test]
    async fn continuation_of_a_delegate_in_both_formats() {
        let (app, _dir) = app(None).await;
        let uri = format!("/v1/runs/{}/continuation?format=otel", run_id(4));
        let (status, body) = call(&app, "GET", &uri, None).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["snapshot"]["state"], "complete");
        assert_eq!(body["messages"].as_array().unwrap().len(), 2);
        let uri = format!("/v1/runs/{}/continuation?format=pydantic-ai", run_id(4));
        let (_, body) = call(&app, "GET", &uri, None).await;
        let messages = body["messages"].as_array().unwrap();
        assert_eq!(messages[0]["kind"], "request");
        assert_eq!(messages[0]["parts"][0]["part_kind"], "user-prompt");
        assert_eq!(messages[1]["kind"], "response");
        assert_eq!(messages[1]["parts"][0]["content"], "a");
        assert!(
            messages.iter().all(|m| m["timestamp"].is_string()),
            "timestamps always emitted"
        );
    }
}

#[cfg(test)]
mod format_tests {
    use super::tests_support::*;
    use crate::continuation::{Format, INTERRUPTED_CONTENT};

    #[tokio::test]
    async fn every_format_renders_the_tool_round_trip() {
        let (app, _dir) = app(None).await;
        let get = |f: &str| format!("/v1/runs/outer-call/continuation?format={f}");
        let (_, b) = call(&app, "GET", &get("openai-chat"), None).await;
        assert_eq!(b["messages"][1]["content"], Value::Null);
        assert_eq!(
            b["messages"][1]["tool_calls"][0]["function"]["arguments"],
            "{}"
        );
        assert_eq!(
            b["messages"][2],
            json!({"role":"tool","tool_call_id":"c1","content":"a"})
        );
        let (_, b) = call(&app, "GET", &get("openai-responses"), None).await;
        assert_eq!(b["input"][1]["type"], "function_call");
        assert_eq!(
            b["input"][2],
            json!({"type":"function_call_output","call_id":"c1","output":"a"})
        );
        let (_, b) = call(&app, "GET", &get("anthropic"), None).await;
        assert_eq!(b["messages"][0]["role"], "user");
        assert_eq!(b["messages"][2]["content"][0]["type"], "tool_result");
        let (_, b) = call(&app, "GET", &get("gemini"), None).await;
        assert_eq!(b["contents"][1]["role"], "model");
        assert_eq!(
            b["contents"][2]["parts"][0]["functionResponse"]["response"],
            json!({"return_value": "a"})
        );
    }

    #[tokio::test]
    async fn repair_closes_the_dangling_call_in_every_format() {
        let (app, _dir) = app(None).await;
        for f in Format::NAMES {
            let uri = format!("/v1/runs/outer-call/continuation?format={f}&at=1");
            let (status, plain) = call(&app, "GET", &uri, None).await;
            assert_eq!(status, 200, "{plain}");
            assert!(plain.get("repaired").is_none());
            let (status, body) = call(&app, "GET", &format!("{uri}&repair=true"), None).await;
            assert_eq!(status, 200, "{body}");
            assert_eq!(
                body["repaired"],
                json!([{"tool_call_id":"c1","tool_name":"ask","message_index":2}]),
                "{f}"
            );
            assert!(
                body.to_string().contains(INTERRUPTED_CONTENT),
                "{f}: {body}"
            );
            let (_, again) = call(&app, "GET", &format!("{uri}&repair=true"), None).await;
            assert_eq!(again, body, "{f}: repair is deterministic");
        }
        // Without repair the provider formats drop the unanswered call and say so.
        let uri = "/v1/runs/outer-call/continuation?format=openai-chat&at=1";
        let (_, body) = call(&app, "GET", uri, None).await;
        assert_eq!(body["messages"].as_array().unwrap().len(), 1);
        assert!(body["warnings"][0]
            .as_str()
            .unwrap()
            .contains("repair=true"));
        let uri = "/v1/runs/outer-call/continuation?format=pydantic-ai&at=1&repair=true";
        let (_, body) = call(&app, "GET", uri, None).await;
        assert_eq!(body["messages"][2]["parts"][0]["outcome"], "interrupted");
    }

    #[tokio::test]
    async fn recovery_answers_in_one_call() {
        let (app, _dir) = app(None).await;
        let (status, body) = call(&app, "GET", "/v1/runs/outer-call/recovery", None).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["latest_complete_snapshot"]["seq"], 2);
        assert_eq!(body["latest_snapshot"]["seq"], 2);
        assert_eq!(body["unresolved_effects"], json!([]));
        assert_eq!(body["completed_tools"][0]["tool_call_id"], "c1");
        assert_eq!(body["failed_tools"], json!([]));
        let (status, _) = call(&app, "GET", "/v1/runs/nope/recovery", None).await;
        assert_eq!(status, 404);
    }
}
