#!/usr/bin/env bash
# `make release`: everything a release publishes, in one directory (default dist/release):
#   workloadspread-policy-VERSION.wasm     the annotated policy module (Kubewarden loads it)
#   workloadspread-host-VERSION.oci.tar    the host image (OCI layout, tarred; skopeo copy
#   workloadspread-controller-VERSION.oci.tar   oci-archive:FILE docker://... pushes it)
#   workloadspread-VERSION.tgz             the Helm chart (appVersion and image tags = VERSION)
#   artifacthub-pkg.yml, metadata.yml      Artifact Hub / Kubewarden metadata
#   workloadspread-VERSION.cdx.json        SBOM of the binaries' Rust dependencies (CycloneDX)
#   SHA256SUMS
# With REGISTRY=host[:port][/path] it also pushes both images (REGISTRY/host:VERSION,
# REGISTRY/controller:VERSION) and the policy (REGISTRY/policies/workloadspread:vVERSION);
# PLAIN_HTTP=1 for a registry without TLS (e.g. one on loopback).
# Expects `make images annotated-policy` to have run (the Makefile target does that first).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
out="${RELEASE_DIR:-dist/release}"
images="${IMAGES_DIR:-dist/images}"
host_bin="${HOST_BIN:-${RELEASE_TARGET_DIR:-${CARGO_TARGET_DIR:-target}}/release/workloadspread-host}"
version="$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)"
[ -n "$version" ] || { echo "release: no workspace version in Cargo.toml" >&2; exit 1; }

for f in policy/annotated-policy.wasm "$images/host/index.json" "$images/controller/index.json"; do
  [ -f "$f" ] || { echo "release: $f is missing; run \`make images annotated-policy\`" >&2; exit 1; }
done

rm -rf "$out"
mkdir -p "$out"
cp policy/annotated-policy.wasm "$out/workloadspread-policy-$version.wasm"
# An OCI layout as one reproducible file (skopeo's oci-archive: transport reads it).
for image in host controller; do
  tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner \
    -C "$images/$image" -cf "$out/workloadspread-$image-$version.oci.tar" .
done
python3 - "$out" "$version" <<'EOF'
import sys
import helm_python
out, version = sys.argv[1], sys.argv[2]
path = helm_python.package("charts/workloadspread", destination=out)
meta = helm_python.Chart.load(path).metadata
if meta["appVersion"] != version or meta["version"] != version:
    sys.exit(f"release: chart version {meta['version']} / appVersion {meta['appVersion']} != {version}")
print(f"release: chart {path}")
EOF
cp artifacthub-pkg.yml metadata.yml "$out/"
python3 scripts/sbom.py --out "$out/workloadspread-$version.cdx.json"
(cd "$out" && sha256sum -- * >SHA256SUMS)

if [ -n "${REGISTRY:-}" ]; then
  tls=(); plain=()
  [ "${PLAIN_HTTP:-}" = 1 ] && { tls=(--dest-tls-verify=false); plain=(--plain-http); }
  for image in host controller; do
    skopeo copy "${tls[@]}" "oci-archive:$out/workloadspread-$image-$version.oci.tar" \
      "docker://$REGISTRY/$image:$version"
  done
  "$host_bin" push "${plain[@]}" "$out/workloadspread-policy-$version.wasm" \
    "registry://$REGISTRY/policies/workloadspread:v$version"
fi
echo "release $version in $out:"
(cd "$out" && ls -l --time-style=+ -- * | awk '{print "  " $NF "  " $5 " bytes"}')
