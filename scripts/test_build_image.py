#!/usr/bin/env python3
"""Tests of build_image.py on a small real binary (/bin/echo): the layout is valid OCI, the
same inputs give the same digest, the root filesystem runs the binary as the non-root user,
and skopeo (a registry client that knows OCI) reads the layout as we wrote it.

    python3 scripts/test_build_image.py
"""
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
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import build_image  # noqa: E402

BINARY = shutil.which("echo") or "/bin/echo"


def build(out, *extra, version="9.9.9", epoch="1700000000"):
    env = dict(os.environ, SOURCE_DATE_EPOCH=epoch)
    argv = ["--name", "echo", "--version", version, "--binary", BINARY, "--out", out,
            "--revision", "abc123", *extra]
    old = dict(os.environ)
    os.environ.update(env)
    try:
        assert build_image.main(argv) == 0, "build_image failed"
    finally:
        os.environ.clear()
        os.environ.update(old)


def blob(layout, digest):
    with open(os.path.join(layout, "blobs", "sha256", digest.split(":", 1)[1]), "rb") as f:
        data = f.read()
    assert "sha256:" + hashlib.sha256(data).hexdigest() == digest, f"blob {digest} is corrupt"
    return data


def read_image(layout):
    with open(os.path.join(layout, "index.json")) as f:
        index = json.load(f)
    [desc] = index["manifests"]
    manifest = json.loads(blob(layout, desc["digest"]))
    config = json.loads(blob(layout, manifest["config"]["digest"]))
    [layer_desc] = manifest["layers"]
    layer = blob(layout, layer_desc["digest"])
    return index, desc, manifest, config, layer_desc, layer


class BuildImageTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="build-image-test-")
        cls.policy = os.path.join(cls.tmp, "policy.wasm")
        with open(cls.policy, "wb") as f:
            f.write(b"\0asm\1\0\0\0")
        cls.a = os.path.join(cls.tmp, "a")
        build(cls.a, "--file", f"{cls.policy}:/policy/policy.wasm")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_layout_is_consistent_oci(self):
        with open(os.path.join(self.a, "oci-layout")) as f:
            self.assertEqual(json.load(f), {"imageLayoutVersion": "1.0.0"})
        index, desc, manifest, config, layer_desc, layer = read_image(self.a)
        self.assertEqual(desc["annotations"]["org.opencontainers.image.ref.name"], "9.9.9")
        self.assertEqual(desc["mediaType"], build_image.MEDIA_MANIFEST)
        self.assertEqual(layer_desc["size"], len(layer))
        self.assertEqual(layer_desc["mediaType"], build_image.MEDIA_LAYER)
        diff_id = "sha256:" + hashlib.sha256(gzip.decompress(layer)).hexdigest()
        self.assertEqual(config["rootfs"], {"type": "layers", "diff_ids": [diff_id]})
        self.assertEqual(config["config"]["User"], "65532:65532")
        self.assertEqual(config["config"]["Entrypoint"], ["/usr/local/bin/echo"])
        labels = config["config"]["Labels"]
        self.assertEqual(labels["org.opencontainers.image.version"], "9.9.9")
        self.assertEqual(labels["org.opencontainers.image.revision"], "abc123")
        self.assertEqual(labels["org.opencontainers.image.created"], "2023-11-14T22:13:20Z")
        self.assertEqual(manifest["annotations"], labels)

    def test_same_inputs_same_digest_and_bytes(self):
        b = os.path.join(self.tmp, "b")
        build(b, "--file", f"{self.policy}:/policy/policy.wasm")
        for name in ("index.json", "oci-layout"):
            with open(os.path.join(self.a, name), "rb") as x, open(os.path.join(b, name), "rb") as y:
                self.assertEqual(x.read(), y.read(), name)
        self.assertEqual(sorted(os.listdir(os.path.join(self.a, "blobs", "sha256"))),
                         sorted(os.listdir(os.path.join(b, "blobs", "sha256"))))

    def test_another_input_another_digest(self):
        c = os.path.join(self.tmp, "c")
        build(c, "--file", f"{self.policy}:/policy/policy.wasm", epoch="1700000001")
        self.assertNotEqual(read_image(self.a)[1]["digest"], read_image(c)[1]["digest"])

    def test_layer_entries_are_sorted_and_stamped(self):
        layer = read_image(self.a)[5]
        with tarfile.open(fileobj=io.BytesIO(gzip.decompress(layer))) as tar:
            members = tar.getmembers()
        names = [m.name for m in members]
        self.assertEqual(names, sorted(names))
        self.assertEqual({m.mtime for m in members}, {1700000000})
        owners = {m.name: (m.uid, m.gid) for m in members}
        self.assertEqual(owners.pop("home/nonroot"), (65532, 65532))
        self.assertEqual(set(owners.values()), {(0, 0)})
        by_name = {m.name: m for m in members}
        self.assertEqual(by_name["tmp"].mode, 0o1777)
        self.assertEqual(by_name["usr/local/bin/echo"].mode, 0o755)
        self.assertEqual(by_name["policy/policy.wasm"].mode, 0o644)
        self.assertTrue(by_name["lib64/ld-linux-x86-64.so.2"].issym())
        for lib in build_image.needed_libraries(BINARY):
            rel = build_image.package_path("/", lib).strip("/")
            self.assertIn(rel, by_name, f"{lib} is missing from the layer")
        self.assertIn(build_image.CA_BUNDLE, by_name)
        self.assertGreater(by_name[build_image.CA_BUNDLE].size, 100_000)

    @unittest.skipUnless(os.geteuid() == 0, "chroot needs root (CI runs as root)")
    def test_binary_runs_in_the_root_filesystem_as_nonroot(self):
        root = os.path.join(self.tmp, "rootfs")
        os.makedirs(root)
        with tarfile.open(fileobj=io.BytesIO(gzip.decompress(read_image(self.a)[5]))) as tar:
            tar.extractall(root, filter="fully_trusted")
        out = subprocess.run(
            [shutil.which("chroot") or "/usr/sbin/chroot", "--userspec=65532:65532", root, "/usr/local/bin/echo", "spread"],
            check=True, capture_output=True, text=True, env={})
        self.assertEqual(out.stdout, "spread\n")

    def test_skopeo_reads_the_layout(self):
        if not shutil.which("skopeo"):
            self.fail("skopeo is not installed (scripts/install-prereqs.sh installs it)")
        out = subprocess.run(["skopeo", "inspect", f"oci:{self.a}:9.9.9"],
                             check=True, capture_output=True, text=True).stdout
        seen = json.loads(out)
        self.assertEqual(seen["Digest"], read_image(self.a)[1]["digest"])
        self.assertEqual(seen["Labels"]["org.opencontainers.image.title"], "echo")

    def test_a_tampered_cached_deb_is_fetched_again(self):
        """Cached .deb files are checked against apt's package index (issue #30): a
        replaced file is not used."""
        cache = os.path.join(self.tmp, "debs")
        package = "libgcc-s1"
        good = build_image.download_deb(package, cache)
        digest = build_image.sha256_of(good)
        with open(good, "ab") as f:
            f.write(b"tampered")
        again = build_image.download_deb(package, cache)
        self.assertEqual(build_image.sha256_of(again), digest)
        self.assertEqual(digest, build_image.expected_sha256(package, build_image.installed_version(package)))

    def test_bad_file_spec_is_refused_with_the_format(self):
        with self.assertRaises(build_image.ImageError) as e:
            build_image.parse_file_spec("policy.wasm")
        self.assertIn("SRC:/DEST", str(e.exception))


if __name__ == "__main__":
    unittest.main(verbosity=2)
