#!/usr/bin/env bash
# A kind cluster running kcm-rs in place of KCM's four controllers:
#   1. creates the cluster from manifests/kind/$K8S_VERSION.yaml (1.34 to
#      1.37, default 1.34; KCM runs with job-controller,
#      pod-garbage-collector-controller, taint-eviction-controller and
#      disruption-controller switched off, which is checked),
#   2. loads the image $IMAGE (default ghcr.io/kcm-rs/kcm-rs:<workspace version>, the
#      name manifests/ uses; `make image` builds it),
#      or the OCI archive $IMAGE_ARCHIVE (`make image-oci` writes
#      target/image/kcm-rs-<version>.oci.tar) with `kind load image-archive`,
#   3. applies manifests/base, or manifests/ (with the monitoring component)
#      when the cluster has the Prometheus Operator CRDs,
#   4. waits for the Deployment, the Lease holder and the sample Job.
#
# hack/kind-up.sh --beside-kcm: kcm-rs beside an unmodified KCM instead
# (docs/beside-kcm.md): the same node images without the
# kubeadm patch, so KCM runs all its controllers (checked); applies
# manifests/beside-kcm (plus manifests/monitoring with the CRDs) and
# manifests/beside-kcm/admission-policy.yaml (v1 from 1.36; on 1.34 and 1.35
# as v1beta1, with kind's featureGates MutatingAdmissionPolicy=true and
# runtimeConfig admissionregistration.k8s.io/v1beta1=true set on the
# cluster); waits for the Lease to say mode beside-kcm, then runs the sample
# Job twice: as is (KCM's) and in a namespace the policy opts in (kcm-rs's).
# CLUSTER defaults to kcm-rs-beside in this mode.
#
# `make kind-up` builds the image first. Needs kind, kubectl and a container
# engine. CLUSTER (default kcm-rs) names the cluster; an existing one is reused.
set -euo pipefail
cd "$(dirname "$0")/.."
beside=false
for arg in "$@"; do
  case "$arg" in
    --beside-kcm) beside=true ;;
    -h|--help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
    *) echo "error: unknown argument $arg (only --beside-kcm)" >&2; exit 2 ;;
  esac
done
if $beside; then
  CLUSTER=${CLUSTER:-kcm-rs-beside}
else
  CLUSTER=${CLUSTER:-kcm-rs}
fi
# The tag manifests/base references: the workspace version.
IMAGE=${IMAGE:-$(make -s print-image-repository):$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)}
K8S_VERSION=${K8S_VERSION:-1.34}
config=manifests/kind/$K8S_VERSION.yaml
[[ -f "$config" ]] || {
  echo "error: no kind config for Kubernetes $K8S_VERSION (supported: $(cd manifests/kind && ls | sed 's/.yaml$//' | xargs))" >&2
  exit 1
}
for tool in kind kubectl; do
  command -v "$tool" >/dev/null || { echo "error: $tool is not installed" >&2; exit 1; }
done
minor=${K8S_VERSION#1.}
# MutatingAdmissionPolicy: GA (admissionregistration.k8s.io/v1, on) from 1.36;
# beta and off before.
policy_version=v1
((minor >= 36)) || policy_version=v1beta1
workdir=$(mktemp -d "${TMPDIR:-/tmp}/kind-up.XXXXXX")
trap 'rm -rf "$workdir"' EXIT
if $beside; then
  # The version's node images, without kubeadmConfigPatches (the KCM patch
  # is all they hold): kind's own KCM flags, every controller on.
  sed '/^kubeadmConfigPatches:/,$d' "$config" >"$workdir/kind.yaml"
  if [[ $policy_version == v1beta1 ]]; then
    cat >>"$workdir/kind.yaml" <<'YAML'
featureGates:
  MutatingAdmissionPolicy: true
runtimeConfig:
  admissionregistration.k8s.io/v1beta1: "true"
YAML
  fi
  config=$workdir/kind.yaml
fi
ctx="kind-$CLUSTER"
if kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
  echo "reusing kind cluster $CLUSTER"
else
  kind create cluster --name "$CLUSTER" --config "$config" --wait 120s
fi
k() { kubectl --context "$ctx" "$@"; }
kcm_cmd=$(k -n kube-system get pods -l component=kube-controller-manager \
  -o jsonpath='{.items[*].spec.containers[*].command}')
for c in job-controller pod-garbage-collector-controller taint-eviction-controller disruption-controller; do
  if $beside; then
    # Beside KCM nothing of KCM may be off (a reused cluster made without
    # --beside-kcm has the patch).
    [[ "$kcm_cmd" != *"-$c"* ]] || {
      echo "error: kube-controller-manager has $c switched off; --beside-kcm needs an unmodified KCM (delete cluster $CLUSTER or pick another CLUSTER): $kcm_cmd" >&2
      exit 1
    }
  else
    # Two Job controllers must never run: KCM's flags must have taken the patch.
    [[ "$kcm_cmd" == *"-$c"* ]] || {
      echo "error: kube-controller-manager still runs $c (the kubeadm patch in $config did not apply): $kcm_cmd" >&2
      exit 1
    }
  fi
done
if [[ -n "${IMAGE_ARCHIVE:-}" ]]; then
  [[ -f "$IMAGE_ARCHIVE" ]] || { echo "error: IMAGE_ARCHIVE=$IMAGE_ARCHIVE: no such file (make image-oci writes it)" >&2; exit 1; }
  kind load image-archive "$IMAGE_ARCHIVE" --name "$CLUSTER"
else
  kind load docker-image "$IMAGE" --name "$CLUSTER"
fi
monitoring=false
if k get crd servicemonitors.monitoring.coreos.com prometheusrules.monitoring.coreos.com >/dev/null 2>&1; then
  monitoring=true
fi
if $beside; then
  k apply -k manifests/beside-kcm
  if $monitoring; then
    # The monitoring component only adds objects of its own: apply them as
    # listed in its kustomization.
    mapfile -t parts < <(sed -n '/^resources:/,/^[^- ]/s/^- //p' manifests/monitoring/kustomization.yaml)
    for part in "${parts[@]}"; do
      k apply -f "manifests/monitoring/$part"
    done
  else
    echo "no Prometheus Operator CRDs: no monitoring component"
  fi
  sed "s#^apiVersion: admissionregistration.k8s.io/v1\$#apiVersion: admissionregistration.k8s.io/$policy_version#" \
    manifests/beside-kcm/admission-policy.yaml | k apply -f -
elif $monitoring; then
  k apply -k manifests/
else
  echo "no Prometheus Operator CRDs: applying manifests/base only"
  k apply -k manifests/base
fi
k -n kube-system rollout status deployment/kcm-rs --timeout=180s
for _ in $(seq 60); do
  holder=$(k -n kube-system get lease kcm-rs -o jsonpath='{.spec.holderIdentity}' 2>/dev/null || true)
  [[ -n "$holder" ]] && break
  sleep 2
done
[[ -n "${holder:-}" ]] || { echo "error: no kcm-rs replica took the Lease kube-system/kcm-rs" >&2; exit 1; }
echo "Lease kube-system/kcm-rs held by $holder"
k delete job sample --ignore-not-found --wait=true >/dev/null
k apply -f manifests/examples/job.yaml
if $beside; then
  mode=$(k -n kube-system get lease kcm-rs -o go-template='{{index .metadata.annotations "kcm-rs.dev/mode"}}' 2>/dev/null || true)
  [[ "$mode" == beside-kcm ]] || { echo "error: the Lease says mode '$mode', not beside-kcm" >&2; exit 1; }
  # A namespace the admission policy opts in: the same sample Job, kcm-rs's.
  optin=kcm-rs-optin
  k create namespace "$optin" --dry-run=client -o yaml | k apply -f -
  k label namespace "$optin" kcm-rs.dev/job-managed-by=true --overwrite
  k -n "$optin" delete job sample --ignore-not-found --wait=true >/dev/null
  sample() { sed 's/^  namespace: default$/  namespace: '"$optin"'/' manifests/examples/job.yaml; }
  # The API server loads a new policy within seconds; until then a Job would
  # be created without managedBy (KCM's): probe with server-side dry runs.
  managed_by=
  for _ in $(seq 30); do
    managed_by=$(sample | k create --dry-run=server -f - -o jsonpath='{.spec.managedBy}' || true)
    [[ "$managed_by" == kcm-rs.dev/job-controller ]] && break
    sleep 2
  done
  [[ "$managed_by" == kcm-rs.dev/job-controller ]] || {
    echo "error: the admission policy does not set spec.managedBy in namespace $optin" >&2
    exit 1
  }
  sample | k apply -f -
  managed_by=$(k -n "$optin" get job sample -o jsonpath='{.spec.managedBy}')
  [[ "$managed_by" == kcm-rs.dev/job-controller ]] || {
    echo "error: Job $optin/sample has managedBy '$managed_by'" >&2
    exit 1
  }
  k -n "$optin" wait --for=condition=Complete job/sample --timeout=300s
  echo "Job $optin/sample (managedBy $managed_by) completed by kcm-rs"
fi
k wait --for=condition=Complete job/sample --timeout=300s
if $beside; then
  echo "kind cluster $CLUSTER: kcm-rs runs beside an unmodified KCM, each completed its sample Job (kubectl --context $ctx)"
else
  echo "kind cluster $CLUSTER: kcm-rs leads and ran the sample Job (kubectl --context $ctx)"
fi
