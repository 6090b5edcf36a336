#!/usr/bin/env bash
# A kind cluster running kcm-rs in place of KCM's four controllers:
#   1. creates the cluster from manifests/kind-cluster.yaml (KCM runs with
#      job-controller, pod-garbage-collector-controller,
#      taint-eviction-controller and disruption-controller switched off),
#   2. loads the image $IMAGE (default kcm-rs:dev; `make image` builds it),
#   3. applies manifests/base, or manifests/ (with the monitoring component)
#      when the cluster has the Prometheus Operator CRDs,
#   4. waits for the Deployment, the Lease holder and the sample Job.
# `make kind-up` builds the image first. Needs kind, kubectl and a container
# engine. CLUSTER (default kcm-rs) names the cluster; an existing one is reused.
set -euo pipefail
cd "$(dirname "$0")/.."
CLUSTER=${CLUSTER:-kcm-rs}
IMAGE=${IMAGE:-kcm-rs:dev}
for tool in kind kubectl; do
  command -v "$tool" >/dev/null || { echo "error: $tool is not installed" >&2; exit 1; }
done
ctx="kind-$CLUSTER"
if kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
  echo "reusing kind cluster $CLUSTER"
else
  kind create cluster --name "$CLUSTER" --config manifests/kind-cluster.yaml --wait 120s
fi
kind load docker-image "$IMAGE" --name "$CLUSTER"
k() { kubectl --context "$ctx" "$@"; }
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
