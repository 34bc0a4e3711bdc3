//! What offline `run` (and `bench`) evaluate against instead of a cluster: the cluster
//! state from files, an in-memory API with WorkloadSpread counters (`state.rs`), or a
//! recorded kwctl session replayed in order (`replay.rs`). Neither imports the webhook.

pub mod replay;
pub mod state;
