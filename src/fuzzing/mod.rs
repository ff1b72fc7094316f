//! In-process fuzzing on stable Rust: one target per pure entry point, a small mutational
//! engine, structure-aware generators, and the corpus / regression folders under `fuzz/`.
//!
//! cargo-fuzz needs nightly and instrumented fuzzers (AFL++, honggfuzz) would rebuild RocksDB
//! with other flags, so the targets run in the normal release build: [`engine`] mutates inputs
//! from `fuzz/corpus/<target>/` (bit flips, inserts, deletes, chunk duplication, splicing,
//! interesting integers, dictionary tokens), keeps inputs that reach new coarse features
//! ([`note`]), runs each under `catch_unwind` on a thread with the stack size of the service's
//! own threads, and writes a panicking input to `fuzz/regressions/<target>/<hash>`. A stack
//! overflow aborts the process, which `catch_unwind` cannot catch: the engine therefore runs in
//! a child process ([`engine::supervise`]) that leaves each input in a file before running it,
//! so the parent saves the input that killed it. It also times inputs against the same input
//! scaled ×8 and flags a ratio far above 8.
//!
//! Used by `tests/fuzz.rs` (regressions, corpus, then a few seconds per target) and
//! `examples/fuzz.rs` (longer runs). Not part of the service.

pub mod engine;
mod generate;
mod scratch;
mod source;
pub mod targets;

pub use engine::{note, Probe, Target};
pub use scratch::ScratchDir;
pub use source::Source;

/// Every fuzz target, by name.
pub fn all_targets() -> Vec<Target> {
    targets::all()
}

/// The target named `name` (also `selftest`, the engine's own test target with planted bugs).
pub fn target(name: &str) -> Option<Target> {
    targets::by_name(name)
}
