//! The controller on the local control plane: adoption of existing pods, status and
//! deletion costs (§4.5), and adaptive rescheduling together with the admission host.
//!
//! One module per concern; the helpers they share are in `support`.

mod capacity;
mod counting;
mod leader;
mod percentages;
mod probes;
mod refused_costs;
mod reschedule;
mod support;
