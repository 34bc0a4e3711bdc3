//! The matched-workloadspread annotation. Properties: no panic; whatever parses
//! round-trips through `to_annotation` unchanged.
#![no_main]
use libfuzzer_sys::fuzz_target;
use workloadspread_core::annotation::MatchedWorkloadSpread;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(parsed) = MatchedWorkloadSpread::parse(text) {
        let again = MatchedWorkloadSpread::parse(&parsed.to_annotation()).expect("re-parse");
        assert_eq!(again, parsed);
    }
});
