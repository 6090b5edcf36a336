#!/usr/bin/env bash
# A kind cluster running kcm-rs in place of KCM's four controllers:
#   1. creates the cluster from manifests/kind/$K8S_VERSION.yaml (1.34 to
#      1.37, default 1.34; KCM runs with job-controller,
#      pod-garbage-collector-controller, taint-eviction-controller and
#      disruption-controller switched off, which is checked),
#   2. loads the image $IMAGE (default kcm-rs:<workspace version>; `make image` builds it),
#   3. applies manifests/base, or manifests/ (with the monitoring component)
#      when the cluster has the Prometheus Operator CRDs,
#   4. waits for the Deployment, the Lease holder and the sample Job.
# `make kind-up` builds the image first. Needs kind, kubectl and a container
# engine. CLUSTER (default kcm-rs) names the cluster; an existing one is reused.
set -euo pipefail
cd "$(dirname "$0")/.."
CLUSTER=${CLUSTER:-kcm-rs}
# The tag manifests/base references: the workspace version.
IMAGE=${IMAGE:-kcm-rs:$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)}
K8S_VERSION=${K8S_VERSION:-1.34}
config=manifests/kind/$K8S_VERSION.yaml
[[ -f "$config" ]] || {
  echo "error: no kind config for Kubernetes $K8S_VERSION (supported: $(cd manifests/kind && ls | sed 's/.yaml$//' | xargs))" >&2
  exit 1
}
for tool in kind kubectl; do
  command -v "$tool" >/dev/null || { echo "error: $tool is not installed" >&2; exit 1; }
done
ctx="kind-$CLUSTER"
if kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
  echo "reusing kind cluster $CLUSTER"
else
  kind create cluster --name "$CLUSTER" --config "$config" --wait 120s
fi
k() { kubectl --context "$ctx" "$@"; }
# Two Job controllers must never run: KCM's flags must have taken the patch.
kcm_cmd=$(k -n kube-system get pods -l component=kube-controller-manager \
  -o jsonpath='{.items[*].spec.containers[*].command}')
for c in job-controller pod-garbage-collector-controller taint-eviction-controller disruption-controller; do
  [[ "$kcm_cmd" == *"-$c"* ]] || {
    echo "error: kube-controller-manager still runs $c (the kubeadm patch in $config did not apply): $kcm_cmd" >&2
    exit 1
  }
done
kind load docker-image "$IMAGE" --name "$CLUSTER"
if k get crd servicemonitors.monitoring.coreos.com prometheusrules.monitoring.coreos.com >/dev/null 2>&1; then
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
k wait --for=condition=Complete job/sample --timeout=300s
echo "kind cluster $CLUSTER: kcm-rs leads and ran the sample Job (kubectl --context $ctx)"
