#!/usr/bin/env python3
"""An OCI image for one of our release binaries, built without a container engine.

    build_image.py --name workloadspread-host --version 0.1.0 --binary target/release/X \
        [--file SRC:DEST[:MODE]]... --out dist/images/host

The root filesystem holds only what the binary needs, taken from Debian packages
(`apt-get download`, cached): the shared libraries `ldd` names (libc6, libgcc-s1), the CA
bundle (ca-certificates), the packages' copyright files, an `/etc/passwd` with the non-root
user 65532, `/tmp`, and the binary in `/usr/local/bin`. The result is an OCI image layout
(`oci-layout`, `index.json`, `blobs/sha256/...`; the tag in `org.opencontainers.image.ref.name`)
that `skopeo copy oci:DIR:TAG docker://REGISTRY/NAME:TAG` pushes and `ctr images import`
loads.

Reproducible: the same inputs give the same digest. Entries are sorted, owned by 0:0 (the
user's home by 65532), stamped with SOURCE_DATE_EPOCH (default: the last commit's time), and
gzip carries no name or time.
"""
import argparse
import datetime
import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile

NONROOT = 65532
ARCH = {"x86_64": "amd64", "aarch64": "arm64"}
MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
MEDIA_INDEX = "application/vnd.oci.image.index.v1+json"
CA_PACKAGE = "ca-certificates"
CA_BUNDLE = "etc/ssl/certs/ca-certificates.crt"


class ImageError(Exception):
    pass


def run(cmd, **kw):
    try:
        return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw).stdout
    except FileNotFoundError as e:
        raise ImageError(f"{cmd[0]} is not installed: {e}") from e
    except subprocess.CalledProcessError as e:
        raise ImageError(f"{' '.join(cmd)} failed: {e.stderr.strip()}") from e


# ------------------------------------------------------------ what goes in

def needed_libraries(binary):
    """Absolute paths of the shared objects the dynamic loader maps for `binary`."""
    out = run(["ldd", binary])
    paths = []
    for line in out.splitlines():
        line = line.strip()
        if "=>" in line:
            target = line.split("=>", 1)[1].strip().split(" ")[0]
        else:
            target = line.split(" ")[0]
        if target.startswith("/"):
            paths.append(target)
        elif "not found" in line:
            raise ImageError(f"{binary}: {line}")
    return paths


def owning_package(path):
    """The installed Debian package shipping `path` (e.g. libc6 for libc.so.6)."""
    out = run(["dpkg-query", "-S", path])
    return out.split(":", 1)[0].strip()


def installed_version(package):
    return run(["dpkg-query", "-W", "-f=${Version}", package]).strip()


def expected_sha256(package, version):
    """The SHA256 the signed apt package index gives for `package`=`version`."""
    out = run(["apt-cache", "show", "--no-all-versions", f"{package}={version}"])
    for line in out.splitlines():
        if line.startswith("SHA256:"):
            return line.split(":", 1)[1].strip()
    raise ImageError(f"apt-cache show {package}={version} gives no SHA256 (run apt-get update)")


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def download_deb(package, cache, _retried=False):
    """The .deb of `package` at its installed version (so the libraries match the ones the
    binary was linked against), fetched once into `cache` and checked against the hash in
    apt's signed package index every time it is used: a cached file that differs (corrupt,
    or replaced) is deleted and fetched again, and refused if it still differs."""
    version = installed_version(package)
    os.makedirs(cache, exist_ok=True)
    found = [f for f in os.listdir(cache)
             if f.startswith(f"{package}_") and f.endswith(".deb")
             and f"_{version.replace(':', '%3a')}_" in f]
    if found:
        path = os.path.join(cache, found[0])
        try:
            want = expected_sha256(package, version)
        except ImageError:
            run(["apt-get", "update", "-qq"])
            want = expected_sha256(package, version)
        got = sha256_of(path)
        if got == want:
            return path
        os.remove(path)
        if _retried:
            raise ImageError(f"{package}={version}: downloaded .deb has SHA256 {got}, "
                             f"the package index says {want}")
        print(f"build_image: cached {found[0]} has SHA256 {got}, the index says {want}: "
              "fetching it again", file=sys.stderr)
        return download_deb(package, cache, _retried=True)
    try:
        run(["apt-get", "download", f"{package}={version}"], cwd=cache)
    except ImageError:
        # No package lists yet (a fresh machine): fetch them once and try again.
        run(["apt-get", "update", "-qq"])
        run(["apt-get", "download", f"{package}={version}"], cwd=cache)
    return download_deb(package, cache, _retried=_retried)


def extract_deb(deb, into):
    run(["dpkg-deb", "-x", deb, into])


class Rootfs:
    """Files of the image: path (no leading slash) -> (kind, data or link target, mode, uid)."""

    def __init__(self):
        self.entries = {}

    def add_dir(self, path, mode=0o755, uid=0):
        path = path.strip("/")
        parts = path.split("/")
        for i in range(1, len(parts)):
            self.entries.setdefault("/".join(parts[:i]), ("dir", None, 0o755, 0))
        self.entries[path] = ("dir", None, mode, uid)

    def add_file(self, path, data, mode=0o644, uid=0):
        path = path.strip("/")
        self.add_parents(path)
        self.entries[path] = ("file", data, mode, uid)

    def add_symlink(self, path, target):
        path = path.strip("/")
        self.add_parents(path)
        self.entries[path] = ("symlink", target, 0o777, 0)

    def add_parents(self, path):
        parent = os.path.dirname(path)
        if parent and parent not in self.entries:
            self.add_dir(parent)

    def add_from_tree(self, tree, path):
        """`path` as the package tree has it, following symlinks inside the tree (both the
        link and its target are kept, as the loader resolves them)."""
        rel = path.strip("/")
        src = os.path.join(tree, rel)
        if os.path.islink(src):
            target = os.readlink(src)
            self.add_symlink(rel, target)
            resolved = os.path.normpath(
                target if target.startswith("/") else os.path.join("/", os.path.dirname(rel), target))
            self.add_from_tree(tree, resolved)
        elif os.path.isfile(src):
            with open(src, "rb") as f:
                self.add_file(rel, f.read(), os.stat(src).st_mode & 0o777)
        else:
            raise ImageError(f"{path} is not in the package tree {tree}")


def package_path(tree, path):
    """`path` in an extracted package: Debian 12 packages ship /lib/... while a merged-/usr
    system may report /usr/lib/... (or the reverse)."""
    rel = path.strip("/")
    candidates = [rel]
    if rel.startswith("usr/"):
        candidates.append(rel[4:])
    else:
        candidates.append("usr/" + rel)
    for c in candidates:
        if os.path.lexists(os.path.join(tree, c)):
            return "/" + c
    raise ImageError(f"{path} is in none of the extracted packages")


def ca_bundle(tree):
    """The bundle update-ca-certificates would write: every certificate the package ships,
    in a fixed order."""
    base = os.path.join(tree, "usr/share/ca-certificates")
    certs = []
    for dirpath, _, files in os.walk(base):
        certs.extend(os.path.join(dirpath, f) for f in files if f.endswith(".crt"))
    if not certs:
        raise ImageError(f"no certificates in {base}")
    out = b""
    for c in sorted(certs):
        with open(c, "rb") as f:
            data = f.read()
        out += data if data.endswith(b"\n") else data + b"\n"
    return out


def build_rootfs(binary, name, files, deb_cache):
    fs = Rootfs()
    libraries = needed_libraries(binary)
    packages = sorted({owning_package(p) for p in libraries} | {CA_PACKAGE})
    versions = {}
    with tempfile.TemporaryDirectory() as tmp:
        for pkg in packages:
            tree = os.path.join(tmp, pkg)
            extract_deb(download_deb(pkg, deb_cache), tree)
            versions[pkg] = installed_version(pkg)
            copyright_file = f"usr/share/doc/{pkg}/copyright"
            if os.path.isfile(os.path.join(tree, copyright_file)):
                fs.add_from_tree(tree, copyright_file)
            if pkg == CA_PACKAGE:
                fs.add_file(CA_BUNDLE, ca_bundle(tree))
                continue
            for lib in libraries:
                if owning_package(lib) == pkg:
                    fs.add_from_tree(tree, package_path(tree, lib))
    fs.add_file("etc/passwd",
                f"root:x:0:0:root:/root:/sbin/nologin\n"
                f"nonroot:x:{NONROOT}:{NONROOT}:nonroot:/home/nonroot:/sbin/nologin\n".encode())
    fs.add_file("etc/group", f"root:x:0:\nnonroot:x:{NONROOT}:\n".encode())
    fs.add_file("etc/nsswitch.conf", b"hosts: files dns\n")
    fs.add_dir("tmp", 0o1777)
    fs.add_dir("home/nonroot", 0o700, NONROOT)
    with open(binary, "rb") as f:
        fs.add_file(f"usr/local/bin/{name}", f.read(), 0o755)
    for spec in files:
        src, dest, mode = parse_file_spec(spec)
        with open(src, "rb") as f:
            fs.add_file(dest, f.read(), mode)
    manifest = "".join(f"{p} {v}\n" for p, v in sorted(versions.items())).encode()
    fs.add_file("usr/share/doc/workloadspread/debian-packages.txt", manifest)
    return fs, versions


def parse_file_spec(spec):
    parts = spec.split(":")
    if len(parts) not in (2, 3) or not parts[1].startswith("/"):
        raise ImageError(f"--file {spec!r}: want SRC:/DEST[:OCTAL_MODE]")
    mode = int(parts[2], 8) if len(parts) == 3 else 0o644
    return parts[0], parts[1], mode


# ------------------------------------------------------------ the layout

def layer_tar(fs, epoch):
    """The uncompressed layer: sorted entries, fixed owners and times."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(fs.entries):
            kind, data, mode, uid = fs.entries[path]
            info = tarfile.TarInfo(path)
            info.mtime = epoch
            info.mode = mode
            info.uid = info.gid = uid
            info.uname = info.gname = ""
            if kind == "dir":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif kind == "symlink":
                info.type = tarfile.SYMTYPE
                info.linkname = data
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def gzip_bytes(data):
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as gz:
        gz.write(data)
    return buf.getvalue()


def canonical(obj):
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def digest(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def write_blob(out, data):
    d = digest(data)
    path = os.path.join(out, "blobs", "sha256", d.split(":", 1)[1])
    with open(path, "wb") as f:
        f.write(data)
    return {"digest": d, "size": len(data)}


def labels_for(args, created):
    return {
        "org.opencontainers.image.title": args.name,
        "org.opencontainers.image.description": args.description,
        "org.opencontainers.image.version": args.version,
        "org.opencontainers.image.source": args.source,
        "org.opencontainers.image.revision": args.revision,
        "org.opencontainers.image.licenses": args.licenses,
        "org.opencontainers.image.created": created,
    }


def image_config(args, labels, diff_id, created):
    entrypoint = [f"/usr/local/bin/{args.name}"]
    return {
        "architecture": ARCH.get(os.uname().machine, os.uname().machine),
        "os": "linux",
        "created": created,
        "config": {
            "User": f"{NONROOT}:{NONROOT}",
            "Entrypoint": entrypoint,
            "Env": ["PATH=/usr/local/bin:/usr/bin:/bin",
                    f"SSL_CERT_FILE=/{CA_BUNDLE}"],
            "WorkingDir": "/",
            "Labels": labels,
        },
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created": created, "created_by": "scripts/build_image.py"}],
    }


def write_layout(args, fs, epoch):
    if os.path.exists(args.out):
        shutil.rmtree(args.out)
    os.makedirs(os.path.join(args.out, "blobs", "sha256"))
    created = datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%SZ")
    tar = layer_tar(fs, epoch)
    layer = write_blob(args.out, gzip_bytes(tar))
    labels = labels_for(args, created)
    config = write_blob(args.out, canonical(image_config(args, labels, digest(tar), created)))
    manifest = {
        "schemaVersion": 2,
        "mediaType": MEDIA_MANIFEST,
        "config": {"mediaType": MEDIA_CONFIG, **config},
        "layers": [{"mediaType": MEDIA_LAYER, **layer}],
        "annotations": labels,
    }
    manifest_ref = write_blob(args.out, canonical(manifest))
    index = {
        "schemaVersion": 2,
        "mediaType": MEDIA_INDEX,
        "manifests": [{"mediaType": MEDIA_MANIFEST, **manifest_ref,
                       "annotations": {"org.opencontainers.image.ref.name": args.version}}],
    }
    with open(os.path.join(args.out, "index.json"), "wb") as f:
        f.write(canonical(index))
    with open(os.path.join(args.out, "oci-layout"), "wb") as f:
        f.write(canonical({"imageLayoutVersion": "1.0.0"}))
    return {"digest": manifest_ref["digest"], "layer_bytes": layer["size"],
            "uncompressed_bytes": len(tar)}


def source_date_epoch():
    if os.environ.get("SOURCE_DATE_EPOCH"):
        return int(os.environ["SOURCE_DATE_EPOCH"])
    try:
        return int(run(["git", "log", "-1", "--format=%ct"]).strip())
    except ImageError:
        return 0


def git_revision():
    try:
        return run(["git", "rev-parse", "HEAD"]).strip()
    except ImageError:
        return "unknown"


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--name", required=True, help="binary and image title, e.g. workloadspread-host")
    p.add_argument("--version", required=True, help="the tag (org.opencontainers.image.ref.name)")
    p.add_argument("--binary", required=True)
    p.add_argument("--file", action="append", default=[], help="SRC:/DEST[:OCTAL_MODE], repeatable")
    p.add_argument("--out", required=True, help="the OCI layout directory (replaced)")
    p.add_argument("--description", default="")
    p.add_argument("--source", default="https://github.com/workloadspread/workloadspread")
    p.add_argument("--licenses", default="Apache-2.0")
    p.add_argument("--revision", default=None, help="default: git rev-parse HEAD")
    p.add_argument("--deb-cache", default=os.path.join(
        os.environ.get("WS_CACHE_DIR", os.path.expanduser("~/.cache/workloadspread")), "debs"))
    args = p.parse_args(argv)
    if args.revision is None:
        args.revision = git_revision()
    return args


def main(argv=None):
    args = parse_args(argv)
    try:
        fs, versions = build_rootfs(args.binary, args.name, args.file, args.deb_cache)
        result = write_layout(args, fs, source_date_epoch())
    except (ImageError, OSError) as e:
        print(f"build_image: {e}", file=sys.stderr)
        return 1
    print(f"{args.out}: {args.name}:{args.version} {result['digest']} "
          f"layer {result['layer_bytes'] / 1e6:.1f} MB "
          f"({result['uncompressed_bytes'] / 1e6:.1f} MB uncompressed); "
          f"packages: {', '.join(f'{p} {v}' for p, v in sorted(versions.items()))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
