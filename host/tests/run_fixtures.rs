//! The policy's fixtures through `workloadspread-host run` and the compiled module:
//! the same decisions the native fixture tests expect, in kwctl's output format.

use anyhow::{ensure, Context, Result};
use base64::Engine as _;
use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn policy() -> Result<Option<PathBuf>> {
    workloadspread_testkit::webhook::policy_wasm()
}

/// What one `run` printed, plus the WorkloadSpreads it wrote.
struct Ran {
    response: Value,
    state: Value,
}

impl Ran {
    fn patch(&self) -> Result<Value> {
        let b64 = self.response["patch"].as_str().context("no patch")?;
        Ok(serde_json::from_slice(
            &base64::engine::general_purpose::STANDARD.decode(b64)?,
        )?)
    }

    /// Status of subset `index` of version `version` of web-spread.
    fn subset(&self, version: &str, index: usize) -> &Value {
        &self.state["status"]["versionedSubsetStatuses"][version][index]
    }
}

fn run(policy: &Path, request: &str, extra: &[&str]) -> Result<Ran> {
    let out_state = tempfile_path("state.yaml");
    let data = root().join("policy/test_data");
    let output = Command::new(env!("CARGO_BIN_EXE_workloadspread-host"))
        .arg("run")
        .arg("--request-path")
        .arg(data.join("requests").join(request))
        .arg("--cluster-state")
        .arg(data.join("cluster.yaml"))
        .arg("--output-state")
        .arg(&out_state)
        .args(extra)
        .arg(policy)
        .output()?;
    ensure!(
        output.status.success(),
        "run {request} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8(output.stdout)?;
    ensure!(
        stdout.trim_end().lines().count() == 1,
        "kwctl prints one line: {stdout}"
    );
    let response: Value = serde_json::from_str(&stdout)?;
    let state_text = std::fs::read_to_string(&out_state)?;
    let state = serde_yaml::Deserializer::from_str(&state_text)
        .filter_map(|d| serde::Deserialize::deserialize(d).ok())
        .find(|v: &Value| v["metadata"]["name"] == "web-spread")
        .unwrap_or(Value::Null);
    Ok(Ran { response, state })
}

fn tempfile_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(workloadspread_testkit::unique_name(name))
}

const CONTEXT: &str = "--allow-context-aware";

#[test]
fn pod_create_exact_and_best_effort() -> Result<()> {
    let Some(p) = policy()? else { return Ok(()) };
    let exact = run(&p, "pod-create.json", &[CONTEXT])?;
    assert_eq!(exact.response["allowed"], true);
    assert_eq!(exact.response["patchType"], "JSONPatch");
    assert_eq!(exact.response["auditAnnotations"]["mode"], "exact");
    let patch = exact.patch()?;
    let text = patch.to_string();
    assert!(
        text.contains(r#"{\"name\":\"web-spread\",\"subset\":\"zone-b\"}"#),
        "{text}"
    );
    assert!(text.contains("zone-b") && text.contains("requiredDuringScheduling"));
    let b = exact.subset("7d4b9c", 1);
    assert_eq!(b["missingReplicas"], 4);
    assert!(b["creatingPods"]["web-7d4b9c-new01"].is_string());

    let best = run(&p, "pod-create.json", &[CONTEXT, "--no-counter"])?;
    assert_eq!(best.response["allowed"], true);
    assert_eq!(best.response["auditAnnotations"]["mode"], "best-effort");
    // Both modes choose zone-b; best-effort also marks the pod pending (#21).
    let request: Value = serde_json::from_str(&std::fs::read_to_string(
        root().join("policy/test_data/requests/pod-create.json"),
    )?)?;
    let patched = |p: Value| -> Result<Value> {
        let mut pod = request["object"].clone();
        json_patch::patch(&mut pod, &serde_json::from_value::<json_patch::Patch>(p)?)?;
        Ok(pod)
    };
    let mut want = patched(patch)?;
    // Exact mode writes the pod's planned deletion cost with the claim (#28); best
    // effort leaves it to the controller and marks the pod pending instead.
    let cost = want["metadata"]["annotations"]
        .as_object_mut()
        .and_then(|a| a.remove("controller.kubernetes.io/pod-deletion-cost"));
    assert!(
        cost.as_ref()
            .and_then(Value::as_str)
            .is_some_and(|c| c.parse::<i64>().is_ok()),
        "exact mode wrote no deletion cost: {cost:?}"
    );
    want["metadata"]["labels"]["workloadspread.io/pending"] = "true".into();
    assert_eq!(patched(best.patch()?)?, want);
    Ok(())
}

#[test]
fn unnamed_pods_dry_runs_and_unowned_pods() -> Result<()> {
    let Some(p) = policy()? else { return Ok(()) };
    let unnamed = run(&p, "pod-create-generate-name.json", &[CONTEXT])?;
    let uid = "11111111-0000-0000-0000-000000000002";
    assert!(unnamed.patch()?.to_string().contains(uid));
    assert!(unnamed.subset("7d4b9c", 1)["creatingPods"][uid].is_string());
    for file in ["pod-create-dry-run.json", "pod-create-no-owner.json"] {
        let r = run(&p, file, &[CONTEXT])?;
        assert_eq!(r.response["allowed"], true, "{file}");
        assert!(r.response.get("patch").is_none(), "{file}");
    }
    Ok(())
}

#[test]
fn lookup_failures_reject_or_admit_per_settings() -> Result<()> {
    let Some(p) = policy()? else { return Ok(()) };
    let rejected = run(&p, "pod-create-owner-missing.json", &[CONTEXT])?;
    assert_eq!(rejected.response["allowed"], false);
    let message = rejected.response["status"]["message"]
        .as_str()
        .unwrap_or("");
    assert!(
        message.contains("missing-rs") && message.contains("not found"),
        "{message}"
    );
    let lenient = run(
        &p,
        "pod-create-owner-missing.json",
        &[
            CONTEXT,
            "--settings-json",
            r#"{"onLookupFailure":"admit-unmodified"}"#,
        ],
    )?;
    assert_eq!(lenient.response["allowed"], true);
    assert!(lenient.response["auditAnnotations"]["lookup-failure"]
        .as_str()
        .is_some_and(|s| s.contains("missing-rs")));
    assert_eq!(
        lenient.response["warnings"].as_array().map(Vec::len),
        Some(1)
    );
    // Without --allow-context-aware every read is denied, as with kwctl.
    let denied = run(&p, "pod-create.json", &[])?;
    assert_eq!(denied.response["allowed"], false);
    assert!(denied.response["status"]["message"]
        .as_str()
        .is_some_and(|m| m.contains("not been granted")));
    Ok(())
}

/// A DELETE or eviction records the deletion as an intent: no slot is freed while the
/// pod runs (docs/semantics.md A11) — the cluster state shows it running.
#[test]
fn delete_and_eviction_record_the_deletion_as_an_intent() -> Result<()> {
    let Some(p) = policy()? else { return Ok(()) };
    for file in ["pod-delete.json", "pod-eviction.json"] {
        let r = run(&p, file, &[CONTEXT])?;
        assert_eq!(r.response["allowed"], true, "{file}");
        let a = r.subset("7d4b9c", 0);
        assert_eq!(a["missingReplicas"], 0, "{file}");
        assert!(a["deletingPods"]["web-7d4b9c-aaaa1"].is_string(), "{file}");
    }
    Ok(())
}

#[test]
fn workloadspread_validation() -> Result<()> {
    let Some(p) = policy()? else { return Ok(()) };
    let valid = run(&p, "workloadspread-create-valid-v1beta1.json", &[CONTEXT])?;
    assert_eq!(valid.response["allowed"], true);
    let converting = ["--settings-json", r#"{"conversionWebhook":true}"#];
    let alpha = run(
        &p,
        "workloadspread-create-valid.json",
        &[&[CONTEXT][..], &converting[..]].concat(),
    )?;
    assert_eq!(alpha.response["allowed"], true);
    let invalid = run(&p, "workloadspread-create-invalid.json", &[CONTEXT])?;
    assert_eq!(invalid.response["allowed"], false);
    assert_eq!(invalid.response["status"]["code"], 400);
    let message = invalid.response["status"]["message"].as_str().unwrap_or("");
    for want in [
        "spec.subsets[1].name: Invalid value: \"a\": duplicated subset name a",
        "spec.scheduleStrategy.type: Invalid value: \"Sometimes\"",
        "ws.spec.targetRef is in conflict with other WorkloadSpread web-spread",
    ] {
        assert!(message.contains(want), "missing {want:?} in {message}");
    }
    Ok(())
}

#[test]
fn admission_review_on_stdin() -> Result<()> {
    let Some(p) = policy()? else { return Ok(()) };
    let request: Value = serde_json::from_str(&std::fs::read_to_string(
        root().join("policy/test_data/requests/pod-create-no-owner.json"),
    )?)?;
    let review = serde_json::json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request});
    let mut child = Command::new(env!("CARGO_BIN_EXE_workloadspread-host"))
        .args(["run", "--request-path", "-"])
        .arg(&p)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    child
        .stdin
        .take()
        .context("stdin")?
        .write_all(review.to_string().as_bytes())?;
    let out = child.wait_with_output()?;
    let response: Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(response["uid"], request["uid"]);
    assert_eq!(response["allowed"], true);
    Ok(())
}

#[test]
fn annotated_module_embeds_metadata_and_still_runs() -> Result<()> {
    let Some(p) = policy()? else { return Ok(()) };
    let out = tempfile_path("annotated.wasm");
    let status = Command::new(env!("CARGO_BIN_EXE_workloadspread-host"))
        .arg("annotate")
        .arg("-m")
        .arg(root().join("metadata.yml"))
        .arg("-u")
        .arg(root().join("README.md"))
        .arg("-o")
        .arg(&out)
        .arg(&p)
        .status()?;
    ensure!(status.success(), "annotate failed");
    let wasm = std::fs::read(&out)?;
    let section = wasmparser::Parser::new(0)
        .parse_all(&wasm)
        .filter_map(|p| match p {
            Ok(wasmparser::Payload::CustomSection(c)) if c.name() == "io.kubewarden.metadata" => {
                Some(c.data().to_vec())
            }
            _ => None,
        })
        .next()
        .context("no io.kubewarden.metadata section")?;
    let embedded: Value = serde_json::from_slice(&section)?;
    let source: Value =
        serde_yaml::from_str(&std::fs::read_to_string(root().join("metadata.yml"))?)?;
    assert_eq!(embedded["protocolVersion"], "v1");
    assert_eq!(embedded["rules"], source["rules"]);
    assert_eq!(
        embedded["contextAwareResources"],
        source["contextAwareResources"]
    );
    assert_eq!(embedded["mutating"], true);
    assert!(embedded["annotations"]["io.kubewarden.policy.usage"]
        .as_str()
        .is_some_and(|u| u.starts_with("# WorkloadSpread")));
    let ran = run(&out, "pod-create.json", &[CONTEXT])?;
    assert_eq!(ran.response["patchType"], "JSONPatch");
    Ok(())
}

/// The kwctl session files (the same ones `e2e/policy.bats` gives kwctl) replayed.
#[test]
fn kwctl_sessions_replay() -> Result<()> {
    let Some(p) = policy()? else { return Ok(()) };
    let data = root().join("policy/test_data");
    let replay = |request: &str, session: &str| -> Result<(Value, String)> {
        let out = Command::new(env!("CARGO_BIN_EXE_workloadspread-host"))
            .arg("run")
            .arg("--request-path")
            .arg(data.join("requests").join(request))
            .arg("--allow-context-aware")
            .arg("--replay-host-capabilities-interactions")
            .arg(data.join("sessions").join(session)) // an absolute path replaces the base
            .arg(&p)
            .output()?;
        ensure!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok((
            serde_json::from_slice(&out.stdout)?,
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ))
    };
    let (created, warnings) = replay("pod-create.json", "pod-create.yml")?;
    assert_eq!(created["allowed"], true);
    assert_eq!(created["auditAnnotations"]["mode"], "best-effort");
    assert_eq!(created["auditAnnotations"]["subset"], "web-spread/zone-b");
    assert!(!warnings.contains("not used"), "{warnings}");
    let (invalid, _) = replay(
        "workloadspread-create-invalid.json",
        "workloadspread-create-invalid.yml",
    )?;
    assert_eq!(invalid["allowed"], false);
    // A session whose first request differs from the policy's first call.
    let wrong = tempfile_path("session.yml");
    std::fs::write(
        &wrong,
        "- type: Exchange\n  request: |\n    !KubernetesGetResource\n    api_version: v1\n    kind: Namespace\n    name: x\n  response:\n    type: Success\n    payload: '{}'\n",
    )?;
    let (mismatch, _) = replay("pod-create.json", wrong.to_str().unwrap_or_default())?;
    let message = mismatch["status"]["message"].as_str().unwrap_or_default();
    assert!(
        mismatch["allowed"] == false && message.contains("Replay error"),
        "{mismatch}"
    );
    Ok(())
}

/// Hostile input to `run`: a body that is not JSON fails with the parse error; a kind
/// the policy does not handle is allowed untouched; a 3 MB pod is evaluated.
#[test]
fn hostile_requests() -> Result<()> {
    let Some(policy) = policy()? else {
        return Ok(());
    };
    let host = |request: &[u8]| -> Result<std::process::Output> {
        let path = tempfile_path("request.json");
        std::fs::write(&path, request)?;
        Ok(Command::new(env!("CARGO_BIN_EXE_workloadspread-host"))
            .args(["run", "--request-path"])
            .arg(&path)
            .arg(&policy)
            .output()?)
    };
    let out = host(b"{not json")?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(
        !out.status.success() && stderr.contains("request is not JSON"),
        "{stderr}"
    );
    let request = |kind: &str, object: Value| {
        serde_json::to_vec(
            &serde_json::json!({"uid": "u", "kind": {"group": "", "version": "v1", "kind": kind},
            "operation": "CREATE", "namespace": "demo", "object": object}),
        )
    };
    for req in [
        request("ConfigMap", serde_json::json!({"metadata": {"name": "cm"}}))?,
        request(
            "Pod",
            serde_json::json!({"metadata": {"name": "p", "annotations": {"x": "y".repeat(3 << 20)}},
            "spec": {"containers": [{"name": "c", "image": "i"}]}}),
        )?,
    ] {
        let out = host(&req)?;
        ensure!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let response: Value = serde_json::from_slice(&out.stdout)?;
        ensure!(response["allowed"] == true, "{response}");
    }
    Ok(())
}

/// Issue #17 (11): an existing OpenKruise v1alpha1 manifest in `--cluster-state` (the
/// tool for checking a manifest before applying it) is served as the API server stores
/// it, converted to v1beta1: the pod gets the subset's node requirement, which used to
/// be dropped silently (`requiredNodeSelectorTerm` unknown to v1beta1).
#[test]
fn v1alpha1_workloadspreads_in_the_cluster_state_keep_their_node_selectors() -> Result<()> {
    let Some(p) = policy()? else { return Ok(()) };
    let data = root().join("policy/test_data");
    let text = std::fs::read_to_string(data.join("cluster.yaml"))?;
    let mut docs: Vec<Value> = serde_yaml::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).map_err(anyhow::Error::from))
        .collect::<Result<_>>()?;
    let ws = docs
        .iter_mut()
        .find(|d| d["kind"] == "WorkloadSpread")
        .context("no WorkloadSpread in cluster.yaml")?;
    ws["apiVersion"] = "apps.kruise.io/v1alpha1".into();
    for s in ws["spec"]["subsets"].as_array_mut().context("subsets")? {
        if let Some(term) = s
            .as_object_mut()
            .and_then(|m| m.remove("requiredNodeSelector"))
        {
            s["requiredNodeSelectorTerm"] = term;
        }
    }
    let state = tempfile_path("alpha-state.yaml");
    let yaml: Vec<String> = docs
        .iter()
        .map(serde_yaml::to_string)
        .collect::<Result<_, _>>()?;
    std::fs::write(&state, yaml.join("---\n"))?;
    let output = Command::new(env!("CARGO_BIN_EXE_workloadspread-host"))
        .args(["run", "--allow-context-aware", "--request-path"])
        .arg(data.join("requests/pod-create.json"))
        .arg("--cluster-state")
        .arg(&state)
        .arg(&p)
        .output()?;
    ensure!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let response: Value = serde_json::from_slice(&output.stdout)?;
    let patch = Ran {
        response,
        state: Value::Null,
    }
    .patch()?
    .to_string();
    assert!(
        patch.contains("requiredDuringSchedulingIgnoredDuringExecution")
            && patch.contains("zone-b"),
        "no node requirement injected: {patch}"
    );
    Ok(())
}

/// `bench` compares like with like: before timing, the module and the native build
/// answer every fixture identically (same allowed, patch, status and audit annotations),
/// with and without the counter.
#[test]
fn bench_sides_answer_alike() -> Result<()> {
    let Some(p) = policy()? else { return Ok(()) };
    let data = root().join("policy/test_data");
    for request in [
        "pod-create.json",
        "pod-create-generate-name.json",
        "pod-create-no-owner.json",
        "pod-delete.json",
        "pod-eviction.json",
        "workloadspread-create-invalid.json",
        "workloadspread-create-valid-v1beta1.json",
    ] {
        for extra in [&[][..], &["--no-counter"][..]] {
            let output = Command::new(env!("CARGO_BIN_EXE_workloadspread-host"))
                .arg("bench")
                .arg("--request-path")
                .arg(data.join("requests").join(request))
                .arg("--cluster-state")
                .arg(data.join("cluster.yaml"))
                .args(["-n", "3", "--json"])
                .args(extra)
                .arg(&p)
                .output()?;
            ensure!(
                output.status.success(),
                "bench {request} {extra:?}: {}",
                String::from_utf8_lossy(&output.stderr)
            );
            let summary: Value = serde_json::from_slice(&output.stdout)?;
            ensure!(summary["native"]["iterations"] == 3, "{summary}");
        }
    }
    Ok(())
}
