//! Deleting runs over the API: `DELETE /v1/runs/{run_id}` (the run and its delegate runs),
//! `DELETE /v1/conversations/{conversation_id}` (every run of a conversation), and
//! `GET /v1/deletions` (what is still being removed).
//!
//! A deletion answers once the runs are hidden (their record, index keys and aliases are gone,
//! durably): from then on every read of them answers 404, and the rest of what they left is
//! removed in the background (see `ingest::deletion`). Deleting a conversation answers 204
//! whether or not it had runs: the state asked for, nothing stored for it, holds either way,
//! and a retried erasure request succeeds.

use axum::extract::{FromRequestParts, Path, State};
use axum::http::StatusCode;
use axum::Json;
use http::request::Parts;

use super::error::ApiError;
use super::extract::{Params, RunId};
use super::openapi::{
    ConversationIdParam, DeletionInProgress, DeletionList, GuardErrors, RunErrors, RunIdParam,
    WriterBusy,
};
use super::ApiState;
use crate::domain::format_timestamp;

/// Most deletions `GET /v1/deletions` lists.
const LISTED: usize = 1000;

/// The `{conversation_id}` path segment (a 400 when its escapes are not UTF-8).
pub(super) struct ConversationId(pub String);

impl<S: Send + Sync> FromRequestParts<S> for ConversationId {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        Path::<String>::from_request_parts(parts, state)
            .await
            .map(|Path(id)| Self(id))
            .map_err(|e| {
                ApiError::BadRequest(format!(
                    "bad conversation id in the path: {}",
                    e.body_text()
                ))
            })
    }
}

/// Refuses any query parameter (these routes take none).
fn no_params(params: &Params) -> Result<(), ApiError> {
    let mut names: Vec<&String> = params.0.keys().collect();
    names.sort();
    match names.first() {
        None => Ok(()),
        Some(name) => Err(ApiError::BadRequest(format!(
            "unknown query parameter {name:?}; this endpoint takes none"
        ))),
    }
}

/// Deletes a run (by id or alias) and its delegate runs, with everything derived from them.
#[utoipa::path(
    delete,
    path = "/v1/runs/{run_id}",
    tag = "runs",
    params(RunIdParam),
    responses(
        (status = 204, description = "The run and its delegate runs are deleted: they answer 404 \
                                      from now on, and what they left is removed in the background"),
        RunErrors,
        WriterBusy,
    )
)]
pub(super) async fn delete_run(
    State(state): State<ApiState>,
    RunId(run_id): RunId,
    params: Params,
) -> Result<StatusCode, ApiError> {
    no_params(&params)?;
    if state.ingest.delete_run(&run_id).await?.is_empty() {
        return Err(ApiError::NotFound(format!("run {run_id:?} not found")));
    }
    Ok(StatusCode::NO_CONTENT)
}

/// Deletes every run of a conversation (and their delegate runs).
#[utoipa::path(
    delete,
    path = "/v1/conversations/{conversation_id}",
    tag = "runs",
    params(ConversationIdParam),
    responses(
        (status = 204, description = "No run of the conversation is left (also when it had none)"),
        GuardErrors,
        (status = 400, description = "A query parameter or the conversation id is wrong", body = super::error::ErrorBody),
        WriterBusy,
    )
)]
pub(super) async fn delete_conversation(
    State(state): State<ApiState>,
    ConversationId(conversation_id): ConversationId,
    params: Params,
) -> Result<StatusCode, ApiError> {
    no_params(&params)?;
    let runs = state.ingest.delete_conversation(&conversation_id).await?;
    tracing::info!(%conversation_id, runs, "conversation deleted");
    Ok(StatusCode::NO_CONTENT)
}

/// The deletions still being carried out.
#[utoipa::path(
    get,
    path = "/v1/deletions",
    tag = "runs",
    responses(
        (status = 200, description = "Deletions in progress", body = DeletionList),
        GuardErrors,
        (status = 400, description = "A query parameter was given", body = super::error::ErrorBody),
    )
)]
pub(super) async fn list_deletions(
    State(state): State<ApiState>,
    params: Params,
) -> Result<Json<DeletionList>, ApiError> {
    no_params(&params)?;
    let store = state.store.clone();
    let pending = tokio::task::spawn_blocking(move || store.pending_deletions(LISTED))
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))??;
    let deletions = pending
        .into_iter()
        .map(|d| DeletionInProgress {
            run_id: d.run_id,
            phase: serde_json::to_value(d.phase)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default(),
            reason: d.reason,
            requested_at: format_timestamp(d.requested_ns),
        })
        .collect();
    Ok(Json(DeletionList { deletions }))
}
