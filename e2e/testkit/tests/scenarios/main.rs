//! The reference e2e scenarios (§5.7 of the OpenKruise spec) on the local control plane:
//! every test runs the admission host and the controller for its own namespace; the
//! cluster's KWOK nodes make pods Running/Ready and remove deleted ones.
//!
//! Scale-out shapes are compared with `core`'s planner for the same WorkloadSpread.
//! Scale-in is decided by kube-controller-manager's ReplicaSet controller, which honours
//! `controller.kubernetes.io/pod-deletion-cost`: every scale-in step checks *which* pods it
//! removed — the ones that carried the lowest deletion costs — and that the status
//! matches the pods that remain.
//!
//! One module per concern; the helpers they share are in `support`.

#[path = "../common/mod.rs"]
mod common;

mod bursts;
mod sequences;
mod subsets;
mod support;
mod workloads;
