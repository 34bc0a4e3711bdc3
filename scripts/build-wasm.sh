#!/usr/bin/env bash
# Builds a workspace crate for a wasm target and copies the module to OUT.
#
#   build-wasm.sh PACKAGE TARGET OUT [PROFILE]
#
# Uses the rustup target when it is installed. Otherwise falls back to Debian's
# rustc-web + rust-web-src (std built from source with -Z build-std) linked with
# rustup's rust-lld, installing the Debian packages if needed. It says which it chose.
set -euo pipefail
pkg="$1" target="$2" out="$3" profile="${4:-wasm}"
root="$(cd "$(dirname "$0")/.." && pwd)"
target_dir="${CARGO_TARGET_DIR:-$root/target}"
lib="$(echo "$pkg" | tr - _)"

log() { echo "[wasm] $*" >&2; }

rustup_has_target() {
  command -v rustup >/dev/null && rustup target list --installed 2>/dev/null | grep -qx "$target"
}

debian_toolchain_ready() {
  [ -x /usr/bin/rustc ] && [ -x /usr/bin/cargo ] && [ -d /usr/lib/rustlib/src/rust/library ] &&
    { [ "$target" != wasm32-wasip1 ] || [ -f /usr/lib/wasm32-wasi/libc.a ]; }
}

build_with_rustup() {
  log "toolchain: rustup target $target is installed -> plain cargo build"
  cargo build --locked -p "$pkg" --target "$target" --profile "$profile" --target-dir "$target_dir"
  built="$target_dir/$target/$profile/$lib.wasm"
}

build_with_debian() {
  log "toolchain: rustup target $target is not installed -> Debian rustc-web with -Z build-std"
  if ! debian_toolchain_ready; then
    log "installing Debian's rustc-web, cargo-web, rust-web-src, wasi-libc"
    "$root/scripts/install-prereqs.sh" --no-cluster
  fi
  local lld rustflags fb_dir
  lld="$(rustc --print sysroot)/lib/rustlib/x86_64-unknown-linux-gnu/bin/rust-lld"
  [ -x "$lld" ] || { log "error: rustup's rust-lld not found at $lld"; exit 1; }
  rustflags="-C link-self-contained=no"
  [ "$target" = wasm32-wasip1 ] && rustflags="-L native=/usr/lib/wasm32-wasi $rustflags"
  log "$(/usr/bin/rustc --version), linker $lld"
  # A separate target dir: a different compiler must not invalidate the stable toolchain's cache.
  fb_dir="$target_dir/wasm-build-std"
  local tvar
  tvar="CARGO_TARGET_$(echo "$target" | tr 'a-z-' 'A-Z_')_LINKER"
  env RUSTC_BOOTSTRAP=1 RUSTC=/usr/bin/rustc RUSTFLAGS="$rustflags" "$tvar=$lld" \
    /usr/bin/cargo build --locked -Z build-std=std,panic_abort -p "$pkg" --target "$target" \
    --profile "$profile" --target-dir "$fb_dir" --manifest-path "$root/Cargo.toml"
  built="$fb_dir/$target/$profile/$lib.wasm"
}

cd "$root"
if rustup_has_target; then build_with_rustup; else build_with_debian; fi
mkdir -p "$(dirname "$out")"
cp "$built" "$out"
log "wrote $out ($(stat -c %s "$out") bytes)"
