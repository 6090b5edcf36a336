#!/usr/bin/env bash
# A local control plane plus one real node on this machine, and its teardown.
#
#   node.sh up [--version 1.N]   build (cached) and start: kube-apiserver over
#                                embedded etcd, kube-controller-manager with the
#                                helper controllers only (never job, podgc,
#                                taint-eviction, disruption), containerd + runc,
#                                the CNI bridge, kube-scheduler and the kubelet;
#                                import the images; wait for the node to be
#                                Ready and untainted. Prints the kubeconfig.
#   node.sh down                 stop it all and remove everything it made
#   node.sh env                  print KUBECONFIG=..., K8S_VERSION=..., NODE_NAME=...
#   node.sh session [--version 1.N] [--wait S] -- CMD...
#                                take the lock, up, run CMD with that
#                                environment, always down and check
#
# One node per machine, one session at a time: every session holds the
# lock $LOCK (/run/kcm-rs-node.lock) from up to down. `up` refuses, naming
# the holder, while someone else holds it; run alone (no caller holding
# the lock) it takes the lock itself with a holder process that `down` ends.
#
# The node runs until `down`. State lives in /run/kcm-rs-node
# ($KCM_NODE_STATE), logs in target/realnode/logs. Must run as root. The
# pods' network stays on this machine: a bridge with the node as gateway,
# no masquerading, no default route in the pods. See docs/real-node.md.
set -euo pipefail
# shellcheck source=lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"

# KCM's controllers the node and upstream's e2e framework need; kcm-rs's four
# (job, pod GC, taint eviction, disruption) are never among them.
HELPERS="${KCM_NODE_HELPERS:-serviceaccount-controller,serviceaccount-token-controller,root-ca-certificate-publisher-controller,node-lifecycle-controller,replicaset-controller,deployment-controller,statefulset-controller,daemonset-controller,namespace-controller,garbage-collector-controller,ttl-after-finished-controller,endpoints-controller,endpointslice-controller,resourcequota-controller}"
case ",$HELPERS," in
  *,job-controller,*|*,pod-garbage-collector-controller,*|*,taint-eviction-controller,*|*,disruption-controller,*|*,\**)
    err "KCM_NODE_HELPERS must not run job, podgc, taint-eviction or disruption (kcm-rs's controllers): $HELPERS"; exit 2 ;;
esac

# Services for pods, for kcm-rs in a pod with in-cluster credentials
# (KCM_NODE_KUBE_PROXY=<kube-proxy binary>, e2e/realnode/installs): the API
# server listens on every address and advertises the node's (the endpoint
# of the `kubernetes` Service), ServiceAccount admission mounts the pods'
# tokens, pods get a route to the Service range through the bridge (still
# nothing beyond the machine) and kube-proxy (iptables) runs. Off, none of it.
# KCM_NODE_APISERVER_ARGS: more kube-apiserver flags (an audit log, say).
KUBE_PROXY="${KCM_NODE_KUBE_PROXY:-}"
SERVICE_CIDR=10.0.0.0/24 # kcm-e2e-apiserver's --service-cluster-ip-range
apiserver_args() { # apiserver_args NODE_IP
  [[ -z "$KUBE_PROXY" ]] || printf ' --bind-address=0.0.0.0 --advertise-address=%s --endpoint-reconciler-type=lease --enable-admission-plugins=ServiceAccount' "$1"
  printf ' %s' "${KCM_NODE_APISERVER_ARGS:-}"
}
pod_routes() { [[ -z "$KUBE_PROXY" ]] || printf ', "routes": [{"dst": "%s"}]' "$SERVICE_CIDR"; }
start_kube_proxy() {
  [[ -n "$KUBE_PROXY" ]] || return 0
  mkdir -p "$STATE/kube-proxy"
  # conntrack 0s and 0: leave the kernel's settings as they are; no
  # localhost NodePorts (they would set route_localnet).
  cat >"$STATE/kube-proxy/config.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $STATE/admin.kubeconfig}
hostnameOverride: $NODE_NAME
mode: iptables
clusterCIDR: $POD_SUBNET
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
iptables: {localhostNodePorts: false}
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s, udpTimeout: 0s, udpStreamTimeout: 0s}
EOF
  start kube-proxy "$KUBE_PROXY" --config="$STATE/kube-proxy/config.yaml" --v=2
  synced() { [[ "$(curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:10256/healthz)" == 200 ]]; }
  wait_for "kube-proxy synced" 60 synced || fail_up "kube-proxy did not sync" "$LOGS/kube-proxy.log"
}

prereqs() {
  local missing=() c
  [[ "$(id -u)" == 0 ]] || { err "the real node needs root (containerd, mounts, network namespaces)"; exit 1; }
  for c in containerd:containerd containerd-shim-runc-v2:containerd ctr:containerd runc:runc \
    iptables:iptables ip6tables:iptables ip:iproute2 flock:util-linux mount:mount setsid:util-linux file:file; do
    command -v "${c%%:*}" >/dev/null || missing+=("${c##*:} (for ${c%%:*})")
  done
  for c in bridge host-local loopback; do
    [[ -x "$CNI_BIN/$c" ]] || missing+=("containernetworking-plugins (for $CNI_BIN/$c)")
  done
  [[ -x /bin/busybox ]] || missing+=("busybox-static (for the images' /bin/busybox)")
  if [[ ${#missing[@]} -gt 0 ]]; then
    err "missing prerequisites; install them with: apt-get install --no-install-recommends $(printf '%s\n' "${missing[@]}" | cut -d' ' -f1 | sort -u | tr '\n' ' ')"
    printf '  missing: %s\n' "${missing[@]}" >&2
    exit 1
  fi
  grep -qw overlay /proc/filesystems || modprobe overlay 2>/dev/null ||
    { err "the kernel has no overlay filesystem (containerd's snapshotter needs it)"; exit 1; }
  command -v go >/dev/null || { err "Go is not on PATH: install Go 1.26 (https://go.dev/dl) to build kubelet and kube-scheduler"; exit 1; }
}
CNI_BIN="${KCM_NODE_CNI_BIN:-/usr/lib/cni}"

# start NAME CMD...: runs CMD in its own session, output to $LOGS/NAME.log.
# The node's processes do not keep the lock: it is the session's.
start() {
  local name="$1" fd; shift
  (
    for fd in $(lock_fds); do eval "exec $fd>&-"; done
    exec setsid "$@"
  ) </dev/null >"$LOGS/$name.log" 2>&1 &
  echo $! >"$STATE/pids/$name"
}
alive() { [[ -f "$STATE/pids/$1" ]] && kill -0 "$(cat "$STATE/pids/$1")" 2>/dev/null; }
# stop NAME [SECONDS]: SIGTERM, then SIGKILL after SECONDS (default 15).
stop() {
  local name="$1" wait="${2:-15}" pid i
  [[ -f "$STATE/pids/$name" ]] || return 0
  pid="$(cat "$STATE/pids/$name")"
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < wait * 10; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then say "$name did not stop in ${wait}s: SIGKILL"; kill -KILL "$pid" 2>/dev/null || true; sleep 0.2;
    elif [[ $i -ge 20 ]]; then say "$name took $((i / 10))s to stop"; fi
  fi
  rm -f "$STATE/pids/$name"
}
# wait_for WHAT SECONDS COMMAND...: polls COMMAND every 0.5 s.
wait_for() {
  local what="$1" secs="$2" i; shift 2
  for ((i = 0; i < secs * 2; i++)); do "$@" >/dev/null 2>&1 && return 0; sleep 0.5; done
  err "$what: not within ${secs}s"
  return 1
}
kc() { "$KUBECTL" --kubeconfig "$STATE/admin.kubeconfig" "$@"; }
fail_up() {
  err "$1"
  local l
  for l in "${@:2}"; do echo "--- last lines of $l" >&2; tail -n 25 "$l" >&2 || true; done
  say "tearing down what started"
  down || true
  exit 1
}

up() {
  local version=1.34
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --version) version="${2:?--version needs a value such as 1.37}"; shift ;;
      --version=*) version="${1#--version=}" ;;
      *) err "unknown argument $1 (usage: node.sh up [--version 1.N])"; exit 2 ;;
    esac
    shift
  done
  version="$(echo "${version#v}" | cut -d. -f1,2)"
  prereqs
  lock_check up
  if [[ -e "$STATE" ]]; then
    err "$STATE exists: a real node is up or was not torn down; run e2e/realnode/node.sh down first"
    exit 1
  fi
  "$ROOT/e2e/harness/build.sh" "$ROOT/target/e2e-bin" --with-kubectl
  "$ROOT/e2e/harness/build.sh" "$ROOT/target/e2e-bin" --version "$version"
  "$REALNODE_DIR/build.sh" --version "$version"
  KUBECTL="$(cp_bin 1.34)/kcm-e2e-kubectl"
  local cp nb images node_ip began
  cp="$(cp_bin "$version")"; nb="$(node_bin "$version")"; images="$WORK/$version/images"
  node_ip="$(ip -4 -o addr show scope global | awk '{ split($4, a, "/"); print a[1]; exit }')"
  [[ -n "$node_ip" ]] || { err "no global IPv4 address for the node (the kubelet's node IP must not be loopback)"; exit 1; }
  began=$(date +%s)

  mkdir -p "$WORK" "$LOGS"
  # The lock, unless a caller holds it already: from here on the node is
  # this session's until `down` (the builds above needed no lock).
  local holder=""
  if lock_free; then
    holder="$(lock_take)" || lock_refuse up
  elif ! lock_ours; then
    lock_refuse up
  fi
  if [[ -e "$STATE" ]] || ! "$REALNODE_DIR/check-clean.sh" snapshot >"$BASELINE.tmp"; then
    [[ -n "$holder" ]] && kill "$holder"
    [[ -e "$STATE" ]] && err "$STATE exists: a real node is up or was not torn down; run e2e/realnode/node.sh down first"
    exit 1
  fi
  mv "$BASELINE.tmp" "$BASELINE"
  rm -f "$LOGS"/*.log
  mkdir -p "$STATE"/{pids,containerd,cni/net.d,cni/ipam,kubelet,pod-logs,hostpath}
  [[ -n "$holder" ]] && echo "$holder" >"$STATE/pids/lock"
  echo "$version" >"$STATE/version"

  # 1. kube-apiserver over embedded etcd (127.0.0.1). It authenticates to
  # the kubelet with the admin client certificate (logs, exec) at its
  # InternalIP (a name lookup would leave the machine); the PKI
  # files are where kcm-e2e-apiserver writes them under --dir.
  local pki="$STATE/apiserver"
  start apiserver "$cp/kcm-e2e-apiserver" --dir="$pki" --kubeconfig="$STATE/admin.kubeconfig" --port=0 \
    --extra-args="--kubelet-client-certificate=$pki/admin.crt --kubelet-client-key=$pki/admin.key --kubelet-preferred-address-types=InternalIP$(apiserver_args "$node_ip")"
  wait_for "kube-apiserver ready" 120 grep -q '^READY' "$LOGS/apiserver.log" ||
    fail_up "kube-apiserver did not start" "$LOGS/apiserver.log"

  # 2. KCM with the helper controllers only.
  start kcm-helpers "$cp/kcm-e2e-controller-manager" --kubeconfig="$STATE/admin.kubeconfig" \
    --controllers="$HELPERS" --leader-elect=false --secure-port=0 \
    --service-account-private-key-file="$pki/sa.key" --root-ca-file="$pki/ca.crt" --v=2
  sleep 1
  alive kcm-helpers || fail_up "kube-controller-manager exited" "$LOGS/kcm-helpers.log"

  # 3. containerd with its own root, state, sockets and runc root; the CRI
  # plugin's restrict_oom_score_adj because this VM lacks CAP_SYS_RESOURCE.
  cat >"$STATE/containerd/config.toml" <<EOF
version = 2
root = "$STATE/containerd/root"
state = "$STATE/containerd/state"
[grpc]
  address = "$SOCK"
[ttrpc]
  address = "$SOCK.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "$STATE/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$(cat "$images/sandbox-image")"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  disable_tcp_service = true
  stream_server_address = "127.0.0.1"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "$(command -v runc)"
        Root = "$STATE/runc"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$CNI_BIN"
    conf_dir = "$STATE/cni/net.d"
    max_conf_num = 1
EOF
  # 4. The pods' network: a bridge with the node as gateway, no masquerade,
  # no routes beyond the bridge subnet (nothing leaves the machine).
  cat >"$STATE/cni/net.d/10-kcm-rs-node.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "kcm-rs-node",
  "plugins": [{
    "type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "ipMasq": false, "hairpinMode": true,
    "ipam": {"type": "host-local", "ranges": [[{"subnet": "$POD_SUBNET"}]], "dataDir": "$STATE/cni/ipam"$(pod_routes)}
  }]
}
EOF
  start containerd containerd --config "$STATE/containerd/config.toml"
  wait_for "containerd ready" 30 ctr --address "$SOCK" version || fail_up "containerd did not start" "$LOGS/containerd.log"
  local archive
  for archive in "$images"/*.tar; do
    ctr --address "$SOCK" -n k8s.io images import --all-platforms "$archive" >/dev/null ||
      fail_up "importing $archive into containerd failed" "$LOGS/containerd.log"
  done

  # 5. kube-scheduler and the kubelet.
  start kube-scheduler "$nb/kcm-node-scheduler" --kubeconfig="$STATE/admin.kubeconfig" \
    --leader-elect=false --secure-port=0 --v=2
  : >"$STATE/kubelet/resolv.conf"
  cat >"$STATE/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $node_ip
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
containerRuntimeEndpoint: unix://$SOCK
# This VM: cgroup v1 (hybrid), no cgroup-per-QoS hierarchy, no swap.
cgroupDriver: cgroupfs
failCgroupV1: false
cgroupsPerQOS: false
enforceNodeAllocatable: []
failSwapOn: false
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $pki/ca.crt}
authorization: {mode: Webhook}
podLogsDir: $STATE/pod-logs
resolvConf: $STATE/kubelet/resolv.conf
# Images cannot be pulled again: never collect them.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
serializeImagePulls: false
EOF
  start kubelet "$nb/kcm-node-kubelet" --config="$STATE/kubelet/config.yaml" \
    --kubeconfig="$STATE/admin.kubeconfig" --root-dir="$STATE/kubelet" \
    --hostname-override="$NODE_NAME" --node-ip="$node_ip" --v=2
  wait_for "node $NODE_NAME registered" 90 kc get node "$NODE_NAME" ||
    fail_up "the kubelet did not register the node" "$LOGS/kubelet.log"
  wait_for "node $NODE_NAME Ready" 120 kc wait --for=condition=Ready --timeout=1s node "$NODE_NAME" ||
    fail_up "the node did not become Ready" "$LOGS/kubelet.log" "$LOGS/containerd.log"
  # node-lifecycle-controller lifts the not-ready taint.
  untainted() { [[ -z "$(kc get node "$NODE_NAME" -o jsonpath='{.spec.taints}')" ]]; }
  wait_for "node $NODE_NAME untainted" 60 untainted ||
    fail_up "the node keeps a taint: $(kc get node "$NODE_NAME" -o jsonpath='{.spec.taints}')" "$LOGS/kcm-helpers.log"
  wait_for "ServiceAccount default/default" 60 kc -n default get serviceaccount default ||
    fail_up "no default ServiceAccount" "$LOGS/kcm-helpers.log"
  start_kube_proxy
  for c in apiserver kcm-helpers containerd kube-scheduler kubelet; do
    alive "$c" || fail_up "$c exited" "$LOGS/$c.log"
  done
  say "up in $(($(date +%s) - began))s: Kubernetes $version, node $NODE_NAME ($node_ip), pods on $POD_SUBNET"
  say "logs in $LOGS; stop everything with: e2e/realnode/node.sh down"
  env_
}

env_() {
  [[ -f "$STATE/version" ]] || { err "no real node is up (node.sh up starts one)"; exit 1; }
  echo "KUBECONFIG=$STATE/admin.kubeconfig"
  echo "K8S_VERSION=$(cat "$STATE/version")"
  echo "NODE_NAME=$NODE_NAME"
  echo "KUBECTL=$(cp_bin 1.34)/kcm-e2e-kubectl"
}

# lock_check up|down: go on only if the lock is free or ours (a caller's
# session, or for down the holder `up` left).
lock_check() {
  lock_free && return 0
  lock_ours && return 0
  [[ "$1" == down ]] && up_holder >/dev/null && return 0
  lock_refuse "$1"
}
lock_refuse() {
  if [[ "$1" == up ]]; then
    err "the real node is in use: another session holds $LOCK; not starting a second node"
  else
    err "the real node is another session's: it holds $LOCK; not tearing its node down"
  fi
  lock_holder | sed 's/^/  holder: /' >&2
  echo "  wait for it with: e2e/realnode/node.sh session [--version 1.N] -- CMD... (make realnode-session CMD=...)," >&2
  echo "  or flock -w 10800 $LOCK <your commands>; a holder named kcm-rs-node-lock is a node started by" >&2
  echo "  node.sh up outside a session: node.sh down ends it, once its user is done (docs/real-node.md)" >&2
  exit 1
}
# lock_take: takes the lock for a node started outside a session and prints
# the pid of the process that keeps it (a sleep holding the descriptor,
# named kcm-rs-node-lock) until down ends it.
lock_take() {
  local fd
  exec {fd}>>"$LOCK"
  flock -n "$fd" || return 1
  setsid bash -c 'exec -a kcm-rs-node-lock sleep infinity' </dev/null >/dev/null 2>&1 &
  echo $!
}
# up_holder: the pid of the holder `up` left, if it still runs.
up_holder() {
  local pid
  pid="$(cat "$STATE/pids/lock" 2>/dev/null)" || return 1
  [[ -n "$pid" ]] && [[ "$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)" == kcm-rs-node-lock* ]] && echo "$pid"
}

# down: idempotent and best effort: each step runs even if one before failed.
down() {
  local failed=0 c holder
  lock_check down
  holder="$(up_holder || true)"
  # The kubelet first, so it restarts nothing; then the pods through CRI
  # (StopPodSandbox runs CNI DEL: veths, IPs, network namespaces).
  stop kubelet 20
  for c in kube-proxy kube-scheduler kcm-helpers; do stop "$c"; done
  if alive containerd; then
    local nb
    nb="$(node_bin "$(cat "$STATE/version" 2>/dev/null || echo 1.34)")"
    if [[ -x "$nb/kcm-node-cri" ]]; then
      "$nb/kcm-node-cri" --endpoint "$SOCK" cleanup || failed=1
    fi
  fi
  stop containerd 20
  # Shims outlive containerd by design; after the cleanup above none should
  # run, but a killed containerd can leave some behind.
  local pid args
  while read -r pid args; do
    [[ -z "$pid" ]] && continue
    say "stopping leftover process $pid: $args"
    kill -KILL "$pid" 2>/dev/null || true
  done < <(our_processes | grep -v kcm-e2e-apiserver || true)
  # Containers whose runtime died before them (a killed containerd or
  # shim): runc still has their state; delete --force kills what runs and
  # removes their cgroups.
  local ns_root id
  for ns_root in "$STATE"/runc/*/; do
    [[ -d "$ns_root" ]] || continue
    for id in $(runc --root "$ns_root" list -q 2>/dev/null); do
      say "removing container $id left by a dead runtime"
      runc --root "$ns_root" delete --force "$id" || failed=1
    done
  done
  stop apiserver 20
  # Anything still running of ours (a pid file lost to a crash).
  while read -r pid args; do
    [[ -z "$pid" ]] && continue
    say "stopping leftover process $pid: $args"
    kill -KILL "$pid" 2>/dev/null || true
  done < <(our_processes)
  sleep 0.3

  # Mounts: the kubelet's root and pod volumes, containerd's snapshots and
  # sandbox /dev/shm, the pods' network namespaces.
  local m
  while read -r m; do
    [[ -z "$m" ]] && continue
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || { err "cannot unmount $m"; failed=1; }
  done < <(mounts_under "$STATE")

  # Network: the bridge (veths went with their namespaces), our chains.
  if ip link show "$BRIDGE" >/dev/null 2>&1; then ip link del "$BRIDGE" || failed=1; fi
  local ipt t chain rule
  for ipt in iptables ip6tables; do
    for t in filter nat mangle raw; do
      for chain in $(chains "$ipt" "$t"); do
        # KUBE-* chains that were there before `up` are not ours.
        if [[ -f "$BASELINE" ]] && grep -qx -- "-N $chain" <(awk -v s="## $ipt $t" '$0 == s { on = 1; next } /^## / { on = 0 } on' "$BASELINE"); then
          continue
        fi
        while read -r rule; do
          [[ -z "$rule" ]] && continue
          eval "$ipt -t $t ${rule/-A /-D }" 2>/dev/null || true
        done < <("$ipt" -t "$t" -S 2>/dev/null | grep -E -- "-j $chain( |$)" || true)
        "$ipt" -t "$t" -F "$chain" 2>/dev/null || true
        "$ipt" -t "$t" -X "$chain" 2>/dev/null || { err "cannot delete $ipt -t $t chain $chain"; failed=1; }
      done
    done
  done

  # Kernel settings back to what they were before `up`.
  if [[ -f "$BASELINE" ]]; then
    local s v
    while read -r s _ v; do
      [[ -z "$s" || "$v" == absent ]] && continue
      [[ "$(sysctl -n "$s" 2>/dev/null)" == "$v" ]] || sysctl -qw "$s=$v" || failed=1
    done < <(awk '$0 == "## sysctl" { on = 1; next } /^## / { on = 0 } on' "$BASELINE")
  fi

  # Cgroups runc made for the pods (it removes them on delete; a killed
  # runtime does not).
  # A container's last processes may take a moment to go: retry for 10 s.
  local d left i
  for ((i = 0; i < 20; i++)); do
    left=0
    while read -r d; do
      [[ -z "$d" ]] && continue
      rmdir "$d" 2>/dev/null || left=1
    done < <(pod_cgroups)
    [[ $left -eq 0 ]] && break
    sleep 0.5
  done
  [[ $left -eq 0 ]] || { err "cgroups remain: $(pod_cgroups | tr '\n' ' ')"; failed=1; }

  # Default paths the components created although everything is configured
  # into $STATE (containerd 1.6's shim sockets in /run/containerd/s, CNI's
  # result cache, the kubelet's /var/log/containers links): removed when
  # they did not exist before `up`.
  # containerd 1.6 puts shim sockets in /run/containerd/s whatever its
  # config says, named sha256(<containerd address>/<namespace>/<id>); a
  # killed shim leaves its socket. Remove ours by name.
  local task ns
  for task in "$STATE"/containerd/state/io.containerd.runtime.v2.task/*/*/; do
    [[ -d "$task" ]] || continue
    id="$(basename "$task")"; ns="$(basename "$(dirname "$task")")"
    rm -f "/run/containerd/s/$(printf '%s' "$SOCK/$ns/$id" | sha256sum | cut -d' ' -f1)"
  done
  if [[ -n "$(other_containerd)" ]]; then
    say "another containerd runs here (not ours): leaving ${HOST_PATHS[*]} as they are"
  elif [[ -f "$BASELINE" ]]; then
    local p
    for p in "${HOST_PATHS[@]}"; do
      if [[ -e "$p" ]] && ! awk '$0 == "## paths" { on = 1; next } /^## / { on = 0 } on' "$BASELINE" | grep -qx -- "$p"; then
        rm -rf -- "$p" || failed=1
      fi
    done
  fi
  find /var/log/containers -maxdepth 1 -type l -lname "$STATE/*" -delete 2>/dev/null || true

  if [[ -n "$(mounts_under "$STATE")" ]]; then
    err "mounts remain under $STATE; not removing it"
    failed=1
  else
    rm -rf -- "$STATE" || failed=1
  fi
  # The lock goes with the node (a session's goes when the session ends).
  [[ -n "$holder" ]] && { kill "$holder" 2>/dev/null || true; }
  if [[ $failed -ne 0 ]]; then err "teardown incomplete (see above)"; return 1; fi
  say "down: everything stopped and removed"
}

# session [--version 1.N] [--wait SECONDS] -- CMD...: waits for the lock
# (default 3 hours), brings the node up, runs CMD with KUBECONFIG,
# K8S_VERSION, NODE_NAME and KUBECTL exported, then always tears down and
# checks that nothing is left; exits with CMD's status (1 if CMD passed but
# the teardown did not).
session() {
  local version=1.34 wait="${KCM_NODE_LOCK_WAIT:-10800}" args=("$@")
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --version) version="${2:?--version needs a value such as 1.37}"; shift ;;
      --version=*) version="${1#--version=}" ;;
      --wait) wait="${2:?--wait needs seconds}"; shift ;;
      --) shift; break ;;
      *) err "unknown argument $1 (usage: node.sh session [--version 1.N] [--wait SECONDS] -- CMD...)"; exit 2 ;;
    esac
    shift
  done
  [[ $# -gt 0 ]] || { err "no command (usage: node.sh session [--version 1.N] [--wait SECONDS] -- CMD...)"; exit 2; }
  KCM_NODE_LOCK_WAIT="$wait" hold_lock "$REALNODE_DIR/node.sh" session "${args[@]}"
  local rc=0
  session_began=$(date +%s)
  session_end() {
    local rc=$?
    trap - EXIT INT TERM
    say "session: tearing down"
    down || rc=$((rc ? rc : 1))
    "$REALNODE_DIR/check-clean.sh" >&2 || rc=$((rc ? rc : 1))
    say "session: $(($(date +%s) - session_began))s, exit $rc"
    exit "$rc"
  }
  trap session_end EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  up --version "$version" >/dev/null
  eval "$(env_)"
  export KUBECONFIG K8S_VERSION NODE_NAME KUBECTL
  say "session: running $*"
  local fd close=""
  for fd in $(lock_fds); do close+=" $fd>&-"; done
  # CMD does not keep the lock either: a process it leaves behind must
  # not hold the next session off.
  eval "\"\$@\" $close" || rc=$?
  exit "$rc"
}

case "${1:-}" in
  up) shift; up "$@" ;;
  down) down ;;
  env) env_ ;;
  session) shift; session "$@" ;;
  *) err "usage: node.sh up [--version 1.N] | down | env | session [--version 1.N] [--wait SECONDS] -- CMD..."; exit 2 ;;
esac
