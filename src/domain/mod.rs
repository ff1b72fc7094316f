//! Domain records: what stepline knows about agent runs. Names follow the design document.

mod binary_id;
mod effect;
mod event;
mod history;
mod interaction;
mod message;
mod rollup;
mod run;
mod snapshot;
mod time;
pub mod trigger;

pub use binary_id::{BuildIdHasher, IdHasher, IdMap, IdSet};
pub use effect::{EffectOutcome, EffectStatus, ToolEffect};
pub use event::{EventKind, StepEvent};
pub use history::{ChainIds, ChainRef, HistoryNode, NodeId, NODE_ID_BYTES};
pub use interaction::{Interaction, InteractionKind, InteractionStatus, Resolution};
pub use message::{
    write_canonical, CallIds, MessageHash, MessageRef, MessageShape, MESSAGE_HASH_BYTES,
};
pub use rollup::{duration_ms, ToolCallCounts};
pub use run::{ContinuedFrom, LineageKind, LineageScope, Run, RunStatus};
pub use snapshot::{SnapshotMeta, SnapshotRecord, SnapshotSource, SnapshotState};
pub use time::{format_timestamp, parse_timestamp, timestamp_bytes, Nanos, TIMESTAMP_BYTES};
pub use trigger::{RunInfo, RunInfoKeys, Trigger};
