#!/usr/bin/env python3
"""Unit tests of hack/oci-image.py (make release-checks, part of make test):
the architecture read from ELF headers and every refusal, the image index
and its images, the layer's exact contents, reproducibility, and the
Dockerfile agreeing with the script. ELF files are made here (headers only),
plus this machine's own dynamic /bin/sh."""

import hashlib
import importlib.util
import io
import json
import os
import struct
import tarfile
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
spec = importlib.util.spec_from_file_location("oci_image", os.path.join(HERE, "oci-image.py"))
oci = importlib.util.module_from_spec(spec)
spec.loader.exec_module(oci)

STAGE = oci.runtime_stage(os.path.join(ROOT, "manifests/Dockerfile"))
CA = b"-----BEGIN CERTIFICATE-----\ntest\n-----END CERTIFICATE-----\n"


def elf(machine=62, cls=2, order=1, etype=3, interp=None, needed=False, payload=b""):
    """A 64-bit ELF with program headers: PT_LOAD, and PT_INTERP / PT_DYNAMIC
    (with DT_NEEDED when `needed`, else only DT_NULL: a static-pie)."""
    e = "<" if order == 1 else ">"
    phdrs, blobs = [], b""
    data_off = 64 + 56 * 3
    if interp is not None:
        phdrs.append((3, data_off + len(blobs), len(interp) + 1))
        blobs += interp.encode() + b"\0"
    dyn = (struct.pack(e + "qQ", 1, 1) if needed else b"") + struct.pack(e + "qQ", 0, 0)
    phdrs.append((2, data_off + len(blobs), len(dyn)))
    blobs += dyn
    phdrs.append((1, 0, data_off + len(blobs)))
    header = b"\x7fELF" + bytes([cls, order, 1]) + b"\0" * 9
    header += struct.pack(e + "HHIQQQIHHHHHH", etype, machine, 1, 0, 64, 0, 0, 64, 56, len(phdrs), 64, 0, 0)
    table = b"".join(struct.pack(e + "IIQQQQQQ", t, 5, off, 0, 0, size, size, 8) for t, off, size in phdrs)
    table += b"\0" * (56 * (3 - len(phdrs)))
    return header + table + blobs + payload


class Files:
    """Binaries written to a temporary directory (removed with the test)."""

    def __init__(self, test):
        self.dir = tempfile.TemporaryDirectory()
        test.addCleanup(self.dir.cleanup)

    def put(self, name, data):
        path = os.path.join(self.dir.name, name)
        with open(path, "wb") as f:
            f.write(data)
        return path


class ElfHeader(unittest.TestCase):
    def test_architectures_come_from_e_machine(self):
        self.assertEqual(oci.elf_platform(elf(62)), ("amd64", None))
        self.assertEqual(oci.elf_platform(elf(183)), ("arm64", "v8"))
        self.assertEqual(oci.elf_platform(elf(243)), ("riscv64", None))
        self.assertEqual(oci.elf_platform(elf(22, order=2)), ("s390x", None))
        self.assertEqual(oci.elf_platform(elf(62, etype=2)), ("amd64", None))

    def test_refusals_say_why(self):
        cases = [
            (b"#!/bin/sh\n" + b"\0" * 64, "not an ELF"),
            (elf(cls=1), "32-bit"),
            (elf(machine=40), "no OCI architecture"),
            (elf(order=2), "big-endian"),
            (elf(etype=1), "not an executable"),
            (elf(interp="/lib64/ld-linux-x86-64.so.2"), "dynamically linked (interpreter /lib64/ld-linux-x86-64.so.2)"),
            (elf(needed=True), "needs shared libraries"),
        ]
        for data, why in cases:
            with self.subTest(why=why), self.assertRaisesRegex(oci.Refused, why.replace("(", r"\(").replace(")", r"\)")):
                oci.elf_platform(data)

    def test_this_machines_shell_is_refused(self):
        with self.assertRaisesRegex(oci.Refused, "dynamically linked"):
            oci.elf_platform(oci.slurp(os.path.realpath("/bin/sh")), "/bin/sh")


class Binaries(unittest.TestCase):
    def setUp(self):
        self.f = Files(self)
        self.amd64 = self.f.put("amd64", elf(62, payload=b"amd64 code"))
        self.arm64 = self.f.put("arm64", elf(183, payload=b"arm64 code"))

    def test_a_stated_platform_must_be_the_elf_headers(self):
        got = oci.parse_binaries([f"linux/amd64={self.amd64}", f"linux/arm64/v8={self.arm64}"])
        self.assertEqual([(a, v) for a, v, _, _ in got], [("amd64", None), ("arm64", "v8")])
        with self.assertRaisesRegex(oci.Refused, "its ELF header says linux/amd64, not linux/arm64; refusing"):
            oci.parse_binaries([f"linux/arm64={self.amd64}"])
        with self.assertRaisesRegex(oci.Refused, "not linux/arm64/v7"):
            oci.parse_binaries([f"linux/arm64/v7={self.arm64}"])
        with self.assertRaisesRegex(oci.Refused, "a platform is linux/<arch>"):
            oci.parse_binaries([f"arm64={self.arm64}"])

    def test_one_binary_per_architecture(self):
        other = self.f.put("amd64-b", elf(62, payload=b"other"))
        with self.assertRaisesRegex(oci.Refused, "both amd64: one binary per architecture"):
            oci.parse_binaries([self.amd64, other])
        with self.assertRaisesRegex(oci.Refused, "no --binary"):
            oci.parse_binaries([])
        with self.assertRaisesRegex(oci.Refused, "No such file"):
            oci.parse_binaries([self.amd64 + ".missing"])


def read_layout(files):
    index = json.loads(files["index.json"])
    blob = lambda d: files["blobs/sha256/" + d.split(":")[1]]
    return index, blob


def layer_entries(data):
    with tarfile.open(fileobj=io.BytesIO(oci.gzip.decompress(data))) as t:
        return {m.name.rstrip("/"): (m, t.extractfile(m).read() if m.isfile() else None) for m in t.getmembers()}


class Index(unittest.TestCase):
    def setUp(self):
        self.amd64 = elf(62, payload=b"amd64 code")
        self.arm64 = elf(183, payload=b"arm64 code")
        self.bins = [("amd64", None, "a", self.amd64), ("arm64", "v8", "b", self.arm64)]

    def build(self, bins=None, created=1700000000, name="ghcr.io/kcm-rs/kcm-rs:1.2.3"):
        return oci.build(bins or self.bins, name, STAGE, CA, created, None, "abc123def456")

    def test_an_index_of_one_image_per_architecture(self):
        files, digest = self.build()
        index, blob = read_layout(files)
        self.assertEqual(json.loads(files["oci-layout"]), {"imageLayoutVersion": "1.0.0"})
        (top,) = index["manifests"]
        self.assertEqual(top["mediaType"], oci.INDEX)
        self.assertEqual(top["digest"], digest)
        self.assertEqual(top["annotations"]["io.containerd.image.name"], "ghcr.io/kcm-rs/kcm-rs:1.2.3")
        self.assertEqual(top["annotations"]["org.opencontainers.image.ref.name"], "1.2.3")
        image_index = json.loads(blob(digest))
        platforms = [m["platform"] for m in image_index["manifests"]]
        self.assertEqual(platforms, [{"architecture": "amd64", "os": "linux"}, {"architecture": "arm64", "os": "linux", "variant": "v8"}])
        for entry, want in zip(image_index["manifests"], [self.amd64, self.arm64]):
            manifest = json.loads(blob(entry["digest"]))
            config = json.loads(blob(manifest["config"]["digest"]))
            self.assertEqual(config["architecture"], entry["platform"]["architecture"])
            self.assertEqual(config.get("variant"), entry["platform"].get("variant"))
            self.assertEqual(config["config"]["User"], "65532:65532")
            self.assertEqual(config["config"]["Entrypoint"], ["/usr/local/bin/kcm-rs"])
            labels = config["config"]["Labels"]
            self.assertEqual(sorted(labels), sorted(oci.LABEL_KEYS))
            self.assertEqual(labels["org.opencontainers.image.version"], "1.2.3")
            self.assertEqual(labels["org.opencontainers.image.revision"], "abc123def456")
            self.assertEqual(labels["org.opencontainers.image.created"], "2023-11-14T22:13:20Z")
            self.assertEqual(manifest["annotations"], labels)
            (layer,) = manifest["layers"]
            data = blob(layer["digest"])
            self.assertEqual(layer["size"], len(data))
            self.assertEqual(config["rootfs"]["diff_ids"], ["sha256:" + hashlib.sha256(oci.gzip.decompress(data)).hexdigest()])
            entries = layer_entries(data)
            self.assertEqual(entries["usr/local/bin/kcm-rs"][1], want)
            self.assertEqual(entries["usr/local/bin/kcm-rs"][0].mode, 0o755)

    def test_the_layer_holds_only_the_binary_certificates_and_the_user(self):
        files, digest = self.build(bins=self.bins[:1])
        _, blob = read_layout(files)
        manifest = json.loads(blob(json.loads(blob(digest))["manifests"][0]["digest"]))
        entries = layer_entries(blob(manifest["layers"][0]["digest"]))
        files_only = sorted(k for k, (m, _) in entries.items() if m.isfile())
        self.assertEqual(files_only, ["etc/group", "etc/nsswitch.conf", "etc/passwd", "etc/ssl/certs/ca-certificates.crt", "usr/local/bin/kcm-rs"])
        self.assertEqual(entries["etc/ssl/certs/ca-certificates.crt"][1], CA)
        self.assertIn(b"nonroot:x:65532:65532:", entries["etc/passwd"][1])
        self.assertEqual(entries["etc/nsswitch.conf"][1], b"hosts: files dns\n")
        home = entries["home/nonroot"][0]
        self.assertEqual((home.uid, home.gid, home.mode), (65532, 65532, 0o700))
        self.assertEqual(entries["tmp"][0].mode, 0o1777)
        for m, _ in entries.values():
            self.assertEqual(m.mtime, 1700000000)
            if m.name.rstrip("/") != "home/nonroot":
                self.assertEqual((m.uid, m.gid), (0, 0))

    def test_reproducible(self):
        a, da = self.build()
        b, db = self.build(bins=list(reversed(self.bins)))
        self.assertEqual(da, db)
        self.assertEqual(oci.archive(a, 1), oci.archive(b, 1))
        _, dc = self.build(created=1700000001)
        self.assertNotEqual(da, dc)
        _, dd = self.build(bins=[("amd64", None, "a", self.amd64 + b"x"), self.bins[1]])
        self.assertNotEqual(da, dd)

    def test_names(self):
        self.assertEqual(oci.full_name("kcm-rs:0.1.0"), ("docker.io/library/kcm-rs:0.1.0", "0.1.0"))
        self.assertEqual(oci.full_name("localhost:5000/kcm-rs:1"), ("localhost:5000/kcm-rs:1", "1"))
        self.assertEqual(oci.full_name("ghcr.io/kcm-rs/kcm-rs"), ("ghcr.io/kcm-rs/kcm-rs:latest", "latest"))
        with self.assertRaisesRegex(oci.Refused, "a tag, not a digest"):
            oci.full_name("ghcr.io/kcm-rs/kcm-rs@sha256:00")


class Command(unittest.TestCase):
    def test_archive_digest_and_rootfs(self):
        f = Files(self)
        amd64 = f.put("kcm-rs", elf(62, payload=b"code"))
        out = os.path.join(f.dir.name, "out", "image.oci.tar")
        ca = f.put("ca.crt", CA)
        args = ["--binary", amd64, "--name", "ghcr.io/kcm-rs/kcm-rs:9.9.9", "--out", out, "--ca-bundle", ca, "--created", "5",
                "--dockerfile", os.path.join(ROOT, "manifests/Dockerfile")]
        oci.main(args)
        digest = oci.slurp(out + ".digest", "r").strip()
        with tarfile.open(out) as t:
            names = sorted(t.getnames())
            index = json.loads(t.extractfile("index.json").read())
            for n in names:
                if n.startswith("blobs/sha256/"):
                    self.assertEqual(hashlib.sha256(t.extractfile(n).read()).hexdigest(), n.rsplit("/", 1)[1])
        self.assertEqual(index["manifests"][0]["digest"], digest)
        self.assertIn("oci-layout", names)
        first = oci.slurp(out, "rb")
        oci.main(args)
        self.assertEqual(oci.slurp(out, "rb"), first)
        tree = os.path.join(f.dir.name, "rootfs")
        oci.main(["--rootfs", tree, "--binary", amd64, "--ca-bundle", ca, "--dockerfile", os.path.join(ROOT, "manifests/Dockerfile")])
        self.assertEqual(oci.slurp(os.path.join(tree, "usr/local/bin/kcm-rs"), "rb"), elf(62, payload=b"code"))
        self.assertEqual(os.stat(os.path.join(tree, "tmp")).st_mode & 0o7777, 0o1777)

    def test_refusals_exit_with_a_message(self):
        f = Files(self)
        dynamic = f.put("dyn", elf(62, interp="/lib64/ld-linux-x86-64.so.2"))
        for args in (["--check", dynamic], ["--binary", dynamic, "--name", "x:1", "--out", os.path.join(f.dir.name, "o")]):
            with self.subTest(args=args), self.assertRaises(SystemExit) as e:
                oci.main(args + ["--dockerfile", os.path.join(ROOT, "manifests/Dockerfile")])
            self.assertEqual(e.exception.code, 1)
        self.assertFalse(os.path.exists(os.path.join(f.dir.name, "o")))


class Dockerfile(unittest.TestCase):
    def test_the_dockerfiles_runtime_stage_is_the_scripts_image(self):
        self.assertEqual(STAGE["user"], "65532:65532")
        self.assertEqual(STAGE["binary"], "/usr/local/bin/kcm-rs")
        self.assertEqual(STAGE["workdir"], "/home/nonroot")
        self.assertEqual(sorted(STAGE["labels"]), sorted(oci.LABEL_KEYS))
        text = oci.slurp(os.path.join(ROOT, "manifests/Dockerfile"), "r")
        last = text.split("\nFROM ")[-1]
        self.assertTrue(last.startswith("scratch"), "the runtime stage is scratch plus the script's tree")
        self.assertIn("hack/oci-image.py --rootfs /rootfs", text)

    def test_a_drifted_dockerfile_is_refused(self):
        f = Files(self)
        text = oci.slurp(os.path.join(ROOT, "manifests/Dockerfile"), "r")
        for old, new in [("org.opencontainers.image.vendor=kcm-rs", ""), ("WORKDIR /home/nonroot", "WORKDIR /"),
                         ("SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt", "")]:
            with self.subTest(change=old), self.assertRaises(SystemExit):
                oci.runtime_stage(f.put("Dockerfile", text.replace(old, new).encode()))


if __name__ == "__main__":
    unittest.main()
