//! `openkruise hand-over | hand-back`: the one change to OpenKruise a take-over needs
//! (`docs/operations.md`, "Coming from OpenKruise").
//!
//! With its `WorkloadSpread` feature gate off, OpenKruise's manager leaves pods and
//! WorkloadSpread statuses alone, but its validating webhook `vworkloadspread.kb.io` (still
//! registered: its handler is not gated) refuses every create and update of a
//! WorkloadSpread with "feature-gate WorkloadSpread is not enabled". `hand-over` takes that
//! webhook out of `kruise-validating-webhook-configuration` — from its `webhooks` and from
//! the `template` annotation the manager rebuilds the configuration from, so it does not
//! come back — and keeps both entries in an annotation of the same object; `hand-back` puts
//! them back. Nothing else of OpenKruise is touched; both are idempotent.
//!
//! `hand-over` first asks OpenKruise's validation whether the gate is off: a dry-run
//! create of a valid WorkloadSpread is admitted while it is on, refused "not enabled" once
//! off. It hands over only after [`PROBES`] answers in a row say off, waiting up to
//! `--wait-seconds` for that; `--force` skips the question. The answers may all come from
//! one replica of its manager (the API server reuses connections): a replica still on when
//! ours take over is met pod by pod — a pod its webhook spread reaches ours with its
//! annotation after its status write, and the host, reading that spread live, stands back
//! from it (`host/src/webhook/admit.rs`, `spread_by_another`).

use crate::api_call::bounded;
use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use kube::api::{ApiResource, DynamicObject, PostParams};
use kube::Api;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::Duration;

/// OpenKruise's validating configuration and its WorkloadSpread webhook.
pub use workloadspread_core::contest::OPENKRUISE_CONFIGURATION as CONFIGURATION;
pub use workloadspread_core::contest::OPENKRUISE_WEBHOOK as WEBHOOK;
/// The annotation OpenKruise's manager keeps its webhooks' template in.
const TEMPLATE: &str = "template";
/// Where `hand-over` keeps what it took out.
pub use workloadspread_core::contest::OPENKRUISE_HANDED_OVER as KEPT;

#[derive(Args)]
pub struct OpenKruiseArgs {
    #[command(subcommand)]
    pub step: Step,
    /// hand-over: how long to wait for OpenKruise's WorkloadSpread gate to be off (0:
    /// refuse at once while it is on).
    #[arg(long, global = true, default_value_t = 0)]
    pub wait_seconds: u64,
    /// hand-over: do not ask whether OpenKruise's WorkloadSpread gate is off.
    #[arg(long, global = true)]
    pub force: bool,
    /// kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or in-cluster).
    #[arg(long, global = true)]
    pub kubeconfig: Option<PathBuf>,
}

#[derive(Subcommand, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// After OpenKruise's WorkloadSpread gate is off: take its WorkloadSpread validation out.
    HandOver,
    /// Before OpenKruise's WorkloadSpread gate goes on again: put its validation back.
    HandBack,
}

/// What a step did to the configuration.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    Changed,
    AlreadyDone,
}

/// The configuration after `step` (as JSON), or `AlreadyDone`.
pub fn apply(step: Step, config: &mut Value) -> Result<Outcome> {
    let annotations = config["metadata"]["annotations"].take();
    let mut annotations = match annotations {
        Value::Object(m) => m,
        _ => Default::default(),
    };
    // Without the annotation, OpenKruise's manager takes the live webhooks as the template
    // at its next start: none is written then (an empty one would drop every webhook).
    let had_template = annotations.contains_key(TEMPLATE);
    let template: Vec<Value> = match annotations.get(TEMPLATE).and_then(Value::as_str) {
        Some(t) => serde_json::from_str(t).context("parsing OpenKruise's template annotation")?,
        None => vec![],
    };
    let webhooks: Vec<Value> = config["webhooks"].as_array().cloned().unwrap_or_default();
    let outcome = match step {
        Step::HandOver => {
            let (taken_live, live): (Vec<_>, Vec<_>) =
                webhooks.into_iter().partition(|w| w["name"] == WEBHOOK);
            let (taken_template, kept_template): (Vec<_>, Vec<_>) =
                template.into_iter().partition(|w| w["name"] == WEBHOOK);
            if taken_live.is_empty() && taken_template.is_empty() {
                Outcome::AlreadyDone
            } else {
                // Back after a hand-over (an upgrade of OpenKruise put it back): taken out
                // again, the newer copy kept (what was kept before where none came back).
                let before: Value = match annotations.get(KEPT).and_then(Value::as_str) {
                    Some(k) => serde_json::from_str(k)
                        .with_context(|| format!("parsing the annotation {KEPT}"))?,
                    None => Value::Null,
                };
                let newer = |taken: Vec<Value>, field: &str| match taken.is_empty() {
                    true => before[field].clone(),
                    false => Value::Array(taken),
                };
                let kept = json!({"webhooks": newer(taken_live, "webhooks"),
                    "template": newer(taken_template, "template")});
                annotations.insert(KEPT.into(), Value::String(kept.to_string()));
                if had_template {
                    annotations.insert(TEMPLATE.into(), Value::String(to_text(&kept_template)?));
                }
                config["webhooks"] = Value::Array(live);
                Outcome::Changed
            }
        }
        Step::HandBack => match annotations.remove(KEPT) {
            None => Outcome::AlreadyDone,
            Some(kept) => {
                let kept: Value = serde_json::from_str(kept.as_str().unwrap_or_default())
                    .with_context(|| format!("parsing the annotation {KEPT}"))?;
                let restore = |mut list: Vec<Value>, from: &Value| {
                    list.retain(|w| w["name"] != WEBHOOK);
                    list.extend(from.as_array().cloned().unwrap_or_default());
                    list
                };
                config["webhooks"] = Value::Array(restore(webhooks, &kept["webhooks"]));
                let kept_template = kept["template"].as_array().is_some_and(|t| !t.is_empty());
                if had_template || kept_template {
                    let template = restore(template, &kept["template"]);
                    annotations.insert(TEMPLATE.into(), Value::String(to_text(&template)?));
                }
                Outcome::Changed
            }
        },
    };
    config["metadata"]["annotations"] = Value::Object(annotations);
    Ok(outcome)
}

fn to_text(list: &[Value]) -> Result<String> {
    Ok(serde_json::to_string(list)?)
}

/// OpenKruise's WorkloadSpread feature gate, as its validation answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Gate {
    On,
    Off,
    /// Refused for something else (by another webhook, or the namespace is gone): what.
    Unknown(String),
}

/// The refusal of OpenKruise's validation with its gate off.
const GATE_OFF: &str = "feature-gate WorkloadSpread is not enabled";

/// Reads the answer to a dry-run create of a valid WorkloadSpread: admitted (OpenKruise's
/// validation let it through) → on; refused by [`WEBHOOK`] as not enabled → off.
pub fn gate_from(answer: Result<(), String>) -> Gate {
    match answer {
        Ok(()) => Gate::On,
        Err(e) if e.contains(WEBHOOK) && e.contains(GATE_OFF) => Gate::Off,
        Err(e) => Gate::Unknown(e),
    }
}

/// Answers in a row that must say the gate is off.
pub const PROBES: usize = 5;
const PROBE_EVERY: Duration = Duration::from_millis(200);

/// A dry-run WorkloadSpread no workload has (nothing is stored).
fn probe_spread(namespace: &str) -> Result<DynamicObject> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "WorkloadSpread",
        "metadata": {"name": "workloadspread-hand-over-probe", "namespace": namespace},
        "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment",
                "name": "workloadspread-hand-over-probe"},
            "subsets": [{"name": "probe", "maxReplicas": 1}]}
    }))?)
}

/// Until [`PROBES`] answers in a row say OpenKruise's gate is off, for `wait` at most.
async fn wait_for_gate_off(client: &kube::Client, wait: Duration) -> Result<()> {
    let resource = ApiResource::from_gvk_with_plural(
        &kube::core::GroupVersionKind::gvk("apps.kruise.io", "v1alpha1", "WorkloadSpread"),
        "workloadspreads",
    );
    let namespace = "default";
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
    let probe = probe_spread(namespace)?;
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let deadline = tokio::time::Instant::now() + wait;
    let mut off = 0;
    loop {
        let answer = bounded(CALL_TIMEOUT, api.create(&dry_run, &probe))
            .await?
            .map(|_| ())
            .map_err(|e| e.to_string());
        let gate = gate_from(answer);
        off = match gate {
            Gate::Off => off + 1,
            _ => 0,
        };
        if off >= PROBES {
            return Ok(());
        }
        if off > 0 || tokio::time::Instant::now() < deadline {
            tokio::time::sleep(PROBE_EVERY).await;
            continue;
        }
        // Its manager restarting answers "failed calling webhook" meanwhile: waited for.
        if let Gate::Unknown(e) = gate {
            bail!(
                "could not tell whether OpenKruise's WorkloadSpread gate is off (a dry-run \
                 WorkloadSpread in namespace {namespace}: {e}); --force hands over without asking"
            );
        }
        bail!(
            "OpenKruise's WorkloadSpread gate is still on (its validation {WEBHOOK} admitted a \
             dry-run WorkloadSpread): turn it off first (featureGates=\"WorkloadSpread=false\") \
             and let its manager restart, or wait for it with --wait-seconds; --force hands \
             over anyway (host and controller then stand back again at OpenKruise's first \
             status write)"
        );
    }
}

const CALL_TIMEOUT: Duration = Duration::from_secs(20);
const ATTEMPTS: usize = 5;

pub fn openkruise(args: OpenKruiseArgs) -> Result<()> {
    super::current_thread_runtime()?.block_on(async {
        let client = super::serve::kube_client(args.kubeconfig.as_ref()).await?;
        // Untyped: a typed round trip would drop fields newer than this build's API types.
        let resource = ApiResource::erase::<ValidatingWebhookConfiguration>(&());
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
        let mut asked = args.force || args.step != Step::HandOver;
        for _ in 0..ATTEMPTS {
            let current = bounded(CALL_TIMEOUT, api.get_opt(CONFIGURATION))
                .await?
                .with_context(|| {
                    format!("reading ValidatingWebhookConfiguration {CONFIGURATION}")
                })?;
            let Some(current) = current else {
                eprintln!(
                    "{CONFIGURATION} does not exist (OpenKruise not installed): nothing to do"
                );
                return Ok(());
            };
            let mut config = serde_json::to_value(&current)?;
            if apply(args.step, &mut config)? == Outcome::AlreadyDone {
                eprintln!("{CONFIGURATION}: {:?} already done", args.step);
                return Ok(());
            }
            if !asked {
                wait_for_gate_off(&client, Duration::from_secs(args.wait_seconds)).await?;
                eprintln!("OpenKruise's WorkloadSpread gate is off ({PROBES} answers in a row)");
                asked = true;
                continue;
            }
            // resourceVersion kept: a concurrent write (OpenKruise's manager renewing its
            // CA) makes this a 409, and the step is made again on the newer object.
            let updated: DynamicObject = serde_json::from_value(config)?;
            match bounded(
                CALL_TIMEOUT,
                api.replace(CONFIGURATION, &PostParams::default(), &updated),
            )
            .await?
            {
                Ok(_) => {
                    eprintln!(
                        "{CONFIGURATION}: {WEBHOOK} {}",
                        match args.step {
                            Step::HandOver =>
                                "taken out (kept in the annotation workloadspread.io/handed-over)",
                            Step::HandBack => "put back",
                        }
                    );
                    return Ok(());
                }
                Err(kube::Error::Api(s)) if s.code == 409 => continue,
                Err(e) => return Err(e).with_context(|| format!("updating {CONFIGURATION}")),
            }
        }
        bail!("{CONFIGURATION} kept changing under {ATTEMPTS} attempts; run the command again")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn webhook(name: &str, url: &str) -> Value {
        json!({"name": name, "clientConfig": {"url": url}})
    }

    /// As OpenKruise's manager leaves it: the live webhooks and their template.
    fn config() -> Value {
        let template = json!([webhook("vpod.kb.io", "tmpl"), webhook(WEBHOOK, "tmpl")]);
        json!({"metadata": {"name": CONFIGURATION, "resourceVersion": "7",
                "annotations": {TEMPLATE: template.to_string(), "other": "kept"}},
            "webhooks": [webhook("vpod.kb.io", "live"), webhook(WEBHOOK, "live")]})
    }

    fn names(list: &Value) -> Vec<String> {
        list.as_array()
            .unwrap()
            .iter()
            .map(|w| w["name"].as_str().unwrap().to_string())
            .collect()
    }

    fn template(config: &Value) -> Value {
        serde_json::from_str(
            config["metadata"]["annotations"][TEMPLATE]
                .as_str()
                .unwrap(),
        )
        .unwrap()
    }

    #[test]
    fn hand_over_takes_the_webhook_out_of_both_and_hand_back_restores_them() {
        let mut c = config();
        assert_eq!(apply(Step::HandOver, &mut c).unwrap(), Outcome::Changed);
        assert_eq!(names(&c["webhooks"]), ["vpod.kb.io"]);
        assert_eq!(names(&template(&c)), ["vpod.kb.io"]);
        assert_eq!(c["metadata"]["annotations"]["other"], "kept");
        assert_eq!(c["metadata"]["resourceVersion"], "7");
        assert_eq!(apply(Step::HandOver, &mut c).unwrap(), Outcome::AlreadyDone);
        assert_eq!(apply(Step::HandBack, &mut c).unwrap(), Outcome::Changed);
        assert_eq!(names(&c["webhooks"]), ["vpod.kb.io", WEBHOOK]);
        assert_eq!(c["webhooks"][1]["clientConfig"]["url"], "live");
        assert_eq!(template(&c)[1]["clientConfig"]["url"], "tmpl");
        assert!(c["metadata"]["annotations"].get(KEPT).is_none());
        assert_eq!(apply(Step::HandBack, &mut c).unwrap(), Outcome::AlreadyDone);
    }

    /// Before OpenKruise's manager first wrote its template: none is written (an empty one
    /// would make it drop every webhook), in either direction.
    #[test]
    fn without_a_template_none_is_written() {
        let mut c = config();
        c["metadata"]["annotations"]
            .as_object_mut()
            .unwrap()
            .remove(TEMPLATE);
        apply(Step::HandOver, &mut c).unwrap();
        assert_eq!(names(&c["webhooks"]), ["vpod.kb.io"]);
        assert!(c["metadata"]["annotations"].get(TEMPLATE).is_none());
        apply(Step::HandBack, &mut c).unwrap();
        assert_eq!(names(&c["webhooks"]), ["vpod.kb.io", WEBHOOK]);
        assert!(c["metadata"]["annotations"].get(TEMPLATE).is_none());
    }

    /// The gate as OpenKruise v1.9.0's validation answers (its handler's own message).
    #[test]
    fn the_gate_is_read_from_the_validation_answer() {
        let refused = |by: &str, why: &str| {
            Err(format!(
                "ApiError: admission webhook \"{by}\" denied the request: {why} (Forbidden)"
            ))
        };
        assert_eq!(gate_from(Ok(())), Gate::On);
        assert_eq!(gate_from(refused(WEBHOOK, GATE_OFF)), Gate::Off);
        let other = refused("validate.workloadspread.io", GATE_OFF);
        assert!(matches!(gate_from(other), Gate::Unknown(_)));
        let invalid = refused(WEBHOOK, "spec.subsets[0].maxReplicas: Invalid value");
        assert!(matches!(gate_from(invalid), Gate::Unknown(_)));
    }

    /// An upgrade of OpenKruise put its webhook back beside the kept copy: taken out
    /// again, the newer copy kept (the template's old one where the template came back
    /// without it); hand-back puts the newer one back.
    #[test]
    fn a_webhook_back_after_a_hand_over_is_taken_out_again() {
        let mut c = config();
        apply(Step::HandOver, &mut c).unwrap();
        c["webhooks"]
            .as_array_mut()
            .unwrap()
            .push(webhook(WEBHOOK, "new"));
        assert_eq!(apply(Step::HandOver, &mut c).unwrap(), Outcome::Changed);
        assert_eq!(names(&c["webhooks"]), ["vpod.kb.io"]);
        apply(Step::HandBack, &mut c).unwrap();
        assert_eq!(c["webhooks"][1]["clientConfig"]["url"], "new");
        assert_eq!(template(&c)[1]["clientConfig"]["url"], "tmpl");
    }
}
