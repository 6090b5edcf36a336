#!/usr/bin/env python3
"""The pieces of `make release-artifacts` (docs/release.md) that are not a
build, a helm or a cosign call:

  hack/release.py build-info --binary PATH --target TRIPLE --out FILE.json
      what one architecture's binary was built from: its SHA-256, rustc -vV,
      the PGO profile used, the Debian packages linked into it (glibc's and
      libgcc's static libraries) or laid beside it (ca-certificates), and
      the Rust crates compiled into it or used to build it (cargo metadata
      for that target, Cargo.lock's checksums). Made where the binary is
      built (each forge runner), read by `sbom`.
  hack/release.py sbom --version V --image ARCHIVE --build-info F.json... --out FILE.spdx.json
      one SPDX 2.3 document: per architecture the image (its manifest
      digest), every file of its layer with SHA-1 and SHA-256, the binary,
      the crates it statically links (STATIC_LINK) and the ones only its
      build used (BUILD_DEPENDENCY_OF: proc macros, build scripts), glibc,
      libgcc and the Rust standard library; ca-certificates.
  hack/release.py provenance --version V --commit SHA --builder ID --build-info F.json... --out FILE.json
      a SLSA v1 provenance predicate for the release (what cosign
      attest-blob signs for each artifact).
  hack/release.py sums DIR...
      SHA256SUMS lines (sha256sum's format) of the files given.
"""

import argparse
import datetime
import gzip
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tarfile

SOURCE = "https://github.com/kcm-rs/kcm-rs"
BUILD_TYPE = f"{SOURCE}/blob/main/docs/release.md#what-make-release-artifacts-does"


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw).stdout


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def dpkg_package(pkg):
    """{package, version, architecture} of an installed Debian package."""
    version, arch = run(["dpkg-query", "-W", "-f=${Version} ${Architecture}", pkg]).split()
    return {"package": pkg, "version": version, "architecture": arch}


def dpkg_owner(path):
    """The Debian package owning path (dpkg_package)."""
    return dpkg_package(run(["dpkg-query", "-S", os.path.realpath(path)]).split(":")[0].strip())


def debian_release():
    try:
        with open("/etc/os-release", encoding="utf-8") as f:
            fields = dict(line.rstrip("\n").split("=", 1) for line in f if "=" in line)
        return f"{fields.get('ID', '').strip(chr(34))}-{fields.get('VERSION_ID', '').strip(chr(34))}"
    except OSError:
        return "unknown"


def crates(target):
    """The crates of kcm-rs's build for `target`: {id: crate} with `linked`
    (reached from kcm-rs by normal dependencies and not a proc macro: in the
    binary) or not (build scripts' and proc macros' only)."""
    meta = json.loads(run(["cargo", "metadata", "--locked", "--format-version", "1", "--filter-platform", target]))
    lock = {}
    text = open("Cargo.lock", encoding="utf-8").read()
    for block in text.split("[[package]]")[1:]:
        name = re.search(r'(?m)^name = "([^"]+)"', block).group(1)
        version = re.search(r'(?m)^version = "([^"]+)"', block).group(1)
        checksum = re.search(r'(?m)^checksum = "([0-9a-f]+)"', block)
        lock[(name, version)] = checksum.group(1) if checksum else None
    packages = {p["id"]: p for p in meta["packages"]}
    nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
    root = next(p["id"] for p in meta["packages"] if p["name"] == "kcm-rs" and p["source"] is None)
    is_macro = lambda pid: any("proc-macro" in t["kind"] for t in packages[pid]["targets"])
    linked, build = set(), set()
    todo = [(root, True)]
    while todo:
        pid, in_binary = todo.pop()
        seen = linked if in_binary else build
        if pid in seen:
            continue
        seen.add(pid)
        for dep in nodes[pid]["deps"]:
            kinds = {k["kind"] for k in dep["dep_kinds"]}
            if kinds <= {"dev"}:
                continue
            normal = None in kinds
            child_linked = in_binary and normal and not is_macro(dep["pkg"])
            todo.append((dep["pkg"], child_linked))
    out = []
    for pid in sorted(linked | build, key=lambda p: (packages[p]["name"], packages[p]["version"])):
        if pid == root:
            continue
        p = packages[pid]
        out.append({
            "name": p["name"],
            "version": p["version"],
            "license": p.get("license"),
            "source": "workspace" if p["source"] is None else ("registry" if p["source"].startswith("registry+") else p["source"]),
            "sha256": lock.get((p["name"], p["version"])),
            "linked": pid in linked,
        })
    return out


def build_info(args):
    rustc = run(["rustc", "-vV"])
    flags = run(["hack/pgo-flags.sh"]).strip()
    profile = None
    if flags:
        profile = {"path": "pgo/kcm-rs.profdata.gz", "sha256": sha256_file("pgo/kcm-rs.profdata.gz")}
    libgcc = run(["gcc", "-print-libgcc-file-name"]).strip()
    multiarch = run(["gcc", "-print-multiarch"]).strip()
    info = {
        "binary": os.path.basename(args.binary),
        "sha256": sha256_file(args.binary),
        "target": args.target,
        "rustc": dict(line.split(": ", 1) for line in rustc.splitlines()[1:] if ": " in line),
        "pgo": profile,
        "os": debian_release(),
        "static": {
            "glibc": dpkg_owner(f"/usr/lib/{multiarch}/libc.a"),
            "libgcc": dpkg_owner(libgcc),
        },
        # The bundle is update-ca-certificates' output, owned by no package:
        # the package it is made from.
        "ca-certificates": dpkg_package("ca-certificates"),
        "crates": crates(args.target),
    }
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(info, f, indent=1, sort_keys=True)
        f.write("\n")
    n = sum(c["linked"] for c in info["crates"])
    print(f"{args.out}: {info['binary']} ({args.target}), {n} crates linked, {len(info['crates']) - n} build-only", file=sys.stderr)


def spdx_id(*parts):
    return "SPDXRef-" + re.sub(r"[^A-Za-z0-9.-]", "-", "-".join(parts))


def license_expr(text):
    if not text:
        return "NOASSERTION"
    # Cargo's old `A/B` form means either.
    return " OR ".join(p.strip() for p in text.split("/")) if "/" in text else text


def image_layout(archive):
    """{arch: (manifest digest, [(path, bytes)] of its layer's files)} and the index digest."""
    with tarfile.open(archive) as t:
        blob = lambda d: t.extractfile("blobs/sha256/" + d.split(":")[1]).read()
        top = json.loads(t.extractfile("index.json").read())["manifests"][0]
        out = {}
        for m in json.loads(blob(top["digest"]))["manifests"]:
            manifest = json.loads(blob(m["digest"]))
            files = []
            for layer in manifest["layers"]:
                with tarfile.open(fileobj=io.BytesIO(gzip.decompress(blob(layer["digest"])))) as lt:
                    for e in lt.getmembers():
                        if e.isfile():
                            files.append((e.name, lt.extractfile(e).read()))
            out[m["platform"]["architecture"]] = (m["digest"], files)
        return top["digest"], out


def deb_purl(d, arch):
    version = d["version"].replace("+", "%2B").replace(":", "%3A")
    return f"pkg:deb/debian/{d['package']}@{version}?arch={arch}"


def sbom(args):
    infos = []
    for path in args.build_info:
        with open(path, encoding="utf-8") as f:
            infos.append(json.load(f))
    index_digest, images = image_layout(args.image)
    created = datetime.datetime.fromtimestamp(args.created, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    packages, files, rels, seen = [], [], [], set()
    doc_id = "SPDXRef-DOCUMENT"

    def package(pid, name, version, purl=None, checksums=(), license_declared="NOASSERTION", comment=None, **extra):
        if pid in seen:
            return pid
        seen.add(pid)
        p = {
            "SPDXID": pid,
            "name": name,
            "versionInfo": version,
            "downloadLocation": extra.pop("download", "NOASSERTION"),
            "filesAnalyzed": False,
            "licenseConcluded": "NOASSERTION",
            "licenseDeclared": license_declared,
            "copyrightText": "NOASSERTION",
            "supplier": "NOASSERTION",
        }
        if checksums:
            p["checksums"] = [{"algorithm": "SHA256", "checksumValue": c} for c in checksums]
        if purl:
            p["externalRefs"] = [{"referenceCategory": "PACKAGE-MANAGER", "referenceType": "purl", "referenceLocator": purl}]
        if comment:
            p["comment"] = comment
        p.update(extra)
        packages.append(p)
        return p["SPDXID"]

    by_sha = {i["sha256"]: i for i in infos}
    top = package(spdx_id("image-index"), "kcm-rs image index", args.version,
                  purl=f"pkg:oci/kcm-rs@{index_digest.replace(':', '%3A')}?repository_url={args.repository}&tag={args.version}",
                  comment=f"The OCI image index {args.repository}:{args.version}@{index_digest}", license_declared="Apache-2.0")
    rels.append({"spdxElementId": doc_id, "relationshipType": "DESCRIBES", "relatedSpdxElement": top})
    for arch, (digest, layer_files) in sorted(images.items()):
        img = package(spdx_id("image", arch), f"kcm-rs image linux/{arch}", args.version,
                      purl=f"pkg:oci/kcm-rs@{digest.replace(':', '%3A')}?arch={arch}&repository_url={args.repository}",
                      comment=f"Image manifest {digest} of the index", license_declared="Apache-2.0")
        rels.append({"spdxElementId": top, "relationshipType": "CONTAINS", "relatedSpdxElement": img})
        # The image's files are listed: an analysed package, with SPDX's
        # verification code (SHA-1 over its files' sorted SHA-1s).
        sha1s = sorted(hashlib.sha1(data).hexdigest() for _, data in layer_files)
        img_pkg = next(p for p in packages if p["SPDXID"] == img)
        img_pkg["filesAnalyzed"] = True
        img_pkg["packageVerificationCode"] = {"packageVerificationCodeValue": hashlib.sha1("".join(sha1s).encode()).hexdigest()}
        img_pkg["licenseInfoFromFiles"] = ["NOASSERTION"]
        for path, data in sorted(layer_files):
            fid = spdx_id("file", arch, path)
            files.append({
                "SPDXID": fid,
                "fileName": "./" + path,
                "checksums": [
                    {"algorithm": "SHA1", "checksumValue": hashlib.sha1(data).hexdigest()},
                    {"algorithm": "SHA256", "checksumValue": hashlib.sha256(data).hexdigest()},
                ],
                "licenseConcluded": "NOASSERTION",
                "copyrightText": "NOASSERTION",
            })
            rels.append({"spdxElementId": img, "relationshipType": "CONTAINS", "relatedSpdxElement": fid})
            info = by_sha.get(hashlib.sha256(data).hexdigest())
            if info:
                binary = package(spdx_id("kcm-rs", arch), "kcm-rs", args.version, checksums=[info["sha256"]],
                                 purl=f"pkg:github/kcm-rs/kcm-rs@v{args.version}", license_declared="Apache-2.0",
                                 comment=f"{info['target']}, statically linked, rustc {info['rustc'].get('release')} (LLVM {info['rustc'].get('LLVM version')}), PGO {'on' if info['pgo'] else 'off'}",
                                 download=SOURCE, packageFileName=info["binary"])
                rels.append({"spdxElementId": fid, "relationshipType": "GENERATED_FROM", "relatedSpdxElement": binary})
                rels.append({"spdxElementId": img, "relationshipType": "CONTAINS", "relatedSpdxElement": binary})
                std = package(spdx_id("rust-std", info["rustc"]["release"], arch), "rust-std", info["rustc"]["release"],
                              license_declared="MIT OR Apache-2.0", purl=f"pkg:generic/rust-std@{info['rustc']['release']}?arch={arch}")
                rels.append({"spdxElementId": binary, "relationshipType": "STATIC_LINK", "relatedSpdxElement": std})
                for what, lic in (("glibc", "LGPL-2.1-or-later"), ("libgcc", "GPL-3.0-or-later WITH GCC-exception-3.1")):
                    d = info["static"][what]
                    deb = package(spdx_id("deb", d["package"], d["version"], d["architecture"]), d["package"], d["version"],
                                  purl=deb_purl(d, d["architecture"]), license_declared=lic,
                                  comment=f"{what}'s static libraries ({info['os']}), linked into the binary")
                    rels.append({"spdxElementId": binary, "relationshipType": "STATIC_LINK", "relatedSpdxElement": deb})
                for c in info["crates"]:
                    cid = package(spdx_id("crate", c["name"], c["version"]), c["name"], c["version"],
                                  purl=f"pkg:cargo/{c['name']}@{c['version']}" if c["source"] == "registry" else None,
                                  checksums=[c["sha256"]] if c["sha256"] else (), license_declared=license_expr(c["license"]))
                    if c["linked"]:
                        rels.append({"spdxElementId": binary, "relationshipType": "STATIC_LINK", "relatedSpdxElement": cid})
                    else:
                        rels.append({"spdxElementId": cid, "relationshipType": "BUILD_DEPENDENCY_OF", "relatedSpdxElement": binary})
            elif path == "etc/ssl/certs/ca-certificates.crt" and infos and infos[0].get("ca-certificates"):
                d = infos[0]["ca-certificates"]
                ca = package(spdx_id("deb", d["package"], d["version"]), d["package"], d["version"],
                             purl=deb_purl(d, "all"), license_declared="MPL-2.0",
                             comment="Mozilla's CA bundle as Debian's update-ca-certificates writes it")
                rels.append({"spdxElementId": fid, "relationshipType": "GENERATED_FROM", "relatedSpdxElement": ca})
                rels.append({"spdxElementId": img, "relationshipType": "CONTAINS", "relatedSpdxElement": ca})
    missing = {i["sha256"] for i in infos} - {p["checksums"][0]["checksumValue"] for p in packages if p["name"] == "kcm-rs" and p.get("checksums")}
    if missing:
        sys.exit(f"error: the image holds no binary with SHA-256 {', '.join(sorted(missing))}: the build infos are not this image's")
    doc = {
        "spdxVersion": "SPDX-2.3",
        "dataLicense": "CC0-1.0",
        "SPDXID": doc_id,
        "name": f"kcm-rs-{args.version}",
        "documentNamespace": f"{SOURCE}/releases/v{args.version}/sbom/{index_digest.split(':')[1]}",
        "creationInfo": {"created": created, "creators": ["Tool: kcm-rs hack/release.py", "Organization: kcm-rs"]},
        "packages": packages,
        "files": files,
        "relationships": rels,
    }
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    crates_n = len([p for p in packages if p["SPDXID"].startswith("SPDXRef-crate-")])
    print(f"{args.out}: {len(images)} image(s), {len(files)} files, {crates_n} crates, {len(packages)} packages", file=sys.stderr)


def provenance(args):
    infos = []
    for path in args.build_info:
        with open(path, encoding="utf-8") as f:
            infos.append(json.load(f))
    deps = [{"uri": f"git+{SOURCE}@refs/tags/v{args.version}", "digest": {"gitCommit": args.commit}}]
    for i in infos:
        deps.append({"name": f"rustc {i['target']}", "annotations": {"rustc": i["rustc"], "os": i["os"], "static": i["static"]}})
        if i["pgo"]:
            deps.append({"name": i["pgo"]["path"], "digest": {"sha256": i["pgo"]["sha256"]}})
    deps.append({"name": "Cargo.lock", "digest": {"sha256": sha256_file("Cargo.lock")}})
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    predicate = {
        "buildDefinition": {
            "buildType": BUILD_TYPE,
            "externalParameters": {"version": args.version, "target": "make release-artifacts",
                                   "source": {"uri": f"git+{SOURCE}", "digest": {"gitCommit": args.commit}}},
            "internalParameters": {"targets": [i["target"] for i in infos], "binaries": {i["binary"]: i["sha256"] for i in infos}},
            "resolvedDependencies": deps,
        },
        "runDetails": {
            "builder": {"id": args.builder},
            "metadata": {"invocationId": args.invocation or args.builder, "startedOn": args.started or now, "finishedOn": now},
        },
    }
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(predicate, f, indent=1, sort_keys=True)
        f.write("\n")


def sums(args):
    for path in args.files:
        print(f"{sha256_file(path)}  {os.path.basename(path)}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build-info")
    b.add_argument("--binary", required=True)
    b.add_argument("--target", required=True)
    b.add_argument("--out", required=True)
    s = sub.add_parser("sbom")
    s.add_argument("--version", required=True)
    s.add_argument("--repository", required=True)
    s.add_argument("--image", required=True)
    s.add_argument("--build-info", nargs="+", required=True)
    s.add_argument("--created", type=int, default=int(os.environ.get("SOURCE_DATE_EPOCH", "0")))
    s.add_argument("--out", required=True)
    v = sub.add_parser("provenance")
    v.add_argument("--version", required=True)
    v.add_argument("--commit", required=True)
    v.add_argument("--builder", required=True)
    v.add_argument("--invocation", default="")
    v.add_argument("--started", default="")
    v.add_argument("--build-info", nargs="+", required=True)
    v.add_argument("--out", required=True)
    m = sub.add_parser("sums")
    m.add_argument("files", nargs="+")
    a = p.parse_args()
    {"build-info": build_info, "sbom": sbom, "provenance": provenance, "sums": sums}[a.cmd](a)


if __name__ == "__main__":
    main()
