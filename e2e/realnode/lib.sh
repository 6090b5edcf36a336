# Shared by node.sh and check-clean.sh (sourced, not run): where the real
# node keeps its state, and the helpers both need.
#
# Everything the node writes at run time lives under $STATE (containerd's
# root and state, runc's root, the kubelet's root and pod logs, CNI config
# and IP allocations, pod network namespaces, pid files); logs and the
# baseline of what the machine looked like before `up` live under
# target/realnode/ and outlive `down`.

REALNODE_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$REALNODE_DIR/../.." && pwd)"
STATE="${KCM_NODE_STATE:-/run/kcm-rs-node}"
WORK="$ROOT/target/realnode"
LOGS="$WORK/logs"
BASELINE="$WORK/baseline"
NODE_NAME="${KCM_NODE_NAME:-kcm-rs-node}"
SOCK="$STATE/containerd/containerd.sock"
BRIDGE=cni0
POD_SUBNET="${KCM_NODE_POD_SUBNET:-10.244.0.0/24}"
# Kernel settings the kubelet (vm.*, kernel.*) or the bridge plugin
# (forwarding) may change; `up` records them and `down` restores them.
SYSCTLS=(net.ipv4.ip_forward net.ipv6.conf.all.forwarding net.ipv4.conf.all.route_localnet
  vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
  kernel.keys.root_maxkeys kernel.keys.root_maxbytes)
# Paths outside $STATE that containerd, the kubelet or CNI write by default;
# absent before `up` (the baseline says), they must be absent after `down`.
HOST_PATHS=(/run/containerd /var/lib/containerd /opt/containerd /var/lib/cni /etc/cni /var/run/netns
  /var/lib/kubelet /var/log/pods /var/log/containers /etc/kubernetes)

say() { echo "realnode: $*" >&2; }
err() { echo "error: $*" >&2; }

# The minor's control-plane binaries (e2e/harness/build.sh's cache).
cp_bin() { if [[ "$1" == 1.34 ]]; then echo "$ROOT/target/e2e-bin"; else echo "$ROOT/target/e2e-bin/$1"; fi; }
node_bin() { echo "$WORK/$1/bin"; }

# Our processes: any whose command line names $STATE or a real-node binary.
# Prints "pid args" lines.
our_processes() {
  local pid args
  for pid in /proc/[0-9]*; do
    pid="${pid#/proc/}"
    [[ "$pid" == "$$" || "$pid" == "$BASHPID" ]] && continue
    args="$(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline")" || continue
    [[ -z "$args" ]] && continue
    case "$args" in
      *check-clean.sh*|*node.sh*) continue ;;
      *"$STATE"*) echo "$pid $args" ;;
      *)
        # The node's binaries by what runs, not by a mention (a build's args).
        case "${args%% *}" in */kcm-node-kubelet|*/kcm-node-scheduler) echo "$pid $args" ;; esac ;;
    esac
  done
}

# Mount points at or under $1, deepest first.
mounts_under() {
  awk -v p="$1" '$5 == p || index($5, p "/") == 1 { print $5 }' /proc/self/mountinfo | awk '{ print length, $0 }' | sort -rn | cut -d' ' -f2-
}

# Chains named CNI-* or KUBE-* in table $2 of iptables command $1.
chains() { "$1" -t "$2" -S 2>/dev/null | awk '$1 == "-N" && ($2 ~ /^CNI-/ || $2 ~ /^KUBE-/) { print $2 }'; }

# The cgroups containerd and runc make for pods (cgroupfs driver, no
# per-QoS hierarchy: <controller>/k8s.io/<container id>), deepest first.
pod_cgroups() {
  find /sys/fs/cgroup -mindepth 2 -maxdepth 4 -type d -regextype egrep \
    -regex '.*/(kubepods[^/]*|k8s\.io|k8s\.io/[0-9a-f]{64})$' 2>/dev/null |
    awk '{ print length, $0 }' | sort -rn | cut -d' ' -f2-
}

# containerd or shim processes that are not ours (another runtime on this
# machine, whose default paths `down` must then leave alone).
other_containerd() {
  local pid args
  for pid in /proc/[0-9]*; do
    args="$(tr '\0' ' ' 2>/dev/null <"$pid/cmdline")" || continue
    case "${args%% *}" in
      containerd|*/containerd|*/containerd-shim*|containerd-shim*)
        [[ "$args" == *"$STATE"* ]] || echo "${pid#/proc/} $args" ;;
    esac
  done
}
