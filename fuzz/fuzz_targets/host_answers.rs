//! The guest side of the waPC boundary: whatever bytes the host answers to each host
//! call (garbage, truncated JSON, wrong shapes), a pod create is decided without a
//! panic. Input: the answers, separated by NUL bytes, consumed in call order.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::cell::RefCell;
use workloadspread_policy::host::CallHost;
use workloadspread_policy::{evaluate, Settings};

const REQUEST: &str = include_str!("../../policy/test_data/requests/pod-create.json");

fuzz_target!(|data: &[u8]| {
    let Ok(req) = serde_json::from_str(REQUEST) else {
        return;
    };
    let answers = RefCell::new(data.split(|b| *b == 0).map(<[u8]>::to_vec));
    let call = |_: &str, _: &str, _: &str, _: &[u8]| -> Result<Vec<u8>, String> {
        answers
            .borrow_mut()
            .next()
            .ok_or_else(|| "no more answers".to_string())
    };
    let host = CallHost(&call);
    let now =
        workloadspread_core::timestamp_since_epoch(std::time::Duration::from_secs(1_700_000_000));
    for mode in [r#"{}"#, r#"{"mode":"exact"}"#, r#"{"mode":"best-effort"}"#] {
        let settings: Settings = serde_json::from_str(mode).unwrap();
        let _ = evaluate(&settings, &req, &host, now);
    }
});
