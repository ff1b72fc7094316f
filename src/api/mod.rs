//! The HTTP query API (JSON): runs, events, effects, snapshots, continuations, interactions
//! (`interactions`: the calls a waiting run waits on), abandonment, deletion,
//! health and metrics, who may use them (`auth`: tokens and the `Host` allow-list), and the
//! API's OpenAPI 3.1 description (`openapi`, served at `/v1/openapi.json`).

mod auth;
mod deletion;
mod error;
mod extract;
mod interactions;
mod metrics;
mod openapi;
mod routes;
mod run_filters;

pub use auth::ApiAccess;
pub use error::{ApiError, ErrorBody};
pub use metrics::CACHE_LABELS;
pub use routes::{openapi, router, ApiState};
