#!/usr/bin/env python3
"""kcm-rs's container image without a container engine: an OCI image layout
archive (oci-layout, index.json, blobs/sha256/...) from a kcm-rs binary.

  hack/oci-image.py --binary target/pgo/release/kcm-rs --name kcm-rs:0.1.0 \
      --out target/image/kcm-rs-0.1.0.oci.tar [--revision <commit>]

`make image-oci` runs it on the release binary. The one layer holds what
manifests/Dockerfile's runtime image (gcr.io/distroless/cc-debian12:nonroot)
gives the binary, read from this machine:
  - the binary where the Dockerfile copies it (its COPY destination);
  - the shared libraries it links (ldd: libc.so.6, libm.so.6, libgcc_s.so.1)
    as regular files in /lib/x86_64-linux-gnu, a default search directory
    of the loader (no ld.so.cache needed), and the loader itself as a
    regular file at the binary's interpreter path (/lib64/ld-linux-x86-64.so.2;
    on Debian that path is a symlink, which would dangle in the image);
  - /etc/passwd and /etc/group with root and nonroot (65532), /home/nonroot,
    /tmp, and the CA bundle /etc/ssl/certs/ca-certificates.crt (as distroless).
The user, entrypoint and exposed port come from the Dockerfile's USER,
ENTRYPOINT and EXPOSE, so the two images cannot drift apart.

Reproducible: entries sorted, owners 0 (nonroot's home 65532), one fixed mtime
(--created, default SOURCE_DATE_EPOCH or 0), gzip without name or time;
the same inputs give the same digest. Prints the manifest digest (what a
kubelet reports and `image@sha256:` pins) and writes it to <out>.digest.
`ctr -n k8s.io images import <out>` names the image from the
io.containerd.image.name annotation (docker.io/library/kcm-rs:0.1.0 for
kcm-rs:0.1.0, the name a pod's `image: kcm-rs:0.1.0` resolves to).
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
import subprocess
import sys
import tarfile

LIB_DIR = "lib/x86_64-linux-gnu"
CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
PASSWD = (
    "root:x:0:0:root:/root:/sbin/nologin\n"
    "nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n"
    "nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
)
GROUP = "root:x:0:\nnobody:x:65534:\ntty:x:5:\nstaff:x:50:\nnonroot:x:65532:\n"
ENV = [
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt",
]
MANIFEST = "application/vnd.oci.image.manifest.v1+json"
INDEX = "application/vnd.oci.image.index.v1+json"
CONFIG = "application/vnd.oci.image.config.v1+json"
LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"


def fail(msg):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(1)


def runtime_stage(dockerfile):
    """USER, ENTRYPOINT, EXPOSE and the binary's path in the Dockerfile's
    last stage."""
    text = open(dockerfile, encoding="utf-8").read()
    text = re.sub(r"\\\n", " ", text)
    stages = re.split(r"(?mi)^FROM\s", text)
    last = stages[-1]
    got = {}
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
        elif word == "EXPOSE":
            got["ports"] = rest.split()
        elif word == "COPY" and "kcm-rs" in rest:
            got["binary"] = shlex.split(rest)[-1]
    missing = {"user", "entrypoint", "ports", "binary"} - got.keys()
    if missing:
        fail(f"{dockerfile}: no {', '.join(sorted(missing))} in its last stage")
    if got["entrypoint"][0] != got["binary"]:
        fail(f"{dockerfile}: ENTRYPOINT {got['entrypoint']} is not the copied binary {got['binary']}")
    return got


def linked(binary):
    """(path the binary names, real file) for the loader and each library."""
    out = subprocess.run(["ldd", binary], capture_output=True, text=True)
    if out.returncode != 0:
        fail(f"ldd {binary}: {out.stderr.strip() or out.stdout.strip()} (a static binary needs no libraries: drop them here)")
    libs, loader = [], None
    for line in out.stdout.splitlines():
        line = line.strip()
        if "=>" in line:
            name, _, rest = line.partition("=>")
            path = rest.split("(")[0].strip()
            if not path or path == "not found":
                fail(f"{binary}: {name.strip()} not found on this machine")
            libs.append((f"{LIB_DIR}/{os.path.basename(path)}", os.path.realpath(path)))
        elif line.startswith("/"):
            path = line.split("(")[0].strip()
            loader = (path.lstrip("/"), os.path.realpath(path))
    if loader is None:
        fail(f"{binary}: no ELF interpreter in ldd's output")
    return [loader] + libs


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
    """The name containerd's CRI looks up for `name` (docker.io/library/...)."""
    repo, _, tag = name.rpartition(":") if ":" in name.split("/")[-1] else (name, "", "latest")
    first = repo.split("/")[0]
    if "/" not in repo:
        repo = f"docker.io/library/{repo}"
    elif not ("." in first or ":" in first or first == "localhost"):
        repo = f"docker.io/{repo}"
    return f"{repo}:{tag}", tag


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--binary", required=True)
    p.add_argument("--name", required=True, help="image name and tag, e.g. kcm-rs:0.1.0")
    p.add_argument("--out", required=True, help="the OCI layout archive to write")
    p.add_argument("--dockerfile", default="manifests/Dockerfile")
    p.add_argument("--revision", default="", help="the source commit (a label)")
    p.add_argument("--created", type=int, default=int(os.environ.get("SOURCE_DATE_EPOCH", "0")))
    a = p.parse_args()

    stage = runtime_stage(a.dockerfile)
    uid = int(stage["user"].split(":")[0])
    layer = Layer(a.created)
    for d in ["etc", "home", "tmp", "usr", "usr/local", "usr/local/bin", "lib", LIB_DIR, "lib64"]:
        layer.dir(d, 0o1777 if d == "tmp" else 0o755)
    layer.dir("home/nonroot", 0o700, 65532)
    layer.file("etc/passwd", PASSWD.encode())
    layer.file("etc/group", GROUP.encode())
    layer.file(CA_BUNDLE.lstrip("/"), open(CA_BUNDLE, "rb").read())
    layer.file(stage["binary"].lstrip("/"), open(a.binary, "rb").read(), 0o755)
    for at, real in linked(a.binary):
        layer.file(at, open(real, "rb").read(), 0o755)
    tar = layer.tar()
    layer_gz = gz(tar)

    when = datetime.datetime.fromtimestamp(a.created, datetime.timezone.utc)
    created = when.strftime("%Y-%m-%dT%H:%M:%SZ")
    name, tag = full_name(a.name)
    labels = {"org.opencontainers.image.title": "kcm-rs", "org.opencontainers.image.version": tag}
    if a.revision:
        labels["org.opencontainers.image.revision"] = a.revision
    config = {
        "architecture": "amd64",
        "os": "linux",
        "created": created,
        "config": {
            "User": stage["user"],
            "Entrypoint": stage["entrypoint"],
            "ExposedPorts": {(port if "/" in port else f"{port}/tcp"): {} for port in stage["ports"]},
            "Env": ENV,
            "WorkingDir": "/home/nonroot" if uid == 65532 else "/",
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
        "annotations": {"org.opencontainers.image.created": created, **labels},
    }
    manifest_json = canonical(manifest)
    index = {
        "schemaVersion": 2,
        "mediaType": INDEX,
        "manifests": [
            {
                **blob(manifest_json, MANIFEST),
                "platform": {"architecture": "amd64", "os": "linux"},
                "annotations": {
                    "io.containerd.image.name": name,
                    "org.opencontainers.image.ref.name": tag,
                },
            }
        ],
    }
    files = {
        "oci-layout": canonical({"imageLayoutVersion": "1.0.0"}),
        "index.json": canonical(index),
    }
    for data in (layer_gz, config_json, manifest_json):
        files["blobs/sha256/" + sha(data).split(":")[1]] = data
    archive = Layer(a.created)
    for path, data in files.items():
        archive.file(path, data)
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out + ".tmp", "wb") as f:
        f.write(archive.tar())
    os.replace(a.out + ".tmp", a.out)
    digest = sha(manifest_json)
    with open(a.out + ".digest", "w", encoding="utf-8") as f:
        f.write(digest + "\n")
    mib = len(layer_gz) / 2**20
    print(f"{a.out}: {name} ({mib:.1f} MiB compressed layer)", file=sys.stderr)
    print(digest)


if __name__ == "__main__":
    main()
