//! Living beside OpenKruise (#45), on the local control plane.
//!
//! - `contest` (every run): a WorkloadSpread whose status another manager writes after
//!   host and controller started is left alone by both, and they say so.
//! - `takeover` (`make takeover`: needs OpenKruise v1.9.0's own manager, built by
//!   `e2e/kruise/kruise.sh`): OpenKruise spreads a Deployment, host + controller take over
//!   without restarting a pod, then hand it back.

#[path = "../common/mod.rs"]
mod common;

mod contest;
mod takeover;
