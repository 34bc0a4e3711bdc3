//! The browser planner's interface to `core`: validation and the planner over YAML text,
//! with JSON results. [`validate`] and [`plan`] are plain Rust (tested natively); the
//! `wasm` module exports them to JavaScript through `wasm-bindgen`.
#![deny(unsafe_code)]

use k8s_openapi::api::core::v1::Node;
use serde::Serialize;
use serde_json::Value;
use workloadspread_core::api::decode_workloadspread;
use workloadspread_core::api::v1beta1::WorkloadSpread;
use workloadspread_core::manifests::objects_from_yaml;
use workloadspread_core::plan::{plan_on_nodes, PlanStep};
use workloadspread_core::selector::NodeInfo;
use workloadspread_core::validation::{validate_create, ValidationContext};
use workloadspread_core::workload::{pod_template_for_validation, WorkloadKinds};

pub mod examples;
mod wasm;

/// Largest replica count the page simulates (every pod is simulated one by one).
pub const MAX_REPLICAS: i32 = 2000;
/// Most steps in one plan.
pub const MAX_STEPS: usize = 30;

/// One problem with the input, located by a field path (`spec.subsets[0].maxReplicas`)
/// or, for YAML syntax errors, by line and column.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Problem {
    /// Which input: `manifest`, `nodes` or `steps`.
    pub input: &'static str,
    /// Field path for validation errors ("" otherwise).
    pub path: String,
    pub message: String,
    /// 1-based line of a syntax error.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub column: Option<usize>,
}

impl Problem {
    fn new(input: &'static str, message: impl Into<String>) -> Self {
        Problem {
            input,
            path: String::new(),
            message: message.into(),
            line: None,
            column: None,
        }
    }

    fn yaml(input: &'static str, e: &serde_yaml::Error) -> Self {
        let mut p = Problem::new(input, format!("YAML: {e}"));
        if let Some(loc) = e.location() {
            (p.line, p.column) = (Some(loc.line()), Some(loc.column()));
        }
        p
    }
}

/// Result of [`validate`].
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Validation {
    pub valid: bool,
    pub problems: Vec<Problem>,
    /// The manifest's API version as written (`apps.kruise.io/v1alpha1` or `/v1beta1`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// The target workload's own `spec.replicas` when the manifest includes it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workload_replicas: Option<i32>,
}

/// Result of [`plan`].
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    pub validation: Validation,
    /// Empty when the input is invalid.
    pub steps: Vec<PlanStep>,
    /// Nodes the plan scheduled onto (empty: every pod is assumed to schedule).
    pub nodes: Vec<String>,
}

/// Validates a manifest: one WorkloadSpread (either served version), optionally in a
/// multi-document YAML with its target workload, whose pod template then validates the
/// subsets' patches exactly as the admission webhook does.
pub fn validate(manifest: &str) -> Validation {
    match parse_manifest(manifest) {
        Ok(m) => m.validation,
        Err(problem) => invalid(vec![problem]),
    }
}

/// Validates, then simulates the workload through `steps` (comma-separated replica
/// counts, e.g. `0,10,4,12`), scheduling onto the `nodes` YAML when it has any.
pub fn plan(manifest: &str, steps: &str, nodes: &str) -> Plan {
    let parsed = parse_manifest(manifest);
    let mut problems = vec![];
    let steps = parse_steps(steps).map_err(|p| problems.push(p)).ok();
    let nodes = parse_nodes(nodes).map_err(|p| problems.push(p)).ok();
    let manifest = match parsed {
        Ok(m) => m,
        Err(p) => {
            problems.insert(0, p);
            return Plan {
                validation: invalid(problems),
                steps: vec![],
                nodes: vec![],
            };
        }
    };
    let mut validation = manifest.validation;
    validation.problems.extend(problems);
    validation.valid = validation.problems.is_empty();
    let (Some(steps), Some(nodes), true) = (steps, nodes, validation.valid) else {
        return Plan {
            validation,
            steps: vec![],
            nodes: vec![],
        };
    };
    Plan {
        validation,
        steps: plan_on(&manifest.ws, &steps, &nodes),
        nodes: nodes.iter().map(|n| n.name.clone()).collect(),
    }
}

fn plan_on(ws: &WorkloadSpread, steps: &[i32], nodes: &[NodeInfo]) -> Vec<PlanStep> {
    if nodes.is_empty() {
        workloadspread_core::plan::plan(ws, steps)
    } else {
        plan_on_nodes(ws, steps, nodes)
    }
}

fn invalid(problems: Vec<Problem>) -> Validation {
    Validation {
        valid: false,
        problems,
        api_version: None,
        workload_replicas: None,
    }
}

struct Manifest {
    ws: WorkloadSpread,
    validation: Validation,
}

fn parse_manifest(text: &str) -> Result<Manifest, Problem> {
    let docs = yaml_documents(text, "manifest")?;
    let doc = docs
        .iter()
        .find(|d| d["kind"] == "WorkloadSpread")
        .ok_or_else(|| Problem::new("manifest", "no document with `kind: WorkloadSpread`"))?;
    let api_version = doc["apiVersion"].as_str().unwrap_or_default().to_string();
    if !matches!(
        api_version.as_str(),
        "apps.kruise.io/v1alpha1" | "apps.kruise.io/v1beta1"
    ) {
        let mut p = Problem::new(
            "manifest",
            "apiVersion must be apps.kruise.io/v1alpha1 or apps.kruise.io/v1beta1",
        );
        p.path = "apiVersion".into();
        return Err(p);
    }
    let ws = decode_workloadspread(doc).map_err(|e| Problem::new("manifest", e.to_string()))?;
    let workload = target_workload(&ws, &docs);
    let template = workload.and_then(|w| pod_template_for_validation(w["kind"].as_str()?, w));
    let kinds = WorkloadKinds::default();
    let ctx = ValidationContext {
        workload_template: template.as_ref(),
        others: &[],
        kinds: &kinds,
    };
    let problems: Vec<Problem> = validate_create(&ws, &ctx)
        .into_iter()
        .map(|e| Problem {
            path: e.path.clone(),
            ..Problem::new("manifest", e.to_string())
        })
        .collect();
    let workload_replicas = workload
        .and_then(|w| w["spec"]["replicas"].as_i64())
        .and_then(|r| i32::try_from(r).ok());
    let validation = Validation {
        valid: problems.is_empty(),
        problems,
        api_version: Some(api_version),
        workload_replicas,
    };
    Ok(Manifest { ws, validation })
}

/// The document the WorkloadSpread's `targetRef` names, if the manifest has it.
fn target_workload<'a>(ws: &WorkloadSpread, docs: &'a [Value]) -> Option<&'a Value> {
    let target = ws.spec.target_ref.as_ref()?;
    docs.iter().find(|d| {
        d["kind"] == target.kind.as_str()
            && d["apiVersion"] == target.api_version.as_str()
            && d["metadata"]["name"] == target.name.as_str()
    })
}

/// Every object of a YAML stream (`workloadspread_core::manifests`: lists and
/// sequences flattened, empty documents skipped), errors located for the page.
fn yaml_documents(text: &str, input: &'static str) -> Result<Vec<Value>, Problem> {
    objects_from_yaml(text).map_err(|e| Problem::yaml(input, &e))
}

fn parse_steps(text: &str) -> Result<Vec<i32>, Problem> {
    let steps: Vec<i32> = text
        .split([',', ' ', '→'])
        .filter(|s| !s.trim().is_empty())
        .map(|s| {
            s.trim().parse::<i32>().map_err(|_| {
                Problem::new(
                    "steps",
                    format!("{s:?} is not a replica count (e.g. 0,10,4,12)"),
                )
            })
        })
        .collect::<Result<_, _>>()?;
    if steps.is_empty() {
        return Err(Problem::new(
            "steps",
            "give at least one replica count, e.g. 0,10,4,12",
        ));
    }
    if steps.len() > MAX_STEPS {
        return Err(Problem::new("steps", format!("at most {MAX_STEPS} steps")));
    }
    if let Some(bad) = steps.iter().find(|r| !(0..=MAX_REPLICAS).contains(*r)) {
        return Err(Problem::new(
            "steps",
            format!("{bad} is outside 0..={MAX_REPLICAS} replicas"),
        ));
    }
    Ok(steps)
}

/// Node objects (`kind: Node`) from YAML; blank text means no node simulation.
fn parse_nodes(text: &str) -> Result<Vec<NodeInfo>, Problem> {
    let mut nodes = vec![];
    for (i, doc) in yaml_documents(text, "nodes")?.into_iter().enumerate() {
        if doc["kind"] != "Node" {
            return Err(Problem::new(
                "nodes",
                format!("document {} is not a Node", i + 1),
            ));
        }
        let node: Node = serde_json::from_value(doc)
            .map_err(|e| Problem::new("nodes", format!("node {}: {e}", i + 1)))?;
        if node.metadata.name.as_deref().unwrap_or_default().is_empty() {
            return Err(Problem::new(
                "nodes",
                format!("node {} has no metadata.name", i + 1),
            ));
        }
        nodes.push(NodeInfo::from(&node));
    }
    Ok(nodes)
}

#[cfg(test)]
mod tests;
