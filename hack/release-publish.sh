#!/usr/bin/env bash
# Publishes dist/ (make release-artifacts) to the registry: the image index
# to IMAGE_REPOSITORY (the Makefile's) and the chart as an OCI artifact to
# <its owner>/charts/kcm-rs, each signed and attested there with cosign, then
# pulls both back and verifies them against release/cosign.pub as a user
# would. The release workflow runs it against the real registry; make
# release-rehearsal against one on localhost (REGISTRY=localhost:PORT replaces
# the repository's host, PLAIN_HTTP=1).
#
# Environment: COSIGN_KEY/COSIGN_PASSWORD (the release key; or a key file
# whose public half is COSIGN_PUB), REGISTRY_USER/REGISTRY_PASSWORD (a login,
# if the registry needs one).
# usage: hack/release-publish.sh VERSION
set -euo pipefail
cd "$(dirname "$0")/.."
version="${1:?usage: $0 VERSION}"
make="${MAKE:-make}"
repo="$($make -s print-image-repository)"
[[ -n "${REGISTRY:-}" ]] && repo="$REGISTRY/${repo#*/}"
host="${repo%%/*}"
charts="${repo%/*}/charts"
dist=dist
tools=target/release-tools
crane="$tools/crane"
cosign="$tools/cosign"
helm=target/e2e-bin/kcm-e2e-helm
pub="${COSIGN_PUB:-release/cosign.pub}"
say() { echo "release-publish: $*" >&2; }
die() { echo "error: $*" >&2; exit 1; }

digest="$(cat "$dist/kcm-rs-$version.image-digest")" || die "no dist/ for $version: make release-artifacts VERSION=$version"
chart="$(ls "$dist"/kcm-rs-chart-*.tgz)"
chart_version="$(basename "$chart" .tgz)"; chart_version="${chart_version#kcm-rs-chart-}"
insecure=(); helm_http=(); crane_http=()
if [[ "${PLAIN_HTTP:-}" == 1 ]]; then
  insecure=(--allow-http-registry --allow-insecure-registry); helm_http=(--plain-http); crane_http=(--insecure)
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export COSIGN_YES=true
# Keyed signatures need no Sigstore root: keep cosign from fetching one.
export TUF_ROOT="$work/tuf" TUF_MIRROR=file:///nonexistent

if [[ -n "${REGISTRY_USER:-}" ]]; then
  echo "$REGISTRY_PASSWORD" | "$crane" auth login "$host" -u "$REGISTRY_USER" --password-stdin
  echo "$REGISTRY_PASSWORD" | "$helm" registry login "$host" -u "$REGISTRY_USER" --password-stdin
fi

# The image index, byte for byte as dist/ has it: the pushed digest must be
# the one the chart pins.
# The archive's index.json names the image index (and its name for `ctr
# import`); pushed is that image index itself: a layout whose index.json is
# its bytes (crane pushes them unchanged, so the digest stays).
mkdir "$work/layout"
tar -xf "$dist/kcm-rs-$version.oci.tar" -C "$work/layout"
cp "$work/layout/blobs/sha256/${digest#sha256:}" "$work/layout/index.json"
pushed="$("$crane" push "${crane_http[@]}" --index "$work/layout" "$repo:$version")"
[[ "$pushed" == "$repo@$digest" ]] || die "pushed $pushed, not $repo@$digest"
say "image $repo:$version@$digest"

# Signed (the index and each platform's manifest) and attested (SBOM,
# provenance) in the registry, next to the image.
"$cosign" sign "${insecure[@]}" --key "$COSIGN_KEY" --tlog-upload=false --recursive "$repo@$digest" 2>"$work/log" ||
  { cat "$work/log" >&2; die "cosign sign $repo@$digest failed"; }
"$cosign" attest "${insecure[@]}" --key "$COSIGN_KEY" --tlog-upload=false --type spdxjson \
  --predicate "$dist/kcm-rs-$version.spdx.json" "$repo@$digest" 2>"$work/log" ||
  { cat "$work/log" >&2; die "cosign attest (SBOM) failed"; }
"$cosign" attest "${insecure[@]}" --key "$COSIGN_KEY" --tlog-upload=false --type slsaprovenance1 \
  --predicate "$dist/kcm-rs-$version.provenance.json" "$repo@$digest" 2>"$work/log" ||
  { cat "$work/log" >&2; die "cosign attest (provenance) failed"; }

# The chart, an OCI artifact, signed there too.
"$helm" push "$chart" "oci://$charts" "${helm_http[@]}" >"$work/push" 2>&1 || { cat "$work/push" >&2; die "helm push failed"; }
chart_digest="$(sed -n 's/^Digest: //p' "$work/push")"
[[ -n "$chart_digest" ]] || { cat "$work/push" >&2; die "helm push printed no digest"; }
"$cosign" sign "${insecure[@]}" --key "$COSIGN_KEY" --tlog-upload=false "$charts/kcm-rs@$chart_digest" 2>"$work/log" ||
  { cat "$work/log" >&2; die "cosign sign the chart failed"; }
say "chart oci://$charts/kcm-rs:$chart_version@$chart_digest"

# Pulled back and verified as a user would, with the public key only.
[[ "$("$crane" digest "${crane_http[@]}" "$repo:$version")" == "$digest" ]] || die "$repo:$version does not resolve to $digest"
"$crane" validate "${crane_http[@]}" --remote "$repo@$digest" >&2 || die "crane validate $repo@$digest failed"
for p in $("$crane" manifest "${crane_http[@]}" "$repo@$digest" | python3 -c 'import json,sys; print(" ".join(m["platform"]["os"] + "/" + m["platform"]["architecture"] for m in json.load(sys.stdin)["manifests"]))'); do
  arch="$("$crane" config "${crane_http[@]}" --platform "$p" "$repo@$digest" | python3 -c 'import json,sys; print(json.load(sys.stdin)["architecture"])')"
  [[ "linux/$arch" == "$p" ]] || die "$p's image says architecture $arch"
done
"$cosign" verify "${insecure[@]}" --key "$pub" --insecure-ignore-tlog=true "$repo@$digest" >/dev/null 2>"$work/log" ||
  { cat "$work/log" >&2; die "cosign verify $repo@$digest failed"; }
for t in spdxjson slsaprovenance1; do
  "$cosign" verify-attestation "${insecure[@]}" --key "$pub" --insecure-ignore-tlog=true --type "$t" "$repo@$digest" >/dev/null 2>"$work/log" ||
    { cat "$work/log" >&2; die "cosign verify-attestation --type $t failed"; }
done
"$cosign" verify "${insecure[@]}" --key "$pub" --insecure-ignore-tlog=true "$charts/kcm-rs@$chart_digest" >/dev/null 2>"$work/log" ||
  { cat "$work/log" >&2; die "cosign verify the chart failed"; }
mkdir -p "$work/pulled"
"$helm" pull "oci://$charts/kcm-rs" --version "$chart_version" "${helm_http[@]}" --destination "$work/pulled" >/dev/null 2>&1 ||
  die "helm pull oci://$charts/kcm-rs --version $chart_version failed"
cmp -s "$work/pulled/kcm-rs-$chart_version.tgz" "$chart" || die "the pulled chart differs from $chart"
say "verified: $repo:$version and oci://$charts/kcm-rs:$chart_version pulled back, signatures and attestations ($pub)"
