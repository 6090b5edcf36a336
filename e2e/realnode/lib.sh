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
    args="$(tr '\0\n' '  ' 2>/dev/null <"/proc/$pid/cmdline")" || continue
    [[ -z "$args" ]] && continue
    case "$args" in
      *check-clean.sh*|*node.sh*) continue ;;
      # The state directory, not a path that merely starts with its name
      # (the lock $STATE.lock in the command of a session waiting for it).
      *"$STATE/"*|*"$STATE "*|*"$STATE") echo "$pid $args" ;;
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
    args="$(tr '\0\n' '  ' 2>/dev/null <"$pid/cmdline")" || continue
    case "${args%% *}" in
      containerd|*/containerd|*/containerd-shim*|containerd-shim*)
        [[ "$args" == *"$STATE"* ]] || echo "${pid#/proc/} $args" ;;
    esac
  done
}

# The machine-wide lock of the node: one session (up .. down) at a time,
# whoever starts it (node.sh session, flock(1) around make realnode-up, or
# node.sh up alone, which leaves a holder process that down ends).
LOCK="${KCM_NODE_LOCK:-/run/kcm-rs-node.lock}"

# Descriptors of this shell open on the lock file.
lock_fds() {
  local fd
  for fd in /proc/$$/fd/*; do
    [[ "$(readlink "$fd" 2>/dev/null)" == "$LOCK" ]] && echo "${fd##*/}"
  done
  return 0
}
lock_free() { flock -n "$LOCK" true 2>/dev/null; }
# lock_ours: the lock is held through a descriptor this shell inherited
# (flock(1) around us, or `exec 9>LOCK; flock 9` in a caller). Only asked
# when the lock is not free: flock on a descriptor whose open file holds
# the lock succeeds at once, on any other it would fail.
lock_ours() {
  local fd
  for fd in $(lock_fds); do flock -n "$fd" 2>/dev/null && return 0; done
  lock_held_by_ancestor
}
# flock -o closes the descriptor in the command it runs: then the holder
# flock(1) names in /proc/locks is one of our ancestors.
lock_held_by_ancestor() {
  local holders pid=$$
  holders=" $(lock_locks_pids holders | tr '\n' ' ') "
  while [[ "$pid" -gt 1 ]]; do
    [[ "$holders" == *" $pid "* ]] && return 0
    pid="$(awk '{ print $4 }' "/proc/$pid/stat" 2>/dev/null)" || return 1
    [[ -n "$pid" ]] || return 1
  done
  return 1
}
# lock_locks_pids holders|waiters: the pids /proc/locks gives for the lock.
lock_locks_pids() {
  [[ -e "$LOCK" ]] || return 0
  local key
  local dev ino
  read -r dev ino < <(stat -L -c '%d %i' "$LOCK")
  # /proc/locks names the file's filesystem as major:minor in hex.
  key="$(printf '%02x:%02x:%s' "$(( ((dev >> 8) & 0xfff) | ((dev >> 32) & ~0xfff) ))" \
    "$(( (dev & 0xff) | ((dev >> 12) & ~0xff) ))" "$ino")"
  if [[ "$1" == waiters ]]; then
    awk -v k="$key" '$2 == "->" && $7 == k { print $6 }' /proc/locks
  else
    awk -v k="$key" '$2 == "FLOCK" && $6 == k { print $5 }' /proc/locks
  fi
}
# lock_holder: who holds the lock, one line per process: the outermost of
# the processes with the lock file open that are not waiting for it (the
# flock(1) of a `flock LOCK cmd`, the holder `up` left, a session), with
# user, age, working directory and command line.
lock_holder() {
  local pid waiters open=() p ppid shown=0
  # A waiter's parent may have the file open too (`exec 9>LOCK; flock 9`).
  waiters=" $(for pid in $(lock_locks_pids waiters); do echo "$pid"; awk '{ print $4 }' "/proc/$pid/stat" 2>/dev/null; done | tr '\n' ' ') "
  for p in /proc/[0-9]*; do
    pid="${p#/proc/}"
    [[ "$waiters" == *" $pid "* ]] && continue
    for fd in "$p"/fd/*; do
      if [[ "$(readlink "$fd" 2>/dev/null)" == "$LOCK" ]]; then open+=("$pid"); break; fi
    done 2>/dev/null
  done
  # A holder in /proc/locks that is still alive is one too.
  for pid in $(lock_locks_pids holders); do
    [[ -d "/proc/$pid" && " ${open[*]} " != *" $pid "* ]] && open+=("$pid")
  done
  for pid in "${open[@]}"; do
    ppid="$(awk '{ print $4 }' "/proc/$pid/stat" 2>/dev/null)" || continue
    [[ " ${open[*]} " == *" $ppid "* ]] && continue
    echo "pid $pid, user $(ps -o user= -p "$pid"), for $(ps -o etime= -p "$pid" | tr -d ' '), in $(readlink "/proc/$pid/cwd" 2>/dev/null): $(tr '\0\n' '  ' <"/proc/$pid/cmdline" 2>/dev/null | tr -s ' ' | cut -c1-300)"
    shown=$((shown + 1))
  done
  [[ $shown -gt 0 ]] || echo "a process that has gone or cannot be seen (pids in /proc/locks: $(lock_locks_pids holders | tr '\n' ' '))"
}
# hold_lock SCRIPT ARGS...: unless a caller holds the lock already, runs
# SCRIPT ARGS again under flock(1) on it, waiting up to $KCM_NODE_LOCK_WAIT
# seconds (3 hours; exit 75 when it runs out) for the session that holds it.
hold_lock() {
  if lock_free || ! lock_ours; then
    if ! lock_free; then
      say "waiting up to ${KCM_NODE_LOCK_WAIT:-10800}s for $LOCK, held by:"
      lock_holder | sed 's/^/  /' >&2
    fi
    local rc=0
    flock -w "${KCM_NODE_LOCK_WAIT:-10800}" -E 75 "$LOCK" "$@" || rc=$?
    [[ $rc -eq 75 ]] && err "gave up waiting for $LOCK after ${KCM_NODE_LOCK_WAIT:-10800}s"
    exit "$rc"
  fi
}
