//! Admission request → decision → injection, through the policy's dispatcher with an
//! in-memory cluster. Properties: no panic; a mutation of a well-formed Pod is a Pod
//! that still parses and carries a matched-workloadspread annotation that parses.
#![no_main]
use k8s_openapi::api::core::v1::Pod;
use kubewarden_policy_sdk::request::KubernetesAdmissionRequest;
use libfuzzer_sys::fuzz_target;
use workloadspread_core::annotation::MatchedWorkloadSpread;
use workloadspread_core::api::MATCHED_WORKLOADSPREAD_ANNOTATION;
use workloadspread_fuzz::FixtureHost;
use workloadspread_policy::outcome::Outcome;
use workloadspread_policy::{evaluate, Settings};

fuzz_target!(|data: &[u8]| {
    let Ok(req) = serde_json::from_slice::<KubernetesAdmissionRequest>(data) else {
        return;
    };
    let well_formed = serde_json::from_value::<Pod>(req.object.clone()).is_ok();
    let now =
        workloadspread_core::timestamp_since_epoch(std::time::Duration::from_secs(1_700_000_000));
    for settings in [
        Settings::default(),
        serde_json::from_str(r#"{"mode":"best-effort"}"#).unwrap(),
    ] {
        let outcome = evaluate(&settings, &req, &FixtureHost, now);
        if let (Outcome::Mutate { object, .. }, true) = (outcome, well_formed) {
            let pod: Pod = serde_json::from_value(object).expect("mutated object is a Pod");
            let annotations = pod.metadata.annotations.unwrap_or_default();
            let matched = annotations
                .get(MATCHED_WORKLOADSPREAD_ANNOTATION)
                .expect("matched annotation");
            MatchedWorkloadSpread::parse(matched).expect("annotation parses");
        }
    }
});
