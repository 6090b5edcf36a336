#!/usr/bin/env bash
# make release-artifacts VERSION=X.Y.Z: everything a release publishes, in
# dist/ (docs/release.md, "What make release-artifacts does"):
#   kcm-rs-V-linux-<arch>                 static binaries (one per architecture)
#   kcm-rs-V-linux-<arch>.build-info.json what each was built from
#   kcm-rs-V.oci.tar                      OCI image layout: the image index
#   kcm-rs-V.image-digest                 the index's digest (what to pin)
#   kcm-rs-chart-<chart version>.tgz      the chart, image pinned by digest
#   kcm-rs-V.spdx.json                    SPDX SBOM: crates, static libraries, image files
#   kcm-rs-V.provenance.json              SLSA v1 provenance predicate
#   RELEASE-NOTES.md                      the CHANGELOG section, digests, how to verify
#   SHA256SUMS                            of all of the above
#   <file>.sigstore.json                  cosign signature bundle of each file above and SHA256SUMS
#   <file>.intoto.json                    cosign provenance attestation of each binary, image, chart
# Signed with COSIGN_KEY (a path, or env://COSIGN_PRIVATE_KEY on the forge;
# COSIGN_PASSWORD its password), then every signature and attestation is
# verified offline against release/cosign.pub. COSIGN_KEY=ephemeral signs
# with a throwaway pair (a dry run: such a dist/ does not verify with
# release/cosign.pub, and says so).
#
# Binaries: the host's architecture is built here (make release-bin);
# RELEASE_BINARIES_FROM=DIR takes kcm-rs-V-linux-* and their build-info
# files from DIR instead (the forge's per-architecture jobs).
#
# usage: hack/release-artifacts.sh VERSION WORKSPACE_VERSION
set -euo pipefail
cd "$(dirname "$0")/.."
version="${1:?usage: $0 VERSION WORKSPACE_VERSION}"
workspace="${2:?usage: $0 VERSION WORKSPACE_VERSION}"
make="${MAKE:-make}"
repo="$($make -s print-image-repository)"
dist=dist
tools=target/release-tools
helm=target/e2e-bin/kcm-e2e-helm
started="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
say() { echo "release-artifacts: $*" >&2; }
die() { echo "error: $*" >&2; exit 1; }

# 1. What the release is: the workspace's version, a CHANGELOG section, the
#    chart's bookkeeping, a clean tree at one commit.
[[ "$version" == "$workspace" ]] || die "VERSION=$version is not the workspace version $workspace (Cargo.toml [workspace.package] version): bump it, move the CHANGELOG's Unreleased entries under [$version], commit, then run again"
python3 hack/release-checks.py check >&2
python3 hack/release-checks.py notes "$version" >/dev/null
commit="$(git rev-parse HEAD)"
if [[ -n "$(git status --porcelain --untracked-files=no)" ]]; then
  [[ "${ALLOW_DIRTY:-}" == 1 ]] || die "the work tree has uncommitted changes: a release is made from one commit (ALLOW_DIRTY=1 for a trial)"
  say "warning: uncommitted changes (ALLOW_DIRTY=1): this dist/ is not the commit $commit's"
fi
# Every timestamp is the commit's; passed to each tool rather than exported,
# since cargo would see it: the cc crate reruns build scripts when
# SOURCE_DATE_EPOCH changes, rebuilding ring and all above it at each commit.
epoch="$(git log -1 --format=%ct HEAD)"
chart_version="$(sed -n 's/^version: *//p' charts/kcm-rs/Chart.yaml)"

# 2. The tools: helm (as make test builds it), cosign and crane.
e2e/harness/helm/build.sh target/e2e-bin
hack/release-tools/build.sh "$tools"
cosign="$tools/cosign"

rm -rf "$dist"
mkdir -p "$dist"

# 3. The binaries.
if [[ -n "${RELEASE_BINARIES_FROM:-}" ]]; then
  cp "$RELEASE_BINARIES_FROM"/kcm-rs-"$version"-linux-* "$dist"/
else
  $make --no-print-directory release-binary VERSION="$version" >&2
fi
binaries=()
for b in "$dist"/kcm-rs-"$version"-linux-*; do
  [[ "$b" == *.build-info.json ]] && continue
  [[ -f "$b.build-info.json" ]] || die "$b has no $b.build-info.json (make release-binary writes both)"
  arch="${b##*-linux-}"
  binaries+=("linux/$arch=$b")
done
(( ${#binaries[@]} )) || die "no binaries kcm-rs-$version-linux-* in $dist"

# 4. The image index, each image's architecture checked against its binary.
image_args=()
for b in "${binaries[@]}"; do image_args+=(--binary "$b"); done
python3 hack/oci-image.py "${image_args[@]}" --name "$repo:$version" --version "$version" \
  --out "$dist/kcm-rs-$version.oci.tar" --revision "$(git rev-parse --short=12 HEAD)" --created "$epoch" >/dev/null
mv "$dist/kcm-rs-$version.oci.tar.digest" "$dist/kcm-rs-$version.image-digest"
digest="$(cat "$dist/kcm-rs-$version.image-digest")"

# 5. The chart, pinned to that index by digest (the repository's chart keeps
#    digest empty), linted and rendered.
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp -rL charts/kcm-rs "$work/kcm-rs"
python3 - "$work/kcm-rs/values.yaml" "$digest" <<'EOF'
import re, sys
path, digest = sys.argv[1:]
text = open(path, encoding="utf-8").read()
new, n = re.subn(r'(?m)^(image:\n(?:  .*\n)*?  digest: )""', lambda m: f'{m.group(1)}"{digest}"', text, count=1)
assert n == 1, "values.yaml: no image.digest to pin"
open(path, "w", encoding="utf-8").write(new)
EOF
"$helm" lint --strict "$work/kcm-rs" >&2
"$helm" template kcm-rs "$work/kcm-rs" -n kcm-system | grep -q "image: \"$repo:$version@$digest\"" ||
  die "the packaged chart does not render image $repo:$version@$digest"
"$helm" package "$work/kcm-rs" --destination "$work" >&2
mv "$work/kcm-rs-$chart_version.tgz" "$dist/kcm-rs-chart-$chart_version.tgz"

# 6. SBOM and provenance.
infos=("$dist"/kcm-rs-"$version"-linux-*.build-info.json)
python3 hack/release.py sbom --version "$version" --repository "$repo" --image "$dist/kcm-rs-$version.oci.tar" \
  --build-info "${infos[@]}" --created "$epoch" --out "$dist/kcm-rs-$version.spdx.json"
hack/sbom-validate.sh "$dist/kcm-rs-$version.spdx.json"
builder="${RELEASE_BUILDER:-make release-artifacts on $(hostname)}"
python3 hack/release.py provenance --version "$version" --commit "$commit" --builder "$builder" \
  --invocation "${RELEASE_INVOCATION:-}" --started "$started" --build-info "${infos[@]}" --out "$dist/kcm-rs-$version.provenance.json"

# 7. Release notes: the CHANGELOG section, what to pull, how to verify.
platforms="$(for b in "${binaries[@]}"; do printf '%s, ' "${b%%=*}"; done)"
{
  python3 hack/release-checks.py notes "$version"
  cat <<EOF

### Artifacts

- Image: \`$repo:$version@$digest\` (${platforms%, })
- Chart: \`helm install kcm-rs oci://$(dirname "$repo")/charts/kcm-rs --version $chart_version -n kcm-system --create-namespace\` (pins the image above)
- Binaries, SBOM (SPDX 2.3), provenance (SLSA v1), SHA256SUMS; each file signed (\`<file>.sigstore.json\`), binaries, image and chart attested (\`<file>.intoto.json\`).

### Verify (offline, with release/cosign.pub from the repository)

\`\`\`sh
cosign verify-blob --key cosign.pub --bundle SHA256SUMS.sigstore.json --insecure-ignore-tlog SHA256SUMS
sha256sum -c SHA256SUMS
cosign verify-blob-attestation --key cosign.pub --type slsaprovenance1 --insecure-ignore-tlog \\
  --signature kcm-rs-$version-linux-amd64.intoto.json kcm-rs-$version-linux-amd64
\`\`\`
EOF
} >"$dist/RELEASE-NOTES.md"

# 8. SHA256SUMS, then signatures and attestations.
(cd "$dist" && python3 ../hack/release.py sums $(ls | LC_ALL=C sort) >SHA256SUMS)
key="${COSIGN_KEY:-}"
pub=release/cosign.pub
if [[ "$key" == ephemeral ]]; then
  say "COSIGN_KEY=ephemeral: signing with a throwaway key pair (a dry run; release/cosign.pub will not verify this dist/)"
  (cd "$work" && COSIGN_PASSWORD= "$OLDPWD/$cosign" generate-key-pair >/dev/null 2>&1)
  key="$work/cosign.key"; pub="$work/cosign.pub"; export COSIGN_PASSWORD=
  cp "$pub" "$dist/ephemeral-cosign.pub"
elif [[ -z "$key" ]]; then
  die "COSIGN_KEY is not set: the release key (its public half is release/cosign.pub), as a path or env://COSIGN_PRIVATE_KEY, with COSIGN_PASSWORD; COSIGN_KEY=ephemeral for a dry run"
fi
export COSIGN_YES=true
# Keyed signing and verification need no Sigstore root; without these cosign
# still tries to fetch one over the network when it verifies.
export TUF_ROOT="$work/tuf" TUF_MIRROR=file:///nonexistent
predicate="$dist/kcm-rs-$version.provenance.json"
for f in $(cd "$dist" && ls | LC_ALL=C sort); do
  [[ "$f" == ephemeral-cosign.pub ]] && continue
  "$cosign" sign-blob --key "$key" --tlog-upload=false --bundle "$dist/$f.sigstore.json" "$dist/$f" >/dev/null 2>"$work/cosign.log" ||
    { cat "$work/cosign.log" >&2; die "cosign sign-blob $f failed"; }
  case "$f" in
    kcm-rs-"$version"-linux-*.build-info.json) ;;
    kcm-rs-"$version"-linux-* | kcm-rs-"$version".oci.tar | kcm-rs-chart-*.tgz)
      "$cosign" attest-blob --key "$key" --tlog-upload=false --type slsaprovenance1 --predicate "$predicate" \
        --output-signature "$dist/$f.intoto.json" "$dist/$f" >/dev/null 2>"$work/cosign.log" ||
        { cat "$work/cosign.log" >&2; die "cosign attest-blob $f failed"; }
      ;;
  esac
done

# 9. Verify everything as a user would, offline.
(cd "$dist" && sha256sum --quiet -c SHA256SUMS) || die "SHA256SUMS does not match"
for s in "$dist"/*.sigstore.json; do
  "$cosign" verify-blob --key "$pub" --bundle "$s" --insecure-ignore-tlog=true "${s%.sigstore.json}" >/dev/null 2>"$work/cosign.log" ||
    { cat "$work/cosign.log" >&2; die "cosign verify-blob ${s%.sigstore.json} failed"; }
done
for a in "$dist"/*.intoto.json; do
  "$cosign" verify-blob-attestation --key "$pub" --type slsaprovenance1 --insecure-ignore-tlog=true \
    --signature "$a" "${a%.intoto.json}" >/dev/null 2>"$work/cosign.log" ||
    { cat "$work/cosign.log" >&2; die "cosign verify-blob-attestation ${a%.intoto.json} failed"; }
done
say "signatures ($(ls "$dist"/*.sigstore.json | wc -l)) and attestations ($(ls "$dist"/*.intoto.json | wc -l)) verify with $pub"

# 10. What was made.
say "dist/ for kcm-rs $version (commit $commit), image $repo:$version@$digest:"
(cd "$dist" && for f in $(ls | LC_ALL=C sort); do
  printf '%10s  %s  %s\n' "$(stat -c %s "$f")" "$(sha256sum "$f" | cut -c1-16)" "$f"
done) >&2
