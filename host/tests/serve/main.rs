//! `serve` on the local control plane: webhook registered with the CA bundle the host
//! patches in, pods of a Deployment arriving mutated, WorkloadSpread validation, and
//! a 300-pod concurrent burst through two host replicas ending with exact counts.
//!
//! One module per concern; the helpers they share are in `support`.

mod admission;
mod audit;
mod certificates;
mod chain;
mod claims;
mod conversion;
mod hostile;
mod install;
mod namespaces;
mod startup;
mod support;
