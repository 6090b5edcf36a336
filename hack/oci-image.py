#!/usr/bin/env python3
"""kcm-rs's container image without a container engine: an OCI image layout
archive (oci-layout, index.json, blobs/sha256/...) holding one image index,
with one image per architecture, each made from one static kcm-rs binary.

  hack/oci-image.py --binary dist/kcm-rs-linux-amd64 [--binary linux/arm64=dist/kcm-rs-linux-arm64] \
      --name ghcr.io/kcm-rs/kcm-rs:0.2.0 --out dist/kcm-rs-0.2.0.oci.tar \
      [--revision <commit>] [--created <unix time>]
  hack/oci-image.py --rootfs DIR --binary target/.../kcm-rs     (the Dockerfile's stage)

The architecture of each image is read from its binary's ELF header (e_machine,
class and byte order), never assumed: `PLATFORM=PATH` states what the caller
expects, and a binary of another architecture is refused, as is a binary that
is not a static ELF executable (an interpreter or a DT_NEEDED library: the
image has no loader and no libraries), two binaries of one architecture, or
an architecture with no OCI name here. So no image is ever mislabelled.

Each image's one layer holds only:
  - the binary at the Dockerfile's COPY destination (/usr/local/bin/kcm-rs);
  - the CA bundle /etc/ssl/certs/ca-certificates.crt (Debian's
    ca-certificates, read from this machine or --ca-bundle);
  - /etc/passwd and /etc/group with root, nobody and nonroot (65532),
    /home/nonroot (65532, 0700), /tmp (1777);
  - /etc/nsswitch.conf `hosts: files dns` (static glibc's NSS has only
    those two built in; docs/release.md, "DNS and NSS").
The user, entrypoint and exposed port come from manifests/Dockerfile's last
stage (USER, ENTRYPOINT, EXPOSE), whose LABEL keys must be this script's;
the Dockerfile builds its image from `--rootfs`, the same tree.

Labels (config and manifests, read by scanners and `crane config`/`docker
inspect`): org.opencontainers.image.{title,description,version,revision,
created,source,url,documentation,licenses,vendor}.

Reproducible: entries sorted, owners 0 (nonroot's home 65532), one fixed mtime
(--created, default SOURCE_DATE_EPOCH or 0), gzip without name or time, JSON
canonical; the same binaries give the same digests (test: hack/test_oci_image.py).
Prints the image index's digest (what `image@sha256:` pins: a runtime picks
its architecture's image from it) and writes it to <out>.digest.
`ctr -n k8s.io images import <out>` names the image from the
io.containerd.image.name annotation (the --name, fully qualified).
"""

import argparse
import datetime
import gzip
import hashlib
import io
import json
import os
import re
import shlex
import struct
import sys
import tarfile

CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
PASSWD = (
    "root:x:0:0:root:/root:/sbin/nologin\n"
    "nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n"
    "nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
)
GROUP = "root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n"
# Static glibc resolves host names with its built-in files and dns services
# only; kcm-rs also forces that order at start (docs/release.md).
NSSWITCH = "hosts: files dns\n"
ENV = [
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt",
]
MANIFEST = "application/vnd.oci.image.manifest.v1+json"
INDEX = "application/vnd.oci.image.index.v1+json"
CONFIG = "application/vnd.oci.image.config.v1+json"
LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"

SOURCE = "https://github.com/kcm-rs/kcm-rs"
LABEL_KEYS = [
    "org.opencontainers.image.title",
    "org.opencontainers.image.description",
    "org.opencontainers.image.version",
    "org.opencontainers.image.revision",
    "org.opencontainers.image.created",
    "org.opencontainers.image.source",
    "org.opencontainers.image.url",
    "org.opencontainers.image.documentation",
    "org.opencontainers.image.licenses",
    "org.opencontainers.image.vendor",
]
DESCRIPTION = (
    "Rust replacement for kube-controller-manager's Job, pod GC, "
    "taint-eviction and disruption controllers"
)

# ELF e_machine -> (OCI architecture, variant, the byte order it must have).
MACHINES = {
    62: ("amd64", None, "little"),
    183: ("arm64", "v8", "little"),
    243: ("riscv64", None, "little"),
    22: ("s390x", None, "big"),
    21: ("ppc64le", None, "little"),
}
PT_DYNAMIC, PT_INTERP = 2, 3
DT_NULL, DT_NEEDED = 0, 1


class Refused(Exception):
    """A binary or an argument the image cannot be made from."""


def slurp(path, mode="rb"):
    with open(path, mode) as f:
        return f.read()


def fail(msg):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(1)


def elf_platform(data, path="binary"):
    """(architecture, variant) of a static 64-bit ELF executable; Refused
    otherwise, saying why."""
    if len(data) < 64 or data[:4] != b"\x7fELF":
        raise Refused(f"{path}: not an ELF file")
    if data[4] != 2:
        raise Refused(f"{path}: a 32-bit ELF (class {data[4]}); images are made for 64-bit architectures only")
    order = {1: "little", 2: "big"}.get(data[5])
    if order is None:
        raise Refused(f"{path}: unknown ELF byte order {data[5]}")
    e = "<" if order == "little" else ">"
    e_type, e_machine = struct.unpack_from(e + "HH", data, 16)
    if e_type not in (2, 3):
        raise Refused(f"{path}: ELF type {e_type} is not an executable")
    if e_machine not in MACHINES:
        raise Refused(f"{path}: ELF machine {e_machine} has no OCI architecture here ({', '.join(a for a, _, _ in MACHINES.values())})")
    arch, variant, want_order = MACHINES[e_machine]
    if order != want_order:
        raise Refused(f"{path}: {arch} with {order}-endian data is not an architecture an OCI runtime runs")
    (phoff,) = struct.unpack_from(e + "Q", data, 32)
    phentsize, phnum = struct.unpack_from(e + "HH", data, 54)
    dynamic = None
    for i in range(phnum):
        off = phoff + i * phentsize
        if off + 56 > len(data):
            raise Refused(f"{path}: truncated program headers")
        p_type, _, p_offset, _, _, p_filesz = struct.unpack_from(e + "IIQQQQ", data, off)
        if p_type == PT_INTERP:
            interp = data[p_offset : p_offset + p_filesz].rstrip(b"\0").decode(errors="replace")
            raise Refused(f"{path}: dynamically linked (interpreter {interp}); the image has no loader or libraries: build it static (make release-bin)")
        if p_type == PT_DYNAMIC:
            dynamic = (p_offset, p_filesz)
    if dynamic:
        off, size = dynamic
        for at in range(off, min(off + size, len(data) - 15), 16):
            tag, _ = struct.unpack_from(e + "qQ", data, at)
            if tag == DT_NULL:
                break
            if tag == DT_NEEDED:
                raise Refused(f"{path}: needs shared libraries (DT_NEEDED); build it static (make release-bin)")
    return arch, variant


def platform_name(arch, variant):
    return f"linux/{arch}" + (f"/{variant}" if variant else "")


def parse_binaries(specs):
    """[(arch, variant, path, bytes)] from `PATH` or `PLATFORM=PATH` specs,
    each architecture from its ELF header; Refused on any mismatch."""
    out, seen = [], {}
    for spec in specs:
        claimed, path = (spec.split("=", 1) if "=" in spec else (None, spec))
        try:
            data = slurp(path)
        except OSError as err:
            raise Refused(f"{path}: {err.strerror}") from err
        arch, variant = elf_platform(data, path)
        if claimed is not None:
            parts = claimed.split("/")
            if len(parts) not in (2, 3) or parts[0] != "linux":
                raise Refused(f"{claimed}: a platform is linux/<arch>[/<variant>]")
            if parts[1] != arch or (len(parts) == 3 and parts[2] != variant):
                raise Refused(f"{path}: its ELF header says {platform_name(arch, variant)}, not {claimed}; refusing to label it so")
        if arch in seen:
            raise Refused(f"{path} and {seen[arch]} are both {arch}: one binary per architecture")
        seen[arch] = path
        out.append((arch, variant, path, data))
    if not out:
        raise Refused("no --binary given")
    return out


def runtime_stage(dockerfile):
    """USER, ENTRYPOINT (its first word: the binary's path), EXPOSE, ENV,
    WORKDIR and the LABEL keys of the Dockerfile's last stage; fails where
    they are not this script's image."""
    text = slurp(dockerfile, "r")
    text = re.sub(r"\\\n", " ", text)
    stages = re.split(r"(?mi)^FROM\s", text)
    last = stages[-1]
    got = {"labels": [], "env": []}
    for line in last.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        word = word.upper()
        if word == "USER":
            got["user"] = rest.strip()
        elif word == "ENTRYPOINT":
            got["entrypoint"] = json.loads(rest)
            got["binary"] = got["entrypoint"][0]
        elif word == "EXPOSE":
            got["ports"] = rest.split()
        elif word == "WORKDIR":
            got["workdir"] = rest.strip()
        elif word == "ENV":
            got["env"] += shlex.split(rest)
        elif word == "LABEL":
            got["labels"] += [kv.split("=", 1)[0] for kv in shlex.split(rest)]
    missing = {"user", "entrypoint", "ports", "workdir"} - got.keys()
    if missing:
        fail(f"{dockerfile}: no {', '.join(sorted(missing))} in its last stage")
    uid = int(got["user"].split(":")[0])
    if got["workdir"] != ("/home/nonroot" if uid == 65532 else "/"):
        fail(f"{dockerfile}: WORKDIR {got['workdir']} is not the user's home")
    if sorted(got["env"]) != sorted(ENV):
        fail(f"{dockerfile}: its ENV {got['env']} is not hack/oci-image.py's {ENV}")
    if sorted(got["labels"]) != sorted(LABEL_KEYS):
        fail(f"{dockerfile}: its LABEL keys {sorted(got['labels'])} are not hack/oci-image.py's {sorted(LABEL_KEYS)}")
    return got


class Layer:
    """A tar built in memory with fixed metadata."""

    def __init__(self, mtime):
        self.mtime = mtime
        self.entries = {}

    def dir(self, path, mode=0o755, uid=0):
        self.entries[path] = ("dir", None, mode, uid)

    def file(self, path, data, mode=0o644, uid=0):
        parts = path.split("/")
        for i in range(1, len(parts)):
            self.entries.setdefault("/".join(parts[:i]), ("dir", None, 0o755, 0))
        self.entries[path] = ("file", data, mode, uid)

    def tar(self):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
            for path in sorted(self.entries):
                kind, data, mode, uid = self.entries[path]
                info = tarfile.TarInfo(path + ("/" if kind == "dir" else ""))
                info.mode, info.uid, info.gid = mode, uid, uid
                info.uname = info.gname = ""
                info.mtime = self.mtime
                if kind == "dir":
                    info.type = tarfile.DIRTYPE
                    t.addfile(info)
                else:
                    info.size = len(data)
                    t.addfile(info, io.BytesIO(data))
        return buf.getvalue()

    def write_tree(self, root):
        """The same entries as files under `root` (the Dockerfile's stage);
        owners are the Dockerfile's COPY --chown, modes as in the tar."""
        for path in sorted(self.entries):
            kind, data, mode, _ = self.entries[path]
            at = os.path.join(root, path)
            if kind == "dir":
                os.makedirs(at, exist_ok=True)
            else:
                with open(at, "wb") as f:
                    f.write(data)
            os.chmod(at, mode)


def rootfs(stage, binary, ca_bundle, mtime):
    """The image's one layer for `binary`."""
    layer = Layer(mtime)
    for d in ["etc", "etc/ssl", "etc/ssl/certs", "home", "tmp", "usr", "usr/local", "usr/local/bin"]:
        layer.dir(d, 0o1777 if d == "tmp" else 0o755)
    layer.dir("home/nonroot", 0o700, 65532)
    layer.file("etc/passwd", PASSWD.encode())
    layer.file("etc/group", GROUP.encode())
    layer.file("etc/nsswitch.conf", NSSWITCH.encode())
    layer.file(CA_BUNDLE.lstrip("/"), ca_bundle)
    layer.file(stage["binary"].lstrip("/"), binary, 0o755)
    return layer


def gz(data):
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as g:
        g.write(data)
    return buf.getvalue()


def sha(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def blob(data, media):
    return {"mediaType": media, "digest": sha(data), "size": len(data)}


def canonical(obj):
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def full_name(name):
    """The fully qualified name containerd's CRI looks up for `name`, and its tag."""
    last = name.split("/")[-1]
    if "@" in last:
        raise Refused(f"--name {name}: a tag, not a digest (the digest is what this script computes)")
    repo, tag = name.rsplit(":", 1) if ":" in last else (name, "latest")
    first = repo.split("/")[0]
    if "/" not in repo:
        repo = f"docker.io/library/{repo}"
    elif not ("." in first or ":" in first or first == "localhost"):
        repo = f"docker.io/{repo}"
    return f"{repo}:{tag}", tag


def labels_for(version, revision, created):
    labels = {
        "org.opencontainers.image.title": "kcm-rs",
        "org.opencontainers.image.description": DESCRIPTION,
        "org.opencontainers.image.version": version,
        "org.opencontainers.image.revision": revision or "unknown",
        "org.opencontainers.image.created": created,
        "org.opencontainers.image.source": SOURCE,
        "org.opencontainers.image.url": SOURCE,
        "org.opencontainers.image.documentation": f"{SOURCE}/blob/main/docs/install.md",
        "org.opencontainers.image.licenses": "Apache-2.0",
        "org.opencontainers.image.vendor": "kcm-rs",
    }
    assert sorted(labels) == sorted(LABEL_KEYS)
    return labels


def build(binaries, name, stage, ca_bundle, created_at, version=None, revision=""):
    """The layout's files {path: bytes} and the image index's digest."""
    when = datetime.datetime.fromtimestamp(created_at, datetime.timezone.utc)
    created = when.strftime("%Y-%m-%dT%H:%M:%SZ")
    full, tag = full_name(name)
    labels = labels_for(version or tag, revision, created)
    blobs, entries = {}, []
    for arch, variant, _, data in sorted(binaries, key=lambda b: b[0]):
        tar = rootfs(stage, data, ca_bundle, created_at).tar()
        layer_gz = gz(tar)
        platform = {"architecture": arch, "os": "linux", **({"variant": variant} if variant else {})}
        config = {
            **platform,
            "created": created,
            "config": {
                "User": stage["user"],
                "Entrypoint": stage["entrypoint"],
                "ExposedPorts": {(p if "/" in p else f"{p}/tcp"): {} for p in stage["ports"]},
                "Env": ENV,
                "WorkingDir": stage["workdir"],
                "Labels": labels,
            },
            "rootfs": {"type": "layers", "diff_ids": [sha(tar)]},
            "history": [{"created": created, "created_by": "hack/oci-image.py"}],
        }
        config_json = canonical(config)
        manifest = {
            "schemaVersion": 2,
            "mediaType": MANIFEST,
            "config": blob(config_json, CONFIG),
            "layers": [blob(layer_gz, LAYER)],
            "annotations": labels,
        }
        manifest_json = canonical(manifest)
        for d in (layer_gz, config_json, manifest_json):
            blobs[sha(d)] = d
        entries.append({**blob(manifest_json, MANIFEST), "platform": platform})
    image_index = canonical({"schemaVersion": 2, "mediaType": INDEX, "manifests": entries, "annotations": labels})
    blobs[sha(image_index)] = image_index
    layout_index = {
        "schemaVersion": 2,
        "mediaType": INDEX,
        "manifests": [
            {
                **blob(image_index, INDEX),
                "annotations": {
                    "io.containerd.image.name": full,
                    "org.opencontainers.image.ref.name": tag,
                },
            }
        ],
    }
    files = {"oci-layout": canonical({"imageLayoutVersion": "1.0.0"}), "index.json": canonical(layout_index)}
    for digest, data in blobs.items():
        files["blobs/sha256/" + digest.split(":")[1]] = data
    return files, sha(image_index)


def archive(files, mtime):
    layout = Layer(mtime)
    for path, data in files.items():
        layout.file(path, data)
    return layout.tar()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--binary", action="append", default=[], metavar="[PLATFORM=]PATH",
                   help="a static kcm-rs binary (repeat: one per architecture); PLATFORM (linux/arm64) is checked against its ELF header")
    p.add_argument("--name", help="image name and tag, e.g. ghcr.io/kcm-rs/kcm-rs:0.2.0")
    p.add_argument("--out", help="the OCI layout archive to write")
    p.add_argument("--rootfs", help="write the layer's tree of the one --binary here instead (the Dockerfile's stage)")
    p.add_argument("--check", metavar="PATH", help="only check that PATH is a static ELF executable; prints its architecture")
    p.add_argument("--dockerfile", default="manifests/Dockerfile")
    p.add_argument("--ca-bundle", default=CA_BUNDLE)
    p.add_argument("--version", help="the label org.opencontainers.image.version (default: the tag)")
    p.add_argument("--revision", default="", help="the source commit (a label)")
    p.add_argument("--created", type=int, default=int(os.environ.get("SOURCE_DATE_EPOCH", "0")))
    a = p.parse_args(argv)

    if a.check:
        try:
            arch, variant = elf_platform(slurp(a.check), a.check)
        except (Refused, OSError) as err:
            fail(str(err))
        print(f"{a.check}: static, {platform_name(arch, variant)}", file=sys.stderr)
        print(arch)
        return
    stage = runtime_stage(a.dockerfile)
    try:
        binaries = parse_binaries(a.binary)
        ca = slurp(a.ca_bundle)
        if a.rootfs:
            if len(binaries) != 1:
                raise Refused("--rootfs takes one --binary (the build platform's)")
            rootfs(stage, binaries[0][3], ca, a.created).write_tree(a.rootfs)
            print(f"{a.rootfs}: {platform_name(*binaries[0][:2])}", file=sys.stderr)
            return
        if not a.name or not a.out:
            raise Refused("--name and --out are needed (or --rootfs)")
        files, digest = build(binaries, a.name, stage, ca, a.created, a.version, a.revision)
    except Refused as err:
        fail(str(err))
    except OSError as err:
        fail(f"{err.filename}: {err.strerror}")
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out + ".tmp", "wb") as f:
        f.write(archive(files, a.created))
    os.replace(a.out + ".tmp", a.out)
    with open(a.out + ".digest", "w", encoding="utf-8") as f:
        f.write(digest + "\n")
    arches = ", ".join(platform_name(a_, v) for a_, v, _, _ in sorted(binaries, key=lambda b: b[0]))
    print(f"{a.out}: {full_name(a.name)[0]} ({arches})", file=sys.stderr)
    print(digest)


if __name__ == "__main__":
    main()
