//! The HTTP query API (JSON): runs, events, effects, snapshots, continuations, abandonment,
//! health and metrics, and who may use them (`auth`: tokens and the `Host` allow-list).

mod auth;
mod error;
mod extract;
mod metrics;
mod routes;

pub use auth::ApiAccess;
pub use error::ApiError;
pub use routes::{router, ApiState};
