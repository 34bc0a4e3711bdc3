//! The CPU features the engine compiles for: a fixed baseline instead of the features of
//! the machine it runs on. A module precompiled when the image is built (on a CI runner
//! with, say, AVX-512) then loads on every node that has the baseline — with the
//! machine's own features, wasmtime would refuse it on a node lacking one, and the
//! engine's compatibility hash (which names the precompiled file) would differ per CPU
//! model, so every node of another model would compile the module again at start.
//!
//! x86-64: x86-64-v2 (SSE3, SSSE3, SSE4.1, SSE4.2, POPCNT, CMPXCHG16B; every x86-64
//! server CPU since 2009). aarch64: the architecture's baseline (NEON). A machine without
//! the baseline, or another architecture, compiles for its own features.

use wasmtime::Config;

/// The triple this binary was built for (`build.rs`).
const TARGET: &str = env!("WS_BUILD_TARGET");

/// What the engine compiles for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cpu {
    /// The fixed baseline of this architecture.
    Baseline,
    /// This machine's own features (no baseline here, or the machine lacks it).
    Native,
}

/// Cranelift's flags of the baseline, if this machine has every feature they name; `None`
/// (compile for the machine's own features) otherwise.
fn flags() -> Option<&'static [&'static str]> {
    #[cfg(target_arch = "x86_64")]
    {
        let v2 = [
            ("has_sse3", std::arch::is_x86_feature_detected!("sse3")),
            ("has_ssse3", std::arch::is_x86_feature_detected!("ssse3")),
            ("has_sse41", std::arch::is_x86_feature_detected!("sse4.1")),
            ("has_sse42", std::arch::is_x86_feature_detected!("sse4.2")),
            ("has_popcnt", std::arch::is_x86_feature_detected!("popcnt")),
            (
                "has_cmpxchg16b",
                std::arch::is_x86_feature_detected!("cmpxchg16b"),
            ),
        ];
        let missing: Vec<&str> = v2.iter().filter(|f| !f.1).map(|f| f.0).collect();
        if !missing.is_empty() {
            tracing::warn!(
                ?missing,
                "this CPU lacks part of x86-64-v2: the policy is compiled for its own \
                 features (no precompiled module can be used here)"
            );
            return None;
        }
        Some(&[
            "has_sse3",
            "has_ssse3",
            "has_sse41",
            "has_sse42",
            "has_popcnt",
            "has_cmpxchg16b",
        ])
    }
    #[cfg(target_arch = "aarch64")]
    {
        Some(&[])
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        None
    }
}

/// A configuration compiling for the baseline when this machine has it, else for the
/// machine's own features.
pub fn config() -> (Config, Cpu) {
    let mut config = Config::new();
    let Some(flags) = flags() else {
        return (config, Cpu::Native);
    };
    // Naming the target turns off the detection of this machine's features.
    if TARGET.is_empty() || config.target(TARGET).is_err() {
        return (Config::new(), Cpu::Native);
    }
    for flag in flags {
        // SAFETY: these are CPU feature flags, every one of them present on this machine
        // (checked by `flags`); wasmtime checks them against the host again before it runs
        // code compiled with them. They only widen the instructions Cranelift may emit.
        #[allow(unsafe_code)]
        unsafe {
            config.cranelift_flag_enable(flag);
        }
    }
    (config, Cpu::Baseline)
}
