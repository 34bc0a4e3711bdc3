//! `bench`: evaluates one admission request many times through the Wasm module and,
//! for comparison, through the same policy code compiled natively (same host-call
//! payloads), each against a fresh copy of the cluster state; reports p50/p99 and
//! throughput.

use crate::capabilities::{AllowList, Capabilities};
use crate::engine::evaluate::AdmissionResponse;
use crate::engine::PolicyEngine;
use crate::offline::state::ClusterState;
use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, Instant};
use workloadspread_policy::host::CallHost;

/// Latency summary of one series.
#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
    pub iterations: usize,
    pub p50: Duration,
    pub p99: Duration,
    pub mean: Duration,
}

impl Summary {
    pub fn of(mut samples: Vec<Duration>) -> Self {
        samples.sort_unstable();
        let n = samples.len().max(1);
        let at = |q: f64| {
            samples
                .get(((n as f64 * q).ceil() as usize).saturating_sub(1))
                .copied()
                .unwrap_or_default()
        };
        let total: Duration = samples.iter().sum();
        Summary {
            iterations: samples.len(),
            p50: at(0.50),
            p99: at(0.99),
            mean: total / u32::try_from(n).unwrap_or(u32::MAX),
        }
    }

    pub fn per_second(&self) -> f64 {
        if self.mean.is_zero() {
            return 0.0;
        }
        1.0 / self.mean.as_secs_f64()
    }
}

/// What one bench run needs.
pub struct BenchInput<'a> {
    pub engine: &'a PolicyEngine,
    pub request: &'a Value,
    pub settings: &'a Value,
    pub objects: &'a [Value],
    pub counter: bool,
    pub iterations: usize,
    /// Answer reads whole, ignoring the policy's `field_masks`.
    pub ignore_field_masks: bool,
}

fn fresh_state(input: &BenchInput<'_>) -> Arc<ClusterState> {
    Arc::new(
        ClusterState::new(
            input.objects.to_vec(),
            AllowList::default(),
            input.counter,
            crate::now(),
        )
        .ignoring_field_masks(input.ignore_field_masks),
    )
}

/// The policy module in wasmtime (its instances as the engine's options say) and the
/// same policy code compiled natively, doing the same work around it (the payload
/// encoded, `validate` on the bytes, the answer decoded and the patch computed, with the
/// same host capabilities): only instantiation and the guest/host boundary differ.
///
/// Interleaved, one evaluation of each per round, so that a change in the machine's load
/// weighs on both alike: timed one block after the other, the p50 ratio of the same code
/// read 1.49x in one `make bench` and 2.3-2.4x in the two before it.
pub fn wasm_and_native(input: &BenchInput<'_>) -> (Summary, Summary) {
    // One state per side for every round; what an evaluation's claims wrote is put back
    // after it, untimed, so each sees the same state (a new state per evaluation cost
    // more than the evaluation with thousands of objects, and evicted the caches it then
    // read).
    let (wasm_state, native_state) = (fresh_state(input), fresh_state(input));
    let mut wasm = Vec::with_capacity(input.iterations);
    let mut native = Vec::with_capacity(input.iterations);
    for _ in 0..input.iterations {
        wasm.push(timed(input, &wasm_state, |state| {
            crate::engine::evaluate::evaluate(input.engine, input.request, input.settings, state)
        }));
        native.push(timed(input, &native_state, |state| {
            native_evaluate(input, state)
        }));
    }
    (Summary::of(wasm), Summary::of(native))
}

/// One evaluation on `state`, timed; its writes undone after, untimed.
fn timed(
    input: &BenchInput<'_>,
    state: &Arc<ClusterState>,
    evaluate: impl FnOnce(Arc<ClusterState>) -> AdmissionResponse,
) -> Duration {
    let started = Instant::now();
    let _ = evaluate(state.clone());
    let took = started.elapsed();
    state.undo_writes(input.objects);
    took
}

fn native_evaluate(input: &BenchInput<'_>, state: Arc<ClusterState>) -> AdmissionResponse {
    let call =
        |b: &str, n: &str, o: &str, p: &[u8]| state.call(b, n, o, p).map_err(|e| e.guest_text());
    let host = CallHost(&call);
    crate::engine::evaluate::evaluate_with(input.request, input.settings, |bytes| {
        workloadspread_policy::validate_payload(bytes, &host, crate::now())
    })
}

/// Both sides answer alike (else their timings compare different work): one evaluation
/// each, on fresh states, and the answers compared.
pub fn same_answers(input: &BenchInput<'_>) -> anyhow::Result<()> {
    let wasm = crate::engine::evaluate::evaluate(
        input.engine,
        input.request,
        input.settings,
        fresh_state(input),
    );
    let native = native_evaluate(input, fresh_state(input));
    let (wasm, native) = (serde_json::to_value(wasm)?, serde_json::to_value(native)?);
    anyhow::ensure!(
        wasm == native,
        "the module and the native build answer differently:\nwasm:   {wasm}\nnative: {native}"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles() {
        let s = Summary::of((1..=100).map(Duration::from_millis).collect());
        assert_eq!(s.p50, Duration::from_millis(50));
        assert_eq!(s.p99, Duration::from_millis(99));
        assert_eq!(s.mean, Duration::from_micros(50_500));
    }
}
