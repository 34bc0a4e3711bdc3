//! `metadata.yml`, `artifacthub-pkg.yml` and the crate agree on version, rules and
//! context-aware resources.

use serde_yaml::Value;
use std::path::PathBuf;

fn load(file: &str) -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(file);
    serde_yaml::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

fn embedded(pkg: &Value, key: &str) -> Value {
    let text = pkg["annotations"][key]
        .as_str()
        .unwrap_or_else(|| panic!("artifacthub annotation {key}"));
    serde_yaml::from_str(text).unwrap()
}

#[test]
fn versions_agree() {
    let meta = load("metadata.yml");
    let pkg = load("artifacthub-pkg.yml");
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(
        meta["annotations"]["io.kubewarden.policy.version"].as_str(),
        Some(version)
    );
    assert_eq!(pkg["version"].as_str(), Some(version));
    let image = pkg["containersImages"][0]["image"].as_str().unwrap();
    let oci = meta["annotations"]["io.kubewarden.policy.ociUrl"]
        .as_str()
        .unwrap();
    assert_eq!(image, format!("{oci}:v{version}"));
    let policy_link = pkg["links"][0]["url"].as_str().unwrap();
    assert!(
        policy_link.contains(&format!("/v{version}/")),
        "{policy_link}"
    );
}

#[test]
fn rules_and_resources_agree() {
    let meta = load("metadata.yml");
    let pkg = load("artifacthub-pkg.yml");
    assert_eq!(embedded(&pkg, "kubewarden/rules"), meta["rules"]);
    assert_eq!(
        embedded(&pkg, "kubewarden/contextAwareResources"),
        meta["contextAwareResources"]
    );
    assert_eq!(
        pkg["annotations"]["kubewarden/mutation"].as_str(),
        Some("true")
    );
    assert_eq!(meta["mutating"].as_bool(), Some(true));
    assert_eq!(meta["backgroundAudit"].as_bool(), Some(false));
    assert_eq!(
        pkg["annotations"]["kubewarden/resources"],
        meta["annotations"]["io.artifacthub.resources"]
    );
    for (meta_key, pkg_key) in [
        ("io.artifacthub.displayName", "displayName"),
        ("io.kubewarden.policy.description", "description"),
        ("io.kubewarden.policy.license", "license"),
        ("io.kubewarden.policy.url", "homeURL"),
    ] {
        assert_eq!(
            meta["annotations"][meta_key], pkg[pkg_key],
            "{meta_key} vs {pkg_key}"
        );
    }
    let keywords: Vec<String> = meta["annotations"]["io.artifacthub.keywords"]
        .as_str()
        .unwrap()
        .split(',')
        .map(|k| k.trim().to_string())
        .collect();
    let pkg_keywords: Vec<String> = serde_yaml::from_value(pkg["keywords"].clone()).unwrap();
    assert_eq!(keywords, pkg_keywords);
}

#[test]
fn declared_context_resources_cover_what_the_policy_reads() {
    let meta = load("metadata.yml");
    let declared: Vec<(String, String)> = meta["contextAwareResources"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["apiVersion"].as_str().unwrap().to_string(),
                r["kind"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    for (api, kind) in [
        ("apps.kruise.io/v1beta1", "WorkloadSpread"),
        ("v1", "Pod"),
        ("apps/v1", "ReplicaSet"),
        ("apps/v1", "Deployment"),
    ] {
        assert!(
            declared.contains(&(api.to_string(), kind.to_string())),
            "{api} {kind} not declared"
        );
    }
    let caps: Vec<&str> = meta["hostCapabilities"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert_eq!(
        caps,
        vec![
            "kubernetes/get_resource",
            "kubernetes/list_resources_by_namespace"
        ]
    );
}
