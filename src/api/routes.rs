//! Routes and handlers of the query API.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Extension, State};
use axum::http::header;
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use bytes::Bytes;
use utoipa::OpenApi as _;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::auth::{self, ApiAccess};
use super::error::{ApiError, ErrorBody};
use super::extract::{Params, RunId};
use super::openapi::{
    AbandonQuery, ApiDoc, Continuation, ContinuationQuery, EffectList, EffectsQuery, EventList,
    GuardErrors, Health, HostError, QueryErrors, Recovery, RunErrors, RunIdParam, RunPage,
    RunsQuery, SnapshotList,
};
use super::run_filters;
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

/// Longest `reason` an abandon request may give, in bytes.
const MAX_REASON_BYTES: usize = 1024;

/// The `/v1` routes and `/healthz`, with their OpenAPI description.
fn described_routes() -> (OpenApiRouter<ApiState>, OpenApiRouter<ApiState>) {
    let v1 = OpenApiRouter::new()
        .routes(routes!(list_runs))
        .routes(routes!(get_run))
        .routes(routes!(get_events))
        .routes(routes!(get_effects))
        .routes(routes!(get_snapshots))
        .routes(routes!(get_continuation))
        .routes(routes!(get_recovery))
        .routes(routes!(super::interactions::get_interactions))
        .routes(routes!(abandon))
        .routes(routes!(super::deletion::delete_run))
        .routes(routes!(super::deletion::delete_conversation))
        .routes(routes!(super::deletion::list_deletions))
        .routes(routes!(openapi_json));
    let public = OpenApiRouter::new().routes(routes!(healthz));
    (v1, public)
}

/// The OpenAPI 3.1 document of the API (what `GET /v1/openapi.json` serves).
pub fn openapi() -> utoipa::openapi::OpenApi {
    let (v1, public) = described_routes();
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .merge(public)
        .merge(v1)
        .into_openapi()
}

/// The OpenAPI document, serialised once.
#[derive(Clone)]
struct OpenApiJson(Bytes);

/// Builds the API router.
pub fn router(state: ApiState) -> Router {
    let (v1, public) = described_routes();
    let (v1, _) = v1.split_for_parts();
    let (public, _) = public.split_for_parts();
    let document = openapi()
        .to_json()
        .map(|text| OpenApiJson(Bytes::from(text)))
        .unwrap_or_else(|e| {
            tracing::error!(error = %e, "the OpenAPI document does not serialise");
            OpenApiJson(Bytes::from_static(b"{}"))
        });
    let v1 = v1
        .route_layer(middleware::from_fn_with_state(
            state.access.clone(),
            auth::require_token,
        ))
        .layer(Extension(document));
    let metrics_route =
        Router::new()
            .route("/metrics", get(metrics))
            .route_layer(middleware::from_fn_with_state(
                state.access.clone(),
                auth::require_metrics_token,
            ));
    let access = state.access.clone();
    public
        .merge(metrics_route)
        .merge(v1)
        .merge(crate::ui::router())
        .fallback(|| async { ApiError::NotFound("no such endpoint".into()) })
        .layer(middleware::from_fn_with_state(access, auth::check_host))
        .with_state(state)
}

/// `/healthz`: 200 `{"status":"ok"}` while ingest can commit, 503
/// `{"status":"unavailable","error":...}` once its writer thread has stopped.
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "runs",
    security(()),
    responses(
        (status = 200, description = "Ingest can commit", body = Health),
        HostError,
        (status = 503, description = "The ingest writer thread has stopped", body = Health),
    )
)]
async fn healthz(State(state): State<ApiState>) -> Response {
    if state.ingest.healthy() {
        return Json(Health {
            status: "ok".into(),
            error: None,
        })
        .into_response();
    }
    (
        http::StatusCode::SERVICE_UNAVAILABLE,
        Json(Health {
            status: "unavailable".into(),
            error: Some("the ingest writer thread has stopped: no request can be committed".into()),
        }),
    )
        .into_response()
}

/// `GET /v1/openapi.json`: this API's OpenAPI 3.1 document.
#[utoipa::path(
    get,
    path = "/v1/openapi.json",
    tag = "runs",
    responses(
        (status = 200, description = "The OpenAPI 3.1 document", body = Object),
        GuardErrors,
    )
)]
async fn openapi_json(Extension(OpenApiJson(document)): Extension<OpenApiJson>) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], document).into_response()
}

async fn metrics(State(state): State<ApiState>) -> impl IntoResponse {
    let gauges = blocking(&state, |store| Ok(super::metrics::StoreGauges::read(store)))
        .await
        .ok()
        .flatten();
    let scrape =
        super::metrics::Scrape::new(state.ingest.clone(), state.continuations.clone(), gauges);
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

#[utoipa::path(
    get,
    path = "/v1/runs",
    tag = "runs",
    params(RunsQuery),
    responses(
        (status = 200, description = "A page of runs, oldest first", body = RunPage),
        QueryErrors,
    )
)]
async fn list_runs(
    State(state): State<ApiState>,
    Params(params): Params,
) -> Result<Json<RunPage>, ApiError> {
    let (attributes, plain): (HashMap<_, _>, HashMap<_, _>) = params
        .clone()
        .into_iter()
        .partition(|(k, _)| run_filters::is_attribute(k));
    check_params(
        &plain,
        &[
            "conversation_id",
            "parent_run_id",
            "agent_name",
            "status",
            "trace_id",
            "min_tool_calls",
            "attr.<key>",
            "continued_from",
            "limit",
            "cursor",
        ],
    )?;
    if let Some(s) = params.get("status") {
        if crate::domain::RunStatus::parse(s).is_none() {
            return Err(ApiError::BadRequest(format!(
                "status must be one of running, completed, failed, abandoned, waiting, not {s:?}"
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
        attributes: run_filters::attributes(&attributes)?,
        min_tool_calls: run_filters::min_tool_calls(&params)?,
        continued_from: params.get("continued_from").cloned(),
    };
    let (runs, next) = blocking(&state, move |s| {
        Ok(s.list_runs(&filter, cursor.as_deref(), limit)?)
    })
    .await?;
    Ok(Json(RunPage {
        runs,
        next_cursor: next.map(hex::encode),
    }))
}

#[utoipa::path(
    get,
    path = "/v1/runs/{run_id}",
    tag = "runs",
    params(RunIdParam),
    responses(
        (status = 200, description = "The run", body = Run),
        RunErrors,
    )
)]
async fn get_run(
    State(state): State<ApiState>,
    RunId(run_id): RunId,
    Params(params): Params,
) -> Result<Json<Run>, ApiError> {
    check_params(&params, &[])?;
    Ok(Json(blocking(&state, move |s| find_run(s, &run_id)).await?))
}

#[utoipa::path(
    get,
    path = "/v1/runs/{run_id}/events",
    tag = "runs",
    params(RunIdParam),
    responses(
        (status = 200, description = "The run's step events, chronological", body = EventList),
        RunErrors,
    )
)]
async fn get_events(
    State(state): State<ApiState>,
    RunId(run_id): RunId,
    Params(params): Params,
) -> Result<Json<EventList>, ApiError> {
    check_params(&params, &[])?;
    let events = blocking(&state, move |s| {
        let run = find_run(s, &run_id)?;
        Ok(s.events(&run.run_id)?)
    })
    .await?;
    Ok(Json(EventList { events }))
}

#[utoipa::path(
    get,
    path = "/v1/runs/{run_id}/effects",
    tag = "runs",
    params(RunIdParam, EffectsQuery),
    responses(
        (status = 200, description = "The run's tool-effect ledger", body = EffectList),
        RunErrors,
    )
)]
async fn get_effects(
    State(state): State<ApiState>,
    RunId(run_id): RunId,
    Params(params): Params,
) -> Result<Json<EffectList>, ApiError> {
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
    Ok(Json(EffectList { effects }))
}

#[utoipa::path(
    get,
    path = "/v1/runs/{run_id}/snapshots",
    tag = "runs",
    params(RunIdParam),
    responses(
        (status = 200, description = "The run's snapshots", body = SnapshotList),
        RunErrors,
    )
)]
async fn get_snapshots(
    State(state): State<ApiState>,
    RunId(run_id): RunId,
    Params(params): Params,
) -> Result<Json<SnapshotList>, ApiError> {
    check_params(&params, &[])?;
    let snapshots: Vec<SnapshotMeta> = blocking(&state, move |s| {
        let run = find_run(s, &run_id)?;
        Ok(s.snapshots(&run.run_id)?
            .into_iter()
            .map(|r| r.meta)
            .collect())
    })
    .await?;
    Ok(Json(SnapshotList { snapshots }))
}

/// What an orchestrator needs to decide how to recover a run, in one answer: the latest complete
/// and latest overall snapshots, the effects whose outcome is unknown, and the tools that
/// completed or failed.
#[utoipa::path(
    get,
    path = "/v1/runs/{run_id}/recovery",
    tag = "runs",
    params(RunIdParam),
    responses(
        (status = 200, description = "What recovering the run needs", body = Recovery),
        RunErrors,
    )
)]
async fn get_recovery(
    State(state): State<ApiState>,
    RunId(run_id): RunId,
    Params(params): Params,
) -> Result<Json<Recovery>, ApiError> {
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
        let (mut unresolved, mut completed, mut failed) = (Vec::new(), Vec::new(), Vec::new());
        for effect in s.effects(&run.run_id)? {
            if effect.status.is_unresolved() {
                unresolved.push(effect);
            } else if effect.status == EffectStatus::Completed {
                completed.push(effect);
            } else if effect.status == EffectStatus::Failed {
                failed.push(effect);
            }
        }
        Ok(Json(Recovery {
            run_id: run.run_id,
            status: run.status,
            latest_complete_snapshot: latest_complete.cloned(),
            latest_snapshot: snapshots.last().cloned(),
            unresolved_effects: unresolved,
            completed_tools: completed,
            failed_tools: failed,
        }))
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

#[utoipa::path(
    get,
    path = "/v1/runs/{run_id}/continuation",
    tag = "runs",
    params(RunIdParam, ContinuationQuery),
    responses(
        (status = 200, description = "The chosen snapshot's messages in `format`, with the common envelope", body = Continuation),
        QueryErrors,
        (status = 404, description = "No run with this id, or no snapshot that matches", body = ErrorBody),
        (status = 503, description = "The media store cannot give a media part now (retry after `Retry-After`)", body = ErrorBody),
    )
)]
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

#[utoipa::path(
    post,
    path = "/v1/runs/{run_id}/abandon",
    tag = "runs",
    params(RunIdParam, AbandonQuery),
    responses(
        (status = 200, description = "The run, now abandoned", body = Run),
        RunErrors,
        (status = 409, description = "The run is already over", body = ErrorBody),
        (status = 503, description = "The writer cannot take the request now (retry after `Retry-After`)", body = ErrorBody),
    )
)]
async fn abandon(
    State(state): State<ApiState>,
    RunId(run_id): RunId,
    Params(params): Params,
) -> Result<Json<Run>, ApiError> {
    check_params(&params, &["reason"])?;
    let reason = match params.get("reason").map(String::as_str) {
        None | Some("") => "abandoned by request",
        Some(r) if r.len() > MAX_REASON_BYTES => {
            return Err(ApiError::BadRequest(format!(
                "reason is {} bytes; at most {MAX_REASON_BYTES} are kept",
                r.len()
            )))
        }
        Some(r) => r,
    };
    match state.ingest.abandon(&run_id, reason).await? {
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
    pub use serde_json::{json, Value};
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

#[cfg(test)]
mod openapi_tests {
    use super::tests_support::*;

    #[tokio::test]
    async fn the_document_is_served_behind_the_token_and_names_every_route() {
        let (app, _dir) = app(Some("t0k")).await;
        let (status, body) = call(&app, "GET", "/v1/openapi.json", None).await;
        assert_eq!(status, 401);
        assert!(body["error"].is_string(), "{body}");
        let (status, doc) = call(&app, "GET", "/v1/openapi.json", Some("t0k")).await;
        assert_eq!(status, 200);
        assert_eq!(doc, serde_json::to_value(openapi()).unwrap());
        assert_eq!(doc["openapi"], "3.1.0");
        // In key order: serde_json maps (without preserve_order) sort their keys.
        let paths: Vec<&String> = doc["paths"].as_object().unwrap().keys().collect();
        assert_eq!(
            paths,
            [
                "/healthz",
                "/v1/conversations/{conversation_id}",
                "/v1/deletions",
                "/v1/openapi.json",
                "/v1/runs",
                "/v1/runs/{run_id}",
                "/v1/runs/{run_id}/abandon",
                "/v1/runs/{run_id}/continuation",
                "/v1/runs/{run_id}/effects",
                "/v1/runs/{run_id}/events",
                "/v1/runs/{run_id}/interactions",
                "/v1/runs/{run_id}/recovery",
                "/v1/runs/{run_id}/snapshots",
            ]
        );
        // /healthz needs no token; the /v1 routes take the document's bearer scheme.
        assert_eq!(doc["paths"]["/healthz"]["get"]["security"], json!([{}]));
        assert_eq!(doc["security"], json!([{"bearer": []}]));
        let formats = doc["components"]["schemas"]["Continuation"]["oneOf"]
            .as_array()
            .unwrap()
            .len();
        assert_eq!(formats, Format::NAMES.len());
    }

    #[tokio::test]
    async fn abandon_keeps_the_reason_and_refuses_a_long_one() {
        let (app, _dir) = app(None).await;
        let long = "x".repeat(MAX_REASON_BYTES + 1);
        let uri = format!("/v1/runs/outer-call/abandon?reason={long}");
        let (status, body) = call(&app, "POST", &uri, None).await;
        assert_eq!(status, 400, "{body}");
        assert!(body["error"].as_str().unwrap().contains("reason"), "{body}");
    }
}
