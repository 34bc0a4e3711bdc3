//! Tells the host which target triple it was built for: the policy engine compiles
//! for that triple with a fixed CPU baseline (`src/engine/baseline.rs`), so that a module
//! precompiled when the image is built loads on every node.

fn main() {
    let target = std::env::var("TARGET").unwrap_or_default();
    println!("cargo:rustc-env=WS_BUILD_TARGET={target}");
    println!("cargo:rerun-if-changed=build.rs");
}
