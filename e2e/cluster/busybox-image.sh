#!/usr/bin/env bash
# Writes a one-layer OCI image layout from Debian's busybox-static, without Docker:
#
#   busybox-image.sh DIR REF CMD...
#
# DIR gets oci-layout, index.json (its one manifest annotated org.opencontainers.image.ref.name=REF)
# and blobs/sha256/: a gzip tar layer holding /bin/busybox and a symlink per applet (sh, nc,
# httpd, sleep, ...), a config whose rootfs.diff_ids is the sha256 of the *uncompressed* tar,
# and the manifest. `skopeo copy oci:DIR:REF ...` reads it as is; `ctr images import` takes it
# tarred (`tar -C DIR -cf FILE .`) with a full image name as REF. The layer is reproducible
# (sorted names, fixed owners and times), so the same busybox gives the same digests.
set -euo pipefail

[ $# -ge 3 ] || { echo "usage: $0 DIR REF CMD..." >&2; exit 2; }
dir="$1" ref="$2"; shift 2
busybox="$(command -v busybox || true)"
[ -n "$busybox" ] || { echo "busybox missing (Debian package busybox-static)" >&2; exit 1; }
# A dynamically linked busybox would need its libraries in the image.
{ ldd "$busybox" 2>&1 || true; } | grep -q -e 'not a dynamic executable' -e 'statically linked' ||
  { echo "$busybox is not statically linked (install busybox-static)" >&2; exit 1; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/rootfs/bin" "$work/rootfs/tmp" "$dir/blobs/sha256"
cp "$busybox" "$work/rootfs/bin/busybox"
for applet in $("$busybox" --list); do
  [ "$applet" = busybox ] || ln -s busybox "$work/rootfs/bin/$applet"
done
tar -C "$work/rootfs" --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -cf "$work/layer.tar" .

sha() { sha256sum "$1" | cut -d' ' -f1; }
size() { stat -c %s "$1"; }
# put FILE: store FILE as a blob, print its digest (hex)
put() { local h; h="$(sha "$1")"; cp "$1" "$dir/blobs/sha256/$h"; echo "$h"; }
json_args() { python3 -c 'import json,sys; print(json.dumps(sys.argv[1:]))' "$@"; }

diff_id="$(sha "$work/layer.tar")"
gzip -n -c "$work/layer.tar" >"$work/layer.tar.gz"
layer="$(put "$work/layer.tar.gz")"
arch="$(dpkg --print-architecture 2>/dev/null || echo amd64)"

printf '{"architecture":"%s","os":"linux","config":{"Env":["PATH=/bin"],"Cmd":%s,"WorkingDir":"/"},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
  "$arch" "$(json_args "$@")" "$diff_id" >"$work/config.json"
config="$(put "$work/config.json")"

printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%d},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"sha256:%s","size":%d}]}' \
  "$config" "$(size "$work/config.json")" "$layer" "$(size "$work/layer.tar.gz")" >"$work/manifest.json"
manifest="$(put "$work/manifest.json")"

printf '{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%d,"platform":{"architecture":"%s","os":"linux"},"annotations":{"org.opencontainers.image.ref.name":"%s"}}]}' \
  "$manifest" "$(size "$work/manifest.json")" "$arch" "$ref" >"$dir/index.json"
echo '{"imageLayoutVersion":"1.0.0"}' >"$dir/oci-layout"
