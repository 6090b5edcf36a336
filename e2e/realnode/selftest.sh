#!/usr/bin/env bash
# The real node's own test, per minor: brings the node up, runs real pods on
# it and checks what they did, checks that check-clean.sh sees the running
# node, tears it down and checks that nothing is left.
#
#   - a busybox pod exits 42: the kubelet reports exit code 42, the pod is
#     Failed, its log comes back through the API server;
#   - a busybox httpd pod with an HTTP readiness probe becomes Ready (the node
#     reaches pods through the bridge) and sees only the bridge subnet's
#     route (no default route: nothing leaves the machine);
#   - agnhost and the e2e busybox image run (`agnhost --help`, `ls`);
#   - while the node runs, check-clean.sh reports leftovers; after
#     node.sh down it reports none;
#   - the same after a crash: containerd, its shims and the kubelet killed
#     while a pod runs, then node.sh down.
#
# usage: e2e/realnode/selftest.sh [--version 1.N]   (root)
set -euo pipefail
# shellcheck source=lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"
orig_args=("$@")
version=1.34
while [[ $# -gt 0 ]]; do
  case "$1" in
    --version) version="${2:?}"; shift ;;
    --version=*) version="${1#--version=}" ;;
    *) err "unknown argument $1 (usage: selftest.sh [--version 1.N])"; exit 2 ;;
  esac
  shift
done
# One node session at a time: wait for the lock unless a caller holds it.
hold_lock "$REALNODE_DIR/selftest.sh" "${orig_args[@]}"
failures=0
check() { # check WHAT GOT WANT
  if [[ "$2" == "$3" ]]; then echo "ok   $1: $2"; else echo "FAIL $1: got '$2', want '$3'"; failures=$((failures + 1)); fi
}
began=$(date +%s)
"$REALNODE_DIR/node.sh" up --version "$version" >/dev/null
up_s=$(($(date +%s) - began))
trap '"$REALNODE_DIR/node.sh" down >/dev/null 2>&1 || true' EXIT
eval "$("$REALNODE_DIR/node.sh" env)"
export KUBECONFIG
kc() { "$KUBECTL" "$@"; }
busybox_image="$(ctr --address "$SOCK" -n k8s.io images ls -q | grep '^registry.k8s.io/e2e-test-images/busybox:' | head -n1)"
agnhost_image="$(ctr --address "$SOCK" -n k8s.io images ls -q | grep '^registry.k8s.io/e2e-test-images/agnhost:' | head -n1)"

kc apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: exit42, namespace: default}
spec:
  restartPolicy: Never
  containers:
  - {name: main, image: busybox:1.36, imagePullPolicy: Never, command: [sh, -c, "echo about to exit; exit 42"]}
---
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: default}
spec:
  containers:
  - name: main
    image: $busybox_image
    imagePullPolicy: Never
    command: [sh, -c, "echo ok >/tmp/index.html && exec httpd -f -p 80 -h /tmp"]
    readinessProbe:
      httpGet: {path: /index.html, port: 80}
      periodSeconds: 1
---
apiVersion: v1
kind: Pod
metadata: {name: tools, namespace: default}
spec:
  restartPolicy: Never
  initContainers:
  - {name: agnhost, image: $agnhost_image, imagePullPolicy: Never, args: [--help]}
  containers:
  - {name: main, image: $busybox_image, imagePullPolicy: Never, command: [sh, -c, "ls /bin/sh && ip -4 route"]}
EOF
kc wait --for=jsonpath='{.status.phase}'=Failed pod/exit42 --timeout=90s >/dev/null || true
check "exit42 phase" "$(kc get pod exit42 -o jsonpath='{.status.phase}')" Failed
check "exit42 exit code" "$(kc get pod exit42 -o jsonpath='{.status.containerStatuses[0].state.terminated.exitCode}')" 42
check "exit42 log" "$(kc logs exit42 2>&1)" "about to exit"
kc wait --for=condition=Ready pod/web --timeout=90s >/dev/null || true
check "web Ready (HTTP probe from the node)" "$(kc get pod web -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" True
web_ip="$(kc get pod web -o jsonpath='{.status.podIP}')"
check "web IP in $POD_SUBNET" "${web_ip%.*}.0/24" "$POD_SUBNET"
kc wait --for=jsonpath='{.status.phase}'=Succeeded pod/tools --timeout=90s >/dev/null || true
check "tools phase (agnhost, busybox)" "$(kc get pod tools -o jsonpath='{.status.phase}')" Succeeded
routes="$(kc logs tools -c main 2>&1 | grep -v '^/bin/sh$' || true)"
check "pod routes: the bridge subnet only" "$(echo "$routes" | awk '{ print $1 }' | tr '\n' ' ')" "${POD_SUBNET} "

if "$REALNODE_DIR/check-clean.sh" >/dev/null 2>&1; then
  check "check-clean.sh while the node runs" "clean" "leftovers reported"
else
  check "check-clean.sh while the node runs" "leftovers reported" "leftovers reported"
fi
trap - EXIT
began=$(date +%s)
"$REALNODE_DIR/node.sh" down >/dev/null 2>&1 || true
down_s=$(($(date +%s) - began))
if out="$("$REALNODE_DIR/check-clean.sh" 2>&1)"; then
  check "check-clean.sh after down" "clean" "clean"
else
  echo "$out"
  check "check-clean.sh after down" "leftovers" "clean"
fi

# Again after a crash: containerd, the kubelet and the shims killed while a
# pod runs; down must still leave nothing (runc and the state dir know what
# ran).
"$REALNODE_DIR/node.sh" up --version "$version" >/dev/null 2>&1
trap '"$REALNODE_DIR/node.sh" down >/dev/null 2>&1 || true' EXIT
kc run sleeper --image="$busybox_image" --image-pull-policy=Never --restart=Never -- sleep 1000 >/dev/null
kc wait --for=condition=Ready pod/sleeper --timeout=60s >/dev/null || true
check "sleeper Running before the crash" "$(kc get pod sleeper -o jsonpath='{.status.phase}')" Running
while read -r pid args; do
  case "$args" in *containerd*|*kcm-node-kubelet*) kill -KILL "$pid" ;; esac
done < <(our_processes)
trap - EXIT
"$REALNODE_DIR/node.sh" down >/dev/null 2>&1 || true
if out="$("$REALNODE_DIR/check-clean.sh" 2>&1)"; then
  check "check-clean.sh after a crash and down" "clean" "clean"
else
  echo "$out"
  check "check-clean.sh after a crash and down" "leftovers" "clean"
fi
echo "Kubernetes $version: up ${up_s}s, down ${down_s}s, $failures failure(s)"
[[ $failures -eq 0 ]]
