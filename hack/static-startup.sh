#!/usr/bin/env bash
# The static release binary in a bare root: the image's one layer unpacked
# from an OCI archive (make image-oci / make release-artifacts) and nothing
# else but what a container runtime adds (/proc, /dev, /etc/hosts,
# /etc/resolv.conf), run as nonroot (65532) against a local control plane
# holding N pods; times its start to Ready (/readyz 200) and reads its RSS
# there. The API server is named three ways: by IP (as in a pod:
# KUBERNETES_SERVICE_HOST), by a name in /etc/hosts, and by a short name that
# only DNS with a pod's search domains resolves (a DNS server on 127.0.0.1:53
# answering kubernetes.default.svc.cluster.local, as cluster DNS does).
# Needs root (chroot, mounts, port 53). Run it under the measurement lock:
#   flock /tmp/kcm-measure.lock hack/static-startup.sh dist/kcm-rs-0.2.0.oci.tar
# usage: hack/static-startup.sh ARCHIVE [PODS (1000)] [ROUNDS (5)]
set -euo pipefail
cd "$(dirname "$0")/.."
archive="$(realpath "${1:?usage: $0 ARCHIVE [PODS] [ROUNDS]}")"
pods="${2:-1000}"
rounds="${3:-5}"
[[ $(id -u) == 0 ]] || { echo "error: needs root (chroot, mounts, port 53)" >&2; exit 1; }
apiserver="$(make -s print-e2e-bin)/kcm-e2e-apiserver"
[[ -x "$apiserver" ]] || make --no-print-directory controlplane >&2
work="$(mktemp -d /tmp/kcm-static-startup.XXXXXX)"
root="$work/root"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# The image's layer for this machine's architecture, and nothing else.
arch="$(python3 -c 'import platform; print({"x86_64": "amd64", "aarch64": "arm64"}[platform.machine()])')"
python3 - "$archive" "$arch" "$root" <<'EOF'
import gzip, io, json, sys, tarfile
archive, arch, root = sys.argv[1:]
with tarfile.open(archive) as t:
    blob = lambda d: t.extractfile("blobs/sha256/" + d.split(":")[1]).read()
    index = json.loads(blob(json.loads(t.extractfile("index.json").read())["manifests"][0]["digest"]))
    m = next(m for m in index["manifests"] if m["platform"]["architecture"] == arch)
    for layer in json.loads(blob(m["digest"]))["layers"]:
        with tarfile.open(fileobj=io.BytesIO(gzip.decompress(blob(layer["digest"])))) as lt:
            lt.extractall(root, numeric_owner=True)
EOF
layer="$(cd "$root" && find . -mindepth 1 | LC_ALL=C sort | tr '\n' ' ')"
mkdir -p "$root/proc" "$root/dev"
bin="$root/usr/local/bin/kcm-rs"
size="$(stat -c %s "$bin")"

# A control plane with N pods (unscheduled: nothing changes them).
"$apiserver" --dir "$work/cp" --exit-on-stdin-close < <(sleep infinity) >"$work/cp.log" 2>&1 &
pids+=($!)
for _ in $(seq 180); do grep -q '^READY ' "$work/cp.log" && break; sleep 1; done
grep -q '^READY ' "$work/cp.log" || { tail "$work/cp.log" >&2; echo "error: the API server did not start" >&2; exit 1; }
server="$(sed -n 's/^READY [^ ]* //p' "$work/cp.log")"
port="${server##*:}"
cp_dir="$work/cp"
curl_api() { curl -sf --cacert "$cp_dir/ca.crt" --cert "$cp_dir/admin.crt" --key "$cp_dir/admin.key" "$@"; }
curl_api -X POST -H 'Content-Type: application/json' "$server/api/v1/namespaces/default/serviceaccounts" \
  -d '{"metadata":{"name":"default"}}' >/dev/null || true
seq "$pods" | xargs -P 8 -I{} curl -sf --cacert "$cp_dir/ca.crt" --cert "$cp_dir/admin.crt" --key "$cp_dir/admin.key" \
  -X POST -H 'Content-Type: application/json' "$server/api/v1/namespaces/default/pods" \
  -d '{"metadata":{"name":"p-{}","labels":{"app":"startup"}},"spec":{"automountServiceAccountToken":false,"containers":[{"name":"c","image":"busybox"}]}}' -o /dev/null
have="$(curl_api "$server/api/v1/pods?limit=1" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["metadata"].get("remainingItemCount", 0) + len(d["items"]))')"

# Three kubeconfigs, the admin's credentials, the server named three ways.
kubeconfig() {
  sed "s#server: https://127.0.0.1:$port#server: https://$1:$port#" "$cp_dir/admin.kubeconfig" >"$root/kubeconfig-$2"
  chmod 644 "$root/kubeconfig-$2"
}
kubeconfig 127.0.0.1 ip
kubeconfig kubernetes hosts
kubeconfig kubernetes.default.svc dns
printf '127.0.0.1\tlocalhost\n127.0.0.1\tkubernetes\n' >"$root/etc/hosts"
printf 'nameserver 127.0.0.1\nsearch default.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n' >"$root/etc/resolv.conf"
python3 - >"$work/dns.log" 2>&1 <<'EOF' &
import socket, struct
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("127.0.0.1", 53))
while True:
    q, addr = s.recvfrom(512)
    tid = struct.unpack(">H", q[:2])[0]
    i, labels = 12, []
    while q[i]:
        labels.append(q[i + 1:i + 1 + q[i]].decode()); i += 1 + q[i]
    qtype = struct.unpack(">H", q[i + 1:i + 3])[0]
    name = ".".join(labels)
    hit = name == "kubernetes.default.svc.cluster.local"
    ans = b"\xc0\x0c" + struct.pack(">HHIH", 1, 1, 30, 4) + socket.inet_aton("127.0.0.1") if hit and qtype == 1 else b""
    s.sendto(struct.pack(">HHHHHH", tid, 0x8180 | (0 if hit else 3), 1, 1 if ans else 0, 0, 0) + q[12:i + 5] + ans, addr)
    print(name, "A" if qtype == 1 else qtype, "->", "127.0.0.1" if ans else ("NOERROR" if hit else "NXDOMAIN"), flush=True)
EOF
pids+=($!)
sleep 0.5

# One start: in new mount and pid namespaces, /proc and /dev mounted into
# the root, chroot as 65532; milliseconds from exec to /readyz 200, and RSS.
start() {
  local mode="$1" probe_port
  probe_port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  local t0 t1 rss
  t0="$(date +%s%N)"
  unshare --mount --pid --fork bash -c '
    root="$1"; shift
    mount -t proc proc "$root/proc" && mount --bind /dev "$root/dev" &&
    exec chroot --userspec=65532:65532 "$root" "$@"' _ "$root" /usr/local/bin/kcm-rs \
    --kubeconfig="/kubeconfig-$mode" --leader-elect=false --controllers='*' \
    --bind-address=127.0.0.1 --secure-port=0 --health-port="$probe_port" >"$work/kcm-rs-$mode.log" 2>&1 &
  local pid=$!
  for _ in $(seq 6000); do
    if [[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$probe_port/readyz")" == 200 ]]; then break; fi
    if ! kill -0 "$pid" 2>/dev/null; then echo "FAILED"; tail -5 "$work/kcm-rs-$mode.log" >&2; return; fi
    sleep 0.01
  done
  t1="$(date +%s%N)"
  # unshare --fork's child: bash, exec'd into chroot, then into kcm-rs.
  local child; child="$(pgrep -P "$pid" | head -1 || true)"
  rss="$(awk '/VmRSS/ {print $2}' "/proc/${child:-0}/status" 2>/dev/null || echo "?")"
  kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true
  echo "$(( (t1 - t0) / 1000000 )) ${rss}"
}

ip_times=()
for _ in $(seq "$rounds"); do ip_times+=("$(start ip)"); done
hosts="$(start hosts)"
dns="$(start dns)"
median() { printf '%s\n' "$@" | awk '{print $1}' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

cat <<EOF
# The static binary in a bare root, start to Ready against $have pods

\`hack/static-startup.sh $(basename "$archive") $pods $rounds\`, $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, kube-apiserver $(curl_api "$server/version" | python3 -c 'import json,sys; print(json.load(sys.stdin)["gitVersion"])') (local control plane, e2e/harness).

The root holds the image's layer for linux/$arch and nothing else: \`$layer\`; the runtime's part: /proc and /dev mounted, /etc/hosts and /etc/resolv.conf written (as a kubelet does). kcm-rs runs there as 65532:65532 (\`unshare --mount --pid\`, \`chroot --userspec\`), all four controllers, no leader election.

- binary: $(basename "$bin") $size bytes ($(awk "BEGIN {printf \"%.1f\", $size/1048576}") MiB); \`file\`: $(file -b "$bin" | cut -d, -f1-4); \`ldd\`: $(ldd "$bin" 2>&1 | head -1 | sed 's/^[[:space:]]*//'); program headers: $(readelf -lW "$bin" | awk '/^  [A-Z]/ {print $1}' | sort -u | tr '\n' ' '); \`DT_NEEDED\`: $(readelf -dW "$bin" | grep -c NEEDED || true)
- \`kcm-rs --version\` in the root: $(chroot --userspec=65532:65532 "$root" /usr/local/bin/kcm-rs --version 2>&1 | head -1)

| API server named | rounds | start to /readyz 200 (ms) | RSS at Ready (KiB) |
|---|---|---|---|
| by IP, \`https://127.0.0.1:$port\` (in a pod: KUBERNETES_SERVICE_HOST) | $rounds | median $(median "${ip_times[@]}") (each: $(printf '%s ' "${ip_times[@]}" | awk '{for (i=1;i<=NF;i+=2) printf "%s%s", $i, (i+2<=NF?", ":"")}')) | $(printf '%s\n' "${ip_times[@]}" | awk '{print $2}' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}') |
| by a name in /etc/hosts, \`https://kubernetes:$port\` | 1 | ${hosts%% *} | ${hosts##* } |
| by a short name through DNS and the search domains, \`https://kubernetes.default.svc:$port\` | 1 | ${dns%% *} | ${dns##* } |

The DNS server's log (every query kcm-rs's resolver sent, ndots:5 and the search list applied):

\`\`\`
$(cat "$work/dns.log")
\`\`\`
EOF
