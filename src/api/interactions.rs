//! `GET /v1/runs/{run_id}/interactions`: the tool calls a run ended waiting on (a human's
//! approval, an external result), where each stands, and which later run answered it.
//!
//! The run's ledger says which calls waited and which run answered each (see
//! `interpreter::fold::interactions`); the decision on an approval is read here from the
//! answering run's ledger: the tool ran there (a tool span with the call's id, or, for a
//! producer whose tool spans carry no call id, one of that tool's id-less spans) → `approved`,
//! else the answer was a refusal → `denied`.

use std::collections::{HashMap, HashSet};

use axum::extract::State;
use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;

use super::error::ApiError;
use super::extract::{Params, RunId};
use super::openapi::{RunErrors, RunIdParam};
use crate::api::ApiState;
use crate::domain::{EffectStatus, Interaction, InteractionKind, InteractionStatus, ToolEffect};
use crate::store::{Store, StoreError};

/// `GET /v1/runs/{run_id}/interactions`.
#[derive(Debug, Serialize, ToSchema)]
pub struct InteractionList {
    /// The calls the run ended waiting on, in ledger order.
    pub interactions: Vec<Interaction>,
}

#[utoipa::path(
    get,
    path = "/v1/runs/{run_id}/interactions",
    tag = "runs",
    params(RunIdParam),
    responses(
        (status = 200, description = "The calls the run ended waiting on", body = InteractionList),
        RunErrors,
    )
)]
pub(super) async fn get_interactions(
    State(state): State<ApiState>,
    RunId(run_id): RunId,
    Params(params): Params,
) -> Result<Json<InteractionList>, ApiError> {
    if let Some(k) = params.keys().min() {
        return Err(ApiError::BadRequest(format!(
            "unknown query parameter {k:?}; this endpoint takes none"
        )));
    }
    let store = state.store.clone();
    let read = move || -> Result<Vec<Interaction>, ApiError> {
        let run_id = store
            .resolve_run(&run_id)?
            .ok_or_else(|| ApiError::NotFound(format!("run {run_id:?} not found")))?;
        Ok(interactions(&store, &store.effects(&run_id)?)?)
    };
    let interactions = tokio::task::spawn_blocking(read)
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))??;
    Ok(Json(InteractionList { interactions }))
}

/// The interactions of a run with ledger `effects`, each answering run's ledger read once.
pub fn interactions(store: &Store, effects: &[ToolEffect]) -> Result<Vec<Interaction>, StoreError> {
    let mut answering: HashMap<&str, Ran> = HashMap::new();
    let mut out = Vec::new();
    for e in effects {
        let Some(kind) = e.interaction else {
            continue;
        };
        let (status, decision) = match (&e.resolved_by_run_id, kind) {
            (None, _) if e.status == EffectStatus::Waiting => (InteractionStatus::Pending, None),
            (None, _) => continue,
            (Some(_), InteractionKind::External) => {
                (InteractionStatus::Completed, Some("completed"))
            }
            (Some(by), InteractionKind::Approval) => {
                let ran = match answering.get_mut(by.as_str()) {
                    Some(ran) => ran,
                    None => answering
                        .entry(by.as_str())
                        .or_insert(Ran::of(&store.effects(by)?)),
                };
                if ran.take(&e.tool_call_id, &e.tool_name) {
                    (InteractionStatus::Approved, Some("approved"))
                } else {
                    (InteractionStatus::Denied, Some("denied"))
                }
            }
        };
        out.push(Interaction {
            tool_call_id: e.tool_call_id.clone(),
            tool_name: e.tool_name.clone(),
            kind,
            status,
            arguments: e.arguments.clone(),
            requested_at: e.requested_at.clone(),
            resolved_at: e.resolved_by_run_id.as_ref().and(e.ended_at.clone()),
            resolved_by_run_id: e.resolved_by_run_id.clone(),
            decision: decision.map(str::to_string),
        })
    }
    Ok(out)
}

/// The tools an answering run ran: call ids of its tool spans, and its id-less tool spans by
/// tool name (each taken by one approval at most).
struct Ran {
    ids: HashSet<String>,
    idless: HashMap<String, usize>,
}

impl Ran {
    fn of(effects: &[ToolEffect]) -> Self {
        let mut ran = Ran {
            ids: HashSet::new(),
            idless: HashMap::new(),
        };
        for e in effects.iter().filter(|e| e.span_id.is_some()) {
            if e.tool_call_id.is_empty() {
                *ran.idless.entry(e.tool_name.clone()).or_default() += 1;
            } else {
                ran.ids.insert(e.tool_call_id.clone());
            }
        }
        ran
    }

    /// Whether call `id` of tool `name` ran (an id-less span of the tool counts once).
    fn take(&mut self, id: &str, name: &str) -> bool {
        if self.ids.contains(id) {
            return true;
        }
        match self.idless.get_mut(name) {
            Some(n) if *n > 0 => {
                *n -= 1;
                true
            }
            _ => false,
        }
    }
}
