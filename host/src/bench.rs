//! `bench`: evaluates one admission request many times through the Wasm module and,
//! for comparison, through the same policy code compiled natively, each against a
//! fresh copy of the cluster state; reports p50/p99 and throughput.

use crate::capabilities::{AllowList, Capabilities};
use crate::engine::PolicyEngine;
use crate::state::ClusterState;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};
use workloadspread_core::counter;
use workloadspread_policy::host::{Host, HostError};

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
}

fn fresh_state(input: &BenchInput<'_>) -> Arc<ClusterState> {
    Arc::new(ClusterState::new(
        input.objects.to_vec(),
        AllowList::default(),
        input.counter,
        crate::now(),
    ))
}

/// The policy module in wasmtime (fresh instance per evaluation, as `serve`).
pub fn wasm(input: &BenchInput<'_>) -> Summary {
    let mut samples = Vec::with_capacity(input.iterations);
    for _ in 0..input.iterations {
        let state = fresh_state(input);
        let started = Instant::now();
        let _ = crate::run::evaluate(input.engine, input.request, input.settings, state);
        samples.push(started.elapsed());
    }
    Summary::of(samples)
}

/// The same policy code compiled natively, with the same host capabilities.
pub fn native(input: &BenchInput<'_>) -> anyhow::Result<Summary> {
    let settings: workloadspread_policy::Settings = serde_json::from_value(input.settings.clone())?;
    let request: kubewarden_policy_sdk::request::KubernetesAdmissionRequest =
        serde_json::from_value(input.request.clone())?;
    let mut samples = Vec::with_capacity(input.iterations);
    for _ in 0..input.iterations {
        let host = NativeHost(fresh_state(input));
        let started = Instant::now();
        let _ = workloadspread_policy::evaluate(&settings, &request, &host, crate::now());
        samples.push(started.elapsed());
    }
    Ok(Summary::of(samples))
}

/// The policy's `Host` over the host's capabilities (JSON in, JSON out, like waPC).
struct NativeHost(Arc<ClusterState>);

impl NativeHost {
    fn call(
        &self,
        binding: &str,
        ns: &str,
        op: &str,
        payload: &Value,
        what: String,
    ) -> Result<Value, HostError> {
        let err = |reason: String| HostError {
            what: what.clone(),
            reason,
        };
        let bytes = serde_json::to_vec(payload).map_err(|e| err(e.to_string()))?;
        let answer = self.0.call(binding, ns, op, &bytes).map_err(err)?;
        serde_json::from_slice(&answer).map_err(|e| err(e.to_string()))
    }
}

impl Host for NativeHost {
    fn get(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value, HostError> {
        let payload =
            json!({"api_version": api_version, "kind": kind, "name": name, "namespace": namespace});
        self.call(
            "kubewarden",
            "kubernetes",
            "get_resource",
            &payload,
            format!("get {kind} {name}"),
        )
    }

    fn list(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        label_selector: Option<&str>,
    ) -> Result<Vec<Value>, HostError> {
        let payload = json!({"api_version": api_version, "kind": kind, "namespace": namespace,
            "label_selector": label_selector});
        let list = self.call(
            "kubewarden",
            "kubernetes",
            "list_resources_by_namespace",
            &payload,
            format!("list {kind}"),
        )?;
        Ok(list["items"].as_array().cloned().unwrap_or_default())
    }

    fn counter(&self, operation: &str, payload: &Value) -> Result<Value, HostError> {
        self.call(
            counter::BINDING,
            counter::NAMESPACE,
            operation,
            payload,
            format!("counter {operation}"),
        )
    }
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
