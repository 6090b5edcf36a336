#!/usr/bin/env python3
"""The release's bookkeeping, checked without git history (CI's clean clone
may be shallow) and without a network:

  hack/release-checks.py check            (make release-checks, part of make test)
  hack/release-checks.py record-chart     (make chart-version: after a version bump)
  hack/release-checks.py notes VERSION    (the CHANGELOG section of VERSION, for release notes)

`check` fails, saying what to do, when:
  - charts/kcm-rs changed (any file it packages, manifests/monitoring through
    its files/monitoring link included) while its version did not: every
    version's files are recorded by digest in charts/kcm-rs-versions.txt;
  - the chart's version is not recorded there, is not semver, or is not above
    every recorded one;
  - charts/kcm-rs/UPGRADING.md has no section for the chart's version;
  - the image repository is not the Makefile's IMAGE_REPOSITORY in the
    chart's values.yaml and manifests/base/kustomization.yaml;
  - a KCM flag in the docs switches off kcm-rs's controllers but drops
    bootstrapsigner,tokencleaner (kubeadm turns them on; `*` does not
    include them, so join tokens would stop working);
  - release/cosign.pub is not a PEM public key;
  - CHANGELOG.md is not Keep a Changelog: `## [Unreleased]` first, then
    `## [X.Y.Z] - YYYY-MM-DD` sections, newest first, each with its link
    reference at the bottom.
"""

import datetime
import hashlib
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHART = "charts/kcm-rs"
VERSIONS = "charts/kcm-rs-versions.txt"
SEMVER = re.compile(r"^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$")


class Problem(Exception):
    pass


def read(path, root=ROOT):
    with open(os.path.join(root, path), encoding="utf-8") as f:
        return f.read()


def semver(v):
    m = SEMVER.match(v)
    if not m:
        raise Problem(f"{v!r} is not a version X.Y.Z")
    return tuple(int(x) for x in m.groups())


def chart_version(root=ROOT):
    m = re.search(r"(?m)^version:\s*\"?([^\"\s]+)\"?\s*$", read(f"{CHART}/Chart.yaml", root))
    if not m:
        raise Problem(f"{CHART}/Chart.yaml: no version")
    return m.group(1)


def chart_digest(root=ROOT):
    """sha256 over every file helm packages from the chart directory (links
    followed, as `helm package` does), by relative path."""
    h = hashlib.sha256()
    base = os.path.join(root, CHART)
    paths = []
    for d, _, files in os.walk(base, followlinks=True):
        paths += [os.path.relpath(os.path.join(d, f), base) for f in files]
    for rel in sorted(paths):
        with open(os.path.join(base, rel), "rb") as f:
            data = f.read()
        h.update(rel.encode() + b"\0" + str(len(data)).encode() + b"\0" + data)
    return "sha256:" + h.hexdigest()


def recorded(root=ROOT):
    """[(version, digest)] of charts/kcm-rs-versions.txt, in file order."""
    out = []
    for n, line in enumerate(read(VERSIONS, root).splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) != 2 or not parts[1].startswith("sha256:"):
            raise Problem(f"{VERSIONS}:{n}: want `<version> sha256:<hex>`, got {line!r}")
        semver(parts[0])
        out.append((parts[0], parts[1]))
    return out


def check_chart(root=ROOT):
    version, digest = chart_version(root), chart_digest(root)
    semver(version)
    lines = recorded(root)
    known = dict(lines)
    versions = [semver(v) for v, _ in lines]
    if versions != sorted(set(versions)):
        raise Problem(f"{VERSIONS}: versions must rise line by line, each once")
    if version not in known:
        newest = lines[-1][0] if lines else None
        if newest and semver(version) <= semver(newest):
            raise Problem(f"{CHART}/Chart.yaml version {version} is not above the last recorded {newest}: bump it above")
        raise Problem(f"chart version {version} is not recorded: run `make chart-version` to add it to {VERSIONS}")
    if known[version] != digest:
        raise Problem(
            f"{CHART} changed since version {version} was recorded ({known[version]}, now {digest}): "
            f"bump `version` in {CHART}/Chart.yaml above {lines[-1][0]}, say what changed in {CHART}/UPGRADING.md, "
            f"then run `make chart-version`"
        )
    if version != lines[-1][0]:
        raise Problem(f"{CHART}/Chart.yaml version {version} is not the newest recorded ({lines[-1][0]})")
    upgrading = read(f"{CHART}/UPGRADING.md", root)
    if not re.search(rf"(?m)^## {re.escape(version)}\b", upgrading):
        raise Problem(f"{CHART}/UPGRADING.md has no `## {version}` section: say what an upgrade to it changes")
    return version


def record_chart(root=ROOT):
    version, digest = chart_version(root), chart_digest(root)
    semver(version)
    lines = recorded(root)
    known = dict(lines)
    if known.get(version) == digest:
        print(f"{VERSIONS}: {version} {digest} already recorded")
        return
    if version in known:
        raise Problem(f"{version} is recorded with other files ({known[version]}): bump the chart's version instead")
    if lines and semver(version) <= semver(lines[-1][0]):
        raise Problem(f"{version} is not above the last recorded {lines[-1][0]}")
    with open(os.path.join(root, VERSIONS), "a", encoding="utf-8") as f:
        f.write(f"{version} {digest}\n")
    print(f"{VERSIONS}: recorded {version} {digest}")


def check_image_repository(root=ROOT):
    m = re.search(r"(?m)^IMAGE_REPOSITORY\s*:?=\s*(\S+)\s*$", read("Makefile", root))
    if not m:
        raise Problem("Makefile: no IMAGE_REPOSITORY")
    repo = m.group(1)
    values = read(f"{CHART}/values.yaml", root)
    got = re.search(r"(?m)^image:\n(?:  #.*\n)*  repository:\s*(\S+)", values)
    if not got or got.group(1) != repo:
        raise Problem(f"{CHART}/values.yaml image.repository is {got and got.group(1)}, not the Makefile's IMAGE_REPOSITORY {repo}")
    kust = read("manifests/base/kustomization.yaml", root)
    got = re.search(r"(?m)^  newName:\s*(\S+)", kust)
    if not got or got.group(1) != repo:
        raise Problem(f"manifests/base/kustomization.yaml newName is {got and got.group(1)}, not the Makefile's IMAGE_REPOSITORY {repo}")
    return repo


HEAD = re.compile(r"^## \[(?P<v>[^\]]+)\](?: - (?P<d>\S+))?\s*$")


def changelog_sections(text):
    """[(version, date, body)] of a Keep a Changelog file; Problem if it is not one."""
    sections, current = [], None
    for line in text.splitlines():
        if line.startswith("## "):
            m = HEAD.match(line)
            if not m:
                raise Problem(f"CHANGELOG.md: {line!r} is not `## [Unreleased]` or `## [X.Y.Z] - YYYY-MM-DD`")
            current = [m.group("v"), m.group("d"), []]
            sections.append(current)
        elif current is not None and not re.match(r"^\[[^\]]+\]: ", line):
            current[2].append(line)
    if not sections or sections[0][0] != "Unreleased" or sections[0][1]:
        raise Problem("CHANGELOG.md: the first section must be `## [Unreleased]`")
    last = None
    for v, d, _ in sections[1:]:
        key = semver(v)
        try:
            datetime.date.fromisoformat(d or "")
        except ValueError:
            raise Problem(f"CHANGELOG.md: [{v}] needs its release date, `## [{v}] - YYYY-MM-DD`") from None
        if last is not None and key >= last:
            raise Problem(f"CHANGELOG.md: [{v}] is not below the section before it (newest first)")
        last = key
    links = set(re.findall(r"(?m)^\[([^\]]+)\]: \S+", text))
    missing = [v for v, _, _ in sections if v not in links]
    if missing:
        raise Problem(f"CHANGELOG.md: no link reference for {', '.join(missing)} (`[X.Y.Z]: <compare URL>` at the bottom)")
    return [(v, d, "\n".join(b).strip() + "\n") for v, d, b in sections]


def notes(version, root=ROOT):
    for v, d, body in changelog_sections(read("CHANGELOG.md", root)):
        if v == version:
            return f"## kcm-rs {v} ({d})\n\n{body}"
    raise Problem(f"CHANGELOG.md has no `## [{version}] - YYYY-MM-DD` section: move the Unreleased entries under it")


KCM_DOCS = ["README.md", "docs", "manifests", "charts/kcm-rs/templates/NOTES.txt"]


def check_kcm_flags(root=ROOT):
    """Every `--controllers=*,...` that switches a kcm-rs controller off in
    the docs keeps bootstrapsigner,tokencleaner; returns how many."""
    files = []
    for entry in KCM_DOCS:
        at = os.path.join(root, entry)
        if os.path.isdir(at):
            for d, _, names in os.walk(at):
                files += [os.path.join(d, n) for n in names if n.endswith((".md", ".yaml", ".txt"))]
        elif os.path.exists(at):
            files.append(at)
    seen = 0
    for path in sorted(files):
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                for flag in re.findall(r"--controllers=\*,[^\s`'\"]*", line):
                    if "-job-controller" not in flag and "{{" not in line:
                        continue
                    seen += 1
                    if "bootstrapsigner,tokencleaner" not in flag:
                        rel = os.path.relpath(path, root)
                        raise Problem(f"{rel}:{n}: {flag} drops bootstrapsigner,tokencleaner (kubeadm's join tokens need them): --controllers=*,bootstrapsigner,tokencleaner,-job-controller,...")
    return seen


def check_release_key(root=ROOT):
    """release/cosign.pub: one PEM public key (what users verify releases with)."""
    text = read("release/cosign.pub", root)
    m = re.fullmatch(r"-----BEGIN PUBLIC KEY-----\n([A-Za-z0-9+/=\n]+)-----END PUBLIC KEY-----\n?", text)
    if not m:
        raise Problem("release/cosign.pub is not one PEM public key (cosign generate-key-pair's cosign.pub)")
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def check(root=ROOT):
    out = [f"chart {check_chart(root)} recorded, UPGRADING.md has it"]
    out.append(f"release/cosign.pub is a PEM public key (sha256 {check_release_key(root)}...)")
    out.append(f"{check_kcm_flags(root)} KCM --controllers flags in the docs keep bootstrapsigner,tokencleaner")
    out.append(f"image repository {check_image_repository(root)} in Makefile, values.yaml, kustomization")
    n = len(changelog_sections(read("CHANGELOG.md", root))) - 1
    out.append(f"CHANGELOG.md: Unreleased and {n} release(s), Keep a Changelog")
    return out


def main(argv):
    try:
        if argv[:1] == ["check"]:
            for line in check():
                print(f"release-checks: {line}")
        elif argv[:1] == ["record-chart"]:
            record_chart()
        elif argv[:1] == ["notes"] and len(argv) == 2:
            sys.stdout.write(notes(argv[1]))
        elif argv[:1] == ["chart-digest"]:
            print(chart_digest())
        else:
            print(__doc__, file=sys.stderr)
            return 2
    except Problem as p:
        print(f"error: {p}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
