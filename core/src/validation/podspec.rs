//! The part of `ValidatePodSpec` that a subset patch can plausibly break, with the
//! API server's paths and messages: container and volume names, images, volume
//! references, ports, enum fields, scheduling fields. The API server still validates
//! every admitted pod completely; this check exists to reject a broken patch when the
//! WorkloadSpread is written instead of on every pod creation. Differentially tested
//! against a real API server (`e2e/testkit/tests/validation_differential.rs`).

use super::{validate_node_selector_term, validate_tolerations};
use crate::field::{FieldError, Path};
use crate::names::{is_dns1123_label, is_qualified_name, is_valid_label_value};
use k8s_openapi::api::core::v1::{NodeSelectorTerm, Toleration};
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeSet;

/// Validates a pod spec given as JSON; errors are reported under `path`.
pub fn validate_pod_spec(spec: &Value, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let volumes = validate_volumes(spec, &path.child("volumes"), &mut errs);
    let mut names = BTreeSet::new();
    let containers = spec["containers"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    if containers.is_empty() {
        errs.push(FieldError::required(path.child("containers").as_str(), ""));
    }
    // Containers first: a name clash is reported on the init container, as upstream.
    for (field, list) in [
        ("containers", &spec["containers"]),
        ("initContainers", &spec["initContainers"]),
    ] {
        for (i, c) in list.as_array().into_iter().flatten().enumerate() {
            validate_container(
                c,
                &path.child(field).index(i),
                &volumes,
                &mut names,
                &mut errs,
            );
        }
    }
    validate_enums(spec, path, &mut errs);
    validate_scheduling_fields(spec, path, &mut errs);
    errs
}

fn validate_volumes(spec: &Value, path: &Path, errs: &mut Vec<FieldError>) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (i, v) in spec["volumes"].as_array().into_iter().flatten().enumerate() {
        let p = path.index(i).child("name");
        let name = v["name"].as_str().unwrap_or_default();
        if name.is_empty() {
            errs.push(FieldError::required(p.as_str(), ""));
        } else {
            for m in is_dns1123_label(name) {
                errs.push(FieldError::invalid(p.as_str(), name, m));
            }
            if !names.insert(name.to_string()) {
                errs.push(FieldError::duplicate(p.as_str(), name));
            }
        }
    }
    names
}

fn validate_container(
    c: &Value,
    path: &Path,
    volumes: &BTreeSet<String>,
    names: &mut BTreeSet<String>,
    errs: &mut Vec<FieldError>,
) {
    let name = c["name"].as_str().unwrap_or_default();
    let name_path = path.child("name");
    if name.is_empty() {
        errs.push(FieldError::required(name_path.as_str(), ""));
    } else {
        for m in is_dns1123_label(name) {
            errs.push(FieldError::invalid(name_path.as_str(), name, m));
        }
        if !names.insert(name.to_string()) {
            errs.push(FieldError::duplicate(name_path.as_str(), name));
        }
    }
    let image = c["image"].as_str().unwrap_or_default();
    if image.is_empty() {
        errs.push(FieldError::required(path.child("image").as_str(), ""));
    } else if image.trim() != image {
        errs.push(FieldError::invalid(
            path.child("image").as_str(),
            image,
            "must not have leading or trailing whitespace",
        ));
    }
    for (i, m) in c["volumeMounts"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let mount_name = m["name"].as_str().unwrap_or_default();
        let p = path.child("volumeMounts").index(i);
        if mount_name.is_empty() {
            errs.push(FieldError::required(p.child("name").as_str(), ""));
        } else if !volumes.contains(mount_name) {
            errs.push(FieldError::not_found(p.child("name").as_str(), mount_name));
        }
        if m["mountPath"].as_str().unwrap_or_default().is_empty() {
            errs.push(FieldError::required(p.child("mountPath").as_str(), ""));
        }
    }
    for (i, port) in c["ports"].as_array().into_iter().flatten().enumerate() {
        let p = path.child("ports").index(i).child("containerPort");
        match port["containerPort"].as_i64() {
            None | Some(0) => errs.push(FieldError::required(p.as_str(), "")),
            Some(n) if !(1..=65535).contains(&n) => errs.push(FieldError::invalid(
                p.as_str(),
                n,
                "must be between 1 and 65535, inclusive",
            )),
            Some(_) => {}
        }
    }
    for (i, env) in c["env"].as_array().into_iter().flatten().enumerate() {
        if env["name"].as_str().unwrap_or_default().is_empty() {
            errs.push(FieldError::required(
                path.child("env").index(i).child("name").as_str(),
                "",
            ));
        }
    }
}

fn enum_field(spec: &Value, field: &str, valid: &[&str], path: &Path, errs: &mut Vec<FieldError>) {
    if let Some(v) = spec[field].as_str() {
        if !valid.contains(&v) {
            errs.push(FieldError::not_supported(
                path.child(field).as_str(),
                v,
                valid,
            ));
        }
    }
}

fn validate_enums(spec: &Value, path: &Path, errs: &mut Vec<FieldError>) {
    enum_field(
        spec,
        "restartPolicy",
        &["Always", "OnFailure", "Never"],
        path,
        errs,
    );
    enum_field(
        spec,
        "dnsPolicy",
        &["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"],
        path,
        errs,
    );
    if let Some(n) = spec["terminationGracePeriodSeconds"]
        .as_i64()
        .filter(|n| *n < 0)
    {
        errs.push(FieldError::invalid(
            path.child("terminationGracePeriodSeconds").as_str(),
            n,
            "must be greater than or equal to 0",
        ));
    }
}

fn validate_scheduling_fields(spec: &Value, path: &Path, errs: &mut Vec<FieldError>) {
    for (k, v) in spec["nodeSelector"].as_object().into_iter().flatten() {
        let p = path.child("nodeSelector");
        errs.extend(
            is_qualified_name(k)
                .into_iter()
                .map(|m| FieldError::invalid(p.as_str(), k.as_str(), m)),
        );
        let v = v.as_str().unwrap_or_default();
        errs.extend(
            is_valid_label_value(v)
                .into_iter()
                .map(|m| FieldError::invalid(p.as_str(), v, m)),
        );
    }
    if let Ok(tolerations) = Vec::<Toleration>::deserialize(&spec["tolerations"]) {
        errs.extend(validate_tolerations(
            &tolerations,
            &path.child("tolerations"),
        ));
    }
    let required =
        &spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"];
    if required.is_object() {
        let terms_path = path
            .child("affinity")
            .child("nodeAffinity")
            .child("requiredDuringSchedulingIgnoredDuringExecution")
            .child("nodeSelectorTerms");
        let terms: Vec<NodeSelectorTerm> =
            Vec::<NodeSelectorTerm>::deserialize(&required["nodeSelectorTerms"])
                .unwrap_or_default();
        if terms.is_empty() {
            errs.push(FieldError::required(
                terms_path.as_str(),
                "must have at least one node selector term",
            ));
        }
        for (i, t) in terms.iter().enumerate() {
            errs.extend(validate_node_selector_term(t, &terms_path.index(i)));
        }
    }
}
