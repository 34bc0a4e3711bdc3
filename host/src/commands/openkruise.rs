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

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use kube::api::{ApiResource, DynamicObject, PostParams};
use kube::Api;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::Duration;

/// OpenKruise's validating configuration and its WorkloadSpread webhook.
pub const CONFIGURATION: &str = "kruise-validating-webhook-configuration";
pub const WEBHOOK: &str = "vworkloadspread.kb.io";
/// The annotation OpenKruise's manager keeps its webhooks' template in.
const TEMPLATE: &str = "template";
/// Where `hand-over` keeps what it took out.
pub const KEPT: &str = "workloadspread.io/handed-over";

#[derive(Args)]
pub struct OpenKruiseArgs {
    #[command(subcommand)]
    pub step: Step,
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
                if annotations.contains_key(KEPT) {
                    bail!(
                        "{CONFIGURATION} holds {WEBHOOK} and a previous hand-over ({KEPT}): \
                         was OpenKruise reinstalled? Run hand-back first, or remove {KEPT}"
                    );
                }
                let kept = json!({"webhooks": taken_live, "template": taken_template});
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

const CALL_TIMEOUT: Duration = Duration::from_secs(20);
const ATTEMPTS: usize = 5;

pub fn openkruise(args: OpenKruiseArgs) -> Result<()> {
    super::current_thread_runtime()?.block_on(async {
        let client = super::serve::kube_client(args.kubeconfig.as_ref()).await?;
        // Untyped: a typed round trip would drop fields newer than this build's API types.
        let resource = ApiResource::erase::<ValidatingWebhookConfiguration>(&());
        let api: Api<DynamicObject> = Api::all_with(client, &resource);
        for _ in 0..ATTEMPTS {
            let current = bounded(api.get_opt(CONFIGURATION))
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
            // resourceVersion kept: a concurrent write (OpenKruise's manager renewing its
            // CA) makes this a 409, and the step is made again on the newer object.
            let updated: DynamicObject = serde_json::from_value(config)?;
            match bounded(api.replace(CONFIGURATION, &PostParams::default(), &updated)).await? {
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

async fn bounded<T>(call: impl std::future::Future<Output = T>) -> Result<T> {
    tokio::time::timeout(CALL_TIMEOUT, call)
        .await
        .map_err(|_| anyhow::anyhow!("the API server did not answer within {CALL_TIMEOUT:?}"))
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

    #[test]
    fn a_webhook_back_beside_a_kept_one_is_refused() {
        let mut c = config();
        apply(Step::HandOver, &mut c).unwrap();
        // OpenKruise reinstalled over the hand-over: its webhook is back, the kept copy too.
        c["webhooks"]
            .as_array_mut()
            .unwrap()
            .push(webhook(WEBHOOK, "new"));
        let err = apply(Step::HandOver, &mut c).unwrap_err().to_string();
        assert!(err.contains("hand-back first"), "{err}");
    }
}
