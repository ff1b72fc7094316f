//! The HTTP query API (JSON): runs, events, effects, snapshots, continuations, abandonment,
//! health and metrics.

mod error;
mod metrics;
mod routes;

pub use error::ApiError;
pub use routes::{router, ApiState};
