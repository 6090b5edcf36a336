#!/usr/bin/env bash
# Checks that the real node left nothing behind.
#
#   check-clean.sh snapshot   print what the check compares (node.sh up saves
#                             it as target/realnode/baseline before it starts)
#   check-clean.sh            compare the machine with that baseline, and
#                             check what must be gone whatever the baseline
#                             says; exit 1 listing every leftover
#
# What it looks at: processes naming the node's state dir or binaries, mount
# points, network namespaces, network links (cni0, veths), iptables and
# ip6tables rules and chains of every table, the sysctls the kubelet and CNI
# change, cgroups, the default paths of containerd, kubelet and CNI, and
# regular files created under /etc, /opt, /run, /var since the baseline.
set -euo pipefail
# shellcheck source=lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"

snapshot() {
  echo "## mounts"
  awk '{ print $5 }' /proc/self/mountinfo | LC_ALL=C sort -u
  echo "## netns"
  ls -1 /var/run/netns 2>/dev/null || true
  echo "## links"
  ip -o link show | awk -F': ' '{ print $2 }' | sed 's/@.*//' | LC_ALL=C sort
  local t
  for t in filter nat mangle raw; do
    echo "## iptables $t"
    iptables -t "$t" -S 2>/dev/null | LC_ALL=C sort || true
    echo "## ip6tables $t"
    ip6tables -t "$t" -S 2>/dev/null | LC_ALL=C sort || true
  done
  echo "## sysctl"
  local s
  for s in "${SYSCTLS[@]}"; do echo "$s = $(sysctl -n "$s" 2>/dev/null || echo absent)"; done
  echo "## cgroups"
  # process_api: this machine's per-command cgroups come and go.
  find /sys/fs/cgroup -mindepth 2 -maxdepth 4 -type d ! -path '*/process_api*' 2>/dev/null | LC_ALL=C sort
  echo "## paths"
  local p
  for p in "${HOST_PATHS[@]}" "$STATE"; do [[ -e "$p" ]] && echo "$p"; done
  echo "## processes"
  our_processes | cut -d' ' -f2- | LC_ALL=C sort
}

# The sections of a snapshot: "## name" headers, then lines.
section() { awk -v s="## $2" '$0 == s { on = 1; next } /^## / { on = 0 } on' "$1"; }

check() {
  local now problems=0
  now="$(mktemp)"
  snapshot >"$now"
  report() { echo "leftover: $*"; problems=$((problems + 1)); }

  # Whatever the baseline: nothing of ours may run or stay mounted.
  local line
  while read -r line; do [[ -n "$line" ]] && report "process $line"; done < <(our_processes)
  while read -r line; do [[ -n "$line" ]] && report "mount $line"; done < <(mounts_under "$STATE")
  [[ -e "$STATE" ]] && report "directory $STATE"
  ip link show "$BRIDGE" >/dev/null 2>&1 && report "link $BRIDGE"
  while read -r line; do
    [[ -n "$line" ]] && report "cgroup of a container $line"
  done < <(pod_cgroups | grep -E '/[0-9a-f]{64}$' || true)
  local ipt t c
  for ipt in iptables ip6tables; do
    for t in filter nat mangle raw; do
      for c in $(chains "$ipt" "$t" | grep '^CNI-' || true); do report "$ipt -t $t chain $c"; done
    done
  done

  if [[ -f "$BASELINE" ]]; then
    local s added removed
    for s in mounts netns links "iptables filter" "iptables nat" "iptables mangle" "iptables raw" \
      "ip6tables filter" "ip6tables nat" "ip6tables mangle" "ip6tables raw" sysctl cgroups paths processes; do
      added="$(comm -13 <(section "$BASELINE" "$s" | LC_ALL=C sort) <(section "$now" "$s" | LC_ALL=C sort))"
      removed="$(comm -23 <(section "$BASELINE" "$s" | LC_ALL=C sort) <(section "$now" "$s" | LC_ALL=C sort))"
      while read -r line; do [[ -n "$line" ]] && report "$s: new since up: $line"; done <<<"$added"
      while read -r line; do [[ -n "$line" ]] && report "$s: gone or changed since up: $line"; done <<<"$removed"
    done
    # Regular files created since up, outside the project and the caches.
    while read -r line; do
      [[ -n "$line" ]] && report "file created since up: $line"
    done < <(find /etc /opt /run /var -xdev -newer "$BASELINE" ! -type d \
      ! -path '/var/cache/*' ! -path '/var/lib/apt/*' ! -path '/var/lib/dpkg/*' ! -path '/var/log/*' \
      ! -path '/var/tmp/*' ! -path '/run/user/*' -print 2>/dev/null | head -n 50)
  else
    echo "no baseline at $BASELINE (node.sh up writes it): checked only what must always be gone" >&2
  fi
  rm -f "$now"
  if [[ $problems -gt 0 ]]; then
    err "the real node left $problems thing(s) behind (see above); node.sh down removes them"
    return 1
  fi
  echo "clean: nothing of the real node is left"
}

case "${1:-check}" in
  snapshot) snapshot ;;
  check) check ;;
  *) err "unknown command $1 (usage: check-clean.sh [snapshot|check])"; exit 2 ;;
esac
