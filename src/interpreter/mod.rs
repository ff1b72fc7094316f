//! The interpreter: turns OTLP spans into domain records. Pure and synchronous.
//!
//! Each recognised span becomes a [`SpanFact`] of one run. A run's events, effects, snapshots and
//! record are then [`derive`]d from the set of its facts, so arrival order and duplicate delivery
//! cannot change the outcome.

mod attributes;
mod derive;
mod fact;
mod genai;
mod validity;

pub use derive::{derive, Abandonment, DerivedRun, RunMeta};
pub use fact::{FactKind, Interpreted, RequestedCall, SpanFact};
pub use genai::interpret_span;
pub use validity::{walk, Walk};
