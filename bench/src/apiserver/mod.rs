//! W8: what each controller manager costs the API server (issue 40). One
//! control plane for both managers, the W4 cluster (nodes, PDBs, Job pods
//! and unrelated pods) grown to each size in turn; at each size, after one
//! unmeasured start of each manager (so the Job and PDB statuses are
//! written before anything is measured), `repeat` rounds, each measuring
//! KCM and kcm-rs one after the other (the order alternating by round):
//!
//! - **start-up**: the manager started against the API server directly
//!   (TLS; HTTP/2 where the client speaks it), measured over a fixed
//!   window (10 s plus 1 s per 1,000 pods; the manager is quiet well
//!   before): the API server's CPU and peak RSS (and its growth over the
//!   RSS before), the manager's CPU and peak RSS, the most TCP
//!   connections the manager held to the API server, how long until its
//!   CPU was quiet, and the writes it made (the API server's counters);
//! - **relist storm** (at the sizes asked for): the manager started
//!   through the fault proxy, settled, then every connection cut and the
//!   first resumed watch of each collection answered 410
//!   ([`FaultProxy::gone_once_per_watch`]): every informer relists once.
//!   Measured over 20 s from the cut; the proxy's records say what each
//!   manager asked for ([`requests`]). Both managers talk plain HTTP/1.1
//!   to the proxy here, so the row isolates the relist path, not the
//!   transport.
//!
//! The API server (kube-apiserver with its embedded etcd, one Go
//! process) collects its garbage in cycles whose CPU (about 2 CPU-s at
//! 20,000 pods) lands in whichever window the heap crosses its goal in,
//! whoever allocated most of it: each phase starts right after a forced
//! collection, and the rows show the collector's share and what the
//! phase allocated beside the total (the runtime's own counters).
//!
//! Rows report each figure's median over the rounds; the notes list every
//! round's API server CPU for both (the spread).
//!
//! `KCM_BENCH_PPROF=<dir>`: the API server's CPU profile over each
//! measured window (its `/debug/pprof/profile`), written to
//! `<dir>/<manager>-<phase>-<pods>-<n>.pprof` for `go tool pprof`.

pub mod requests;

use std::collections::HashSet;
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context;

use super::common::{Env, Impl, Manager, ServerCost, request_counts, spawn_manager_via};
use super::memory::{CONTROLLERS, grow};
use super::results::{Metric, Workload};
use kcm_e2e::faults::{Fault, FaultProxy, FaultSettings};
use kcm_e2e::{ControlPlane, TestNamespace};

/// One measured phase.
#[derive(Debug, Clone, Default)]
pub struct Phase {
    pub pods: usize,
    pub server: ServerCost,
    /// The API server's RSS when the phase began, MiB.
    pub server_rss_before_mib: f64,
    pub cpu_s: f64,
    pub peak_rss_mib: f64,
    /// Most TCP connections from the manager to the API server (or the
    /// proxy) seen, sampled every 200 ms.
    pub connections: usize,
    /// From the phase's start until the manager's CPU was quiet.
    pub seconds: f64,
    /// Writes the API server served during the phase (its counters).
    pub writes: f64,
    /// The API server's Go runtime over the phase: what of its CPU the
    /// garbage collector took, and how much it allocated (what drives the
    /// collector's later work).
    pub go: GoStats,
    /// The requests of a storm by kind (from the proxy's records), e.g.
    /// `streaming list pods at a version: 1`.
    pub requests: Vec<(String, usize)>,
}

/// Every measured phase of one manager, in the order run: per size, its
/// start-ups (one per round), then its storms.
#[derive(Debug, Clone, Default)]
pub struct CostRun {
    pub startups: Vec<Vec<Phase>>,
    pub storms: Vec<Vec<Phase>>,
}

/// Established TCP connections of `pid` to `port` on this host (its
/// socket inodes in `/proc/<pid>/fd` against its network namespace's
/// `/proc/<pid>/net/tcp{,6}`).
pub fn connections_to(pid: u32, port: u16) -> usize {
    let inodes: HashSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .filter_map(|l| {
            let l = l.to_string_lossy().into_owned();
            Some(l.strip_prefix("socket:[")?.strip_suffix(']')?.to_string())
        })
        .collect();
    let port_hex = format!(":{port:04X}");
    ["tcp", "tcp6"]
        .iter()
        .filter_map(|f| std::fs::read_to_string(format!("/proc/{pid}/net/{f}")).ok())
        .map(|table| {
            table
                .lines()
                .skip(1)
                .filter(|line| {
                    let c: Vec<&str> = line.split_whitespace().collect();
                    // rem_address, st (01: established), inode
                    c.len() > 9
                        && c[2].ends_with(&port_hex)
                        && c[3] == "01"
                        && inodes.contains(c[9])
                })
                .count()
        })
        .sum()
}

/// The API server's Go runtime counters (its `/metrics`; kube-apiserver
/// exports every runtime metric).
#[derive(Debug, Clone, Copy, Default)]
pub struct GoStats {
    /// `/cpu/classes/gc/total:cpu-seconds`: the runtime's estimate of the
    /// CPU its garbage collector used.
    pub gc_cpu_s: f64,
    /// `/gc/heap/allocs:bytes`, MiB.
    pub alloc_mib: f64,
    /// `/gc/cycles/total:gc-cycles`.
    pub gc_cycles: f64,
}

impl GoStats {
    /// Reads the counters from a `/metrics` text.
    pub fn parse(metrics: &str) -> GoStats {
        let value = |name: &str| {
            metrics
                .lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
                .unwrap_or(f64::NAN)
        };
        GoStats {
            gc_cpu_s: value("go_cpu_classes_gc_total_cpu_seconds_total"),
            alloc_mib: value("go_gc_heap_allocs_bytes_total") / (1024.0 * 1024.0),
            gc_cycles: value("go_gc_cycles_total_gc_cycles_total"),
        }
    }

    fn since(self, before: GoStats) -> GoStats {
        GoStats {
            gc_cpu_s: self.gc_cpu_s - before.gc_cpu_s,
            alloc_mib: self.alloc_mib - before.alloc_mib,
            gc_cycles: self.gc_cycles - before.gc_cycles,
        }
    }
}

const QUIET_MIN: Duration = Duration::from_secs(5);
const QUIET_MAX: Duration = Duration::from_secs(600);
const STORM_WINDOW: Duration = Duration::from_secs(20);

/// Waits until `mgr`'s CPU is quiet (under 20 ms per second for three
/// seconds in a row) after at least `min`, at most `max`, then until
/// `window` has passed in all; samples the connections to `port`
/// meanwhile. Returns (seconds to quiet, most connections). The API
/// server's CPU is read over the whole `window`, the same for both
/// managers, so its background work weighs the same in both.
async fn settle(mgr: &Manager, port: u16, window: Duration) -> (f64, usize) {
    let t0 = Instant::now();
    let (quiet_s, mut most) = settle_quiet(mgr, port).await;
    while t0.elapsed() < window {
        most = most.max(connections_to(mgr.pid, port));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    (quiet_s, most)
}

async fn settle_quiet(mgr: &Manager, port: u16) -> (f64, usize) {
    let t0 = Instant::now();
    let mut most = 0;
    let mut last_cpu = mgr.cpu();
    let mut last_check = Instant::now();
    let mut quiet = 0;
    loop {
        most = most.max(connections_to(mgr.pid, port));
        tokio::time::sleep(Duration::from_millis(200)).await;
        if last_check.elapsed() >= Duration::from_secs(1) {
            let cpu = mgr.cpu();
            let per_s = (cpu - last_cpu) / last_check.elapsed().as_secs_f64();
            (last_cpu, last_check) = (cpu, Instant::now());
            quiet = if per_s < 0.02 { quiet + 1 } else { 0 };
        }
        let waited = t0.elapsed();
        if (waited >= QUIET_MIN && quiet >= 3) || waited >= QUIET_MAX {
            // The quiet seconds are not part of the phase.
            return ((waited.as_secs_f64() - 3.0).max(0.0), most);
        }
    }
}

/// What one manager's run needs of the cluster.
struct Cluster {
    cp: ControlPlane,
    port: u16,
    client: kube::Client,
}

impl Cluster {
    fn rss(&self) -> f64 {
        kcm_e2e::procstat::rss_mib(self.cp.pid()).unwrap_or(0.0)
    }

    async fn go(&self) -> GoStats {
        let req = http::Request::get("/metrics").body(Vec::new());
        match req {
            Ok(req) => match self.client.request_text(req).await {
                Ok(text) => GoStats::parse(&text),
                Err(_) => GoStats::parse(""),
            },
            Err(_) => GoStats::parse(""),
        }
    }

    /// Has the API server collect its garbage now (a heap profile taken
    /// after a collection, `?gc=1`, discarded), so each phase starts with
    /// the same headroom before the next collection: which phase a
    /// collection falls in then depends on what the phase allocates, not
    /// on what the phases before it did.
    async fn collect_garbage(&self) {
        if let Ok(req) = http::Request::get("/debug/pprof/heap?gc=1").body(Vec::new()) {
            let _ = self.client.request_text(req).await;
        }
    }

    async fn writes(&self) -> f64 {
        match request_counts(&self.client).await {
            Ok(c) => requests::writes(&c),
            Err(_) => f64::NAN,
        }
    }
}

fn phase(
    mgr: &Manager,
    pods: usize,
    server_cpu0: f64,
    rss0: f64,
    cpu0: f64,
    s: (f64, usize),
) -> Phase {
    Phase {
        pods,
        server: mgr.server_cost(server_cpu0),
        server_rss_before_mib: rss0,
        cpu_s: mgr.cpu() - cpu0,
        peak_rss_mib: mgr.peak_rss(),
        connections: s.1,
        seconds: s.0,
        ..Phase::default()
    }
}

/// Starts taking the API server's CPU profile over the next `secs`
/// seconds when `KCM_BENCH_PPROF` names a directory; the returned task
/// writes it there.
fn profile(
    c: &Cluster,
    imp: Impl,
    what: &str,
    pods: usize,
    secs: u64,
) -> Option<tokio::task::JoinHandle<()>> {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let dir = std::path::PathBuf::from(std::env::var_os("KCM_BENCH_PPROF")?);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = dir.join(format!("{}-{what}-{pods}-{n}.pprof", imp.label()));
    let client = c.client.clone();
    Some(tokio::spawn(async move {
        let req =
            http::Request::get(format!("/debug/pprof/profile?seconds={secs}")).body(Vec::new());
        let got = async {
            let mut body = Vec::new();
            let mut stream = client.request_stream(req?).await?;
            futures::AsyncReadExt::read_to_end(&mut stream, &mut body).await?;
            std::fs::create_dir_all(&dir)?;
            std::fs::write(&path, body)?;
            anyhow::Ok(())
        };
        if let Err(e) = got.await {
            eprintln!("pprof {}: {e:#}", path.display());
        }
    }))
}

/// Stops `mgr` and lets the API server close its watches before the
/// next phase.
async fn stop(mgr: Manager) {
    mgr.stop().await;
    tokio::time::sleep(Duration::from_secs(3)).await;
}

/// `imp` with W8's controllers and QPS (20/30), reaching the API server
/// through `kubeconfig` (direct, or the fault proxy's).
fn spawn_w8(
    env: &Env,
    c: &Cluster,
    kubeconfig: &std::path::Path,
    imp: Impl,
) -> anyhow::Result<Manager> {
    spawn_manager_via(env, &c.cp, kubeconfig, imp, &CONTROLLERS, 20, 30, &[])
}

/// One start-up of `imp` at `pods`, direct to the API server.
async fn startup(env: &Env, c: &Cluster, imp: Impl, pods: usize) -> anyhow::Result<Phase> {
    let rss0 = c.rss();
    let writes0 = c.writes().await;
    c.collect_garbage().await;
    let go0 = c.go().await;
    let window = Duration::from_secs(10 + pods as u64 / 1000);
    let prof = profile(c, imp, "startup", pods, window.as_secs());
    let mgr = spawn_w8(env, c, c.cp.kubeconfig(), imp)?;
    let s = settle(&mgr, c.port, window).await;
    if let Some(t) = prof {
        let _ = t.await;
    }
    let mut p = phase(&mgr, pods, mgr.server_cpu_at_start, rss0, 0.0, s);
    p.go = c.go().await.since(go0);
    stop(mgr).await;
    p.writes = c.writes().await - writes0;
    env.progress(format!(
        "W8 {} start-up at {pods} pods: API server {:.2} CPU-s (GC {:.2}, {:.0} MiB allocated, {} GC cycles), peak {:.0} MiB (from {:.0}); manager {:.2} CPU-s, {:.0} MiB; {} connections; {:.0} s; {} writes",
        imp.label(),
        p.server.cpu_s,
        p.go.gc_cpu_s,
        p.go.alloc_mib,
        p.go.gc_cycles,
        p.server.peak_rss_mib,
        p.server_rss_before_mib,
        p.cpu_s,
        p.peak_rss_mib,
        p.connections,
        p.seconds,
        p.writes,
    ));
    Ok(p)
}

/// One relist storm of `imp` at `pods`, through the fault proxy.
async fn storm(env: &Env, c: &Cluster, imp: Impl, pods: usize) -> anyhow::Result<Phase> {
    let proxy = FaultProxy::start(&c.cp, FaultSettings::none()).await?;
    let proxy_port = proxy.addr().port();
    let mgr = spawn_w8(env, c, proxy.kubeconfig(), imp)?;
    settle(&mgr, proxy_port, Duration::ZERO).await;
    let rss0 = c.rss();
    let writes0 = c.writes().await;
    c.collect_garbage().await;
    let go0 = c.go().await;
    let (server0, cpu0) = (mgr.server_cpu(), mgr.cpu());
    let peak_before = mgr.server_cost(server0).peak_rss_mib;
    let first = proxy.requests();
    let prof = profile(c, imp, "storm", pods, STORM_WINDOW.as_secs());
    let cut_at = SystemTime::now();
    proxy.gone_once_per_watch();
    proxy.cut(true);
    tokio::time::sleep(Duration::from_millis(200)).await;
    proxy.cut(false);
    let s = settle(&mgr, proxy_port, STORM_WINDOW).await;
    let mut p = phase(&mgr, pods, server0, rss0, cpu0, s);
    p.go = c.go().await.since(go0);
    if let Some(t) = prof {
        let _ = t.await;
    }
    // The peak since the manager started includes its start-up; the
    // storm's own peak is only known when higher.
    if p.server.peak_rss_mib <= peak_before {
        p.server.peak_rss_mib = rss0;
    }
    let records = proxy.records();
    let storm = records.get(first..).unwrap_or_default();
    p.requests = requests::count_kinds(storm);
    for r in storm {
        let at = |t: SystemTime, from: SystemTime| {
            t.duration_since(from).map_or(0.0, |d| d.as_secs_f64())
        };
        // Frames: about one per write the API server flushed.
        let frames = if r.frames > 0 {
            format!(
                "; {} frames, {} bytes ({:.0} per frame); accept {}",
                r.frames,
                r.bytes,
                r.bytes as f64 / r.frames as f64,
                r.accept
            )
        } else {
            String::new()
        };
        env.progress(format!(
            "W8 {} storm request +{:.2} s {} {} -> {:?}{}{frames}",
            imp.label(),
            at(r.start, cut_at),
            r.method,
            r.path,
            r.sent,
            r.end
                .map_or(" (open)".into(), |e| format!(" in {:.2} s", at(e, r.start))),
        ));
    }
    stop(mgr).await;
    p.writes = c.writes().await - writes0;
    let gone = storm
        .iter()
        .filter(|r| r.fault == Some(Fault::WatchGone))
        .count();
    env.progress(format!(
        "W8 {} relist storm at {pods} pods ({gone} watches answered 410): API server {:.2} CPU-s (GC {:.2}, {:.0} MiB allocated, {} GC cycles), peak {:.0} MiB; manager {:.2} CPU-s; {:.0} s; {} writes",
        imp.label(),
        p.server.cpu_s,
        p.go.gc_cpu_s,
        p.go.alloc_mib,
        p.go.gc_cycles,
        p.server.peak_rss_mib,
        p.cpu_s,
        p.seconds,
        p.writes,
    ));
    Ok(p)
}

/// Runs W8: at each of `sizes` (ascending) an unmeasured start of each
/// manager, then `repeat` rounds of start-ups (and of storms at the sizes
/// in `storm_sizes`), KCM and kcm-rs alternating first. Returns
/// (upstream, kcm-rs).
pub async fn run(
    env: &Env,
    sizes: &[usize],
    storm_sizes: &[usize],
    repeat: usize,
) -> anyhow::Result<(CostRun, CostRun)> {
    // Profiling (off in the harness's API server) serves the forced
    // collection before each phase, and the profiles. The watch cache's
    // consistency check (`DetectCacheInconsistency`, on from 1.34) lists
    // every pod from etcd every 5-7.5 minutes whoever is connected: at
    // 100,000 pods about 3.5 CPU-s and 2 GiB allocated (and the
    // collections that follow), landing in whichever window it falls in;
    // off here so the windows hold what the managers cost.
    let cp = ControlPlane::start_version_with_args(
        &kcm_e2e::binaries::k8s_version(),
        "--profiling=true --feature-gates=DetectCacheInconsistency=false",
    )
    .context("control plane")?;
    let port = cp.port().context("API server port")?;
    let client = cp.client().await?;
    let ns = TestNamespace::create(&client, "bench-cost").await?;
    let c = Cluster { cp, port, client };
    let (mut up, mut us) = (CostRun::default(), CostRun::default());
    let mut have = 0;
    for &pods in sizes {
        let t = Instant::now();
        grow(&c.client, &ns.name, have, pods).await?;
        have = pods;
        env.progress(format!(
            "W8: {pods} pods ({:.0} s to create)",
            t.elapsed().as_secs_f64()
        ));
        for imp in Impl::BOTH {
            let writes0 = c.writes().await;
            let mgr = spawn_w8(env, &c, c.cp.kubeconfig(), imp)?;
            settle_quiet(&mgr, port).await;
            stop(mgr).await;
            env.progress(format!(
                "W8 {} warm-up at {pods} pods: {} writes",
                imp.label(),
                c.writes().await - writes0
            ));
        }
        let storms = storm_sizes.contains(&pods);
        let (mut su, mut ss, mut tu, mut ts) = (vec![], vec![], vec![], vec![]);
        for round in 0..repeat.max(1) {
            let order = if round % 2 == 0 {
                Impl::BOTH
            } else {
                [Impl::KcmRs, Impl::Upstream]
            };
            for imp in order {
                let p = startup(env, &c, imp, pods).await?;
                match imp {
                    Impl::Upstream => su.push(p),
                    Impl::KcmRs => ss.push(p),
                }
            }
            if !storms {
                continue;
            }
            for imp in order {
                let p = storm(env, &c, imp, pods).await?;
                match imp {
                    Impl::Upstream => tu.push(p),
                    Impl::KcmRs => ts.push(p),
                }
            }
        }
        up.startups.push(su);
        us.startups.push(ss);
        if storms {
            up.storms.push(tu);
            us.storms.push(ts);
        }
    }
    Ok((up, us))
}

fn metric(name: &str, unit: &str, up: f64, us: f64, target: Option<f64>) -> Metric {
    Metric {
        name: name.into(),
        unit: unit.into(),
        upstream: up,
        kcm_rs: us,
        lower_is_better: true,
        target_ratio: target,
    }
}

/// The median of `f` over `phases` (the mean of the middle two of an
/// even count).
fn median(phases: &[Phase], f: impl Fn(&Phase) -> f64) -> f64 {
    let mut v: Vec<f64> = phases.iter().map(f).collect();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The rows of W8: per size, start-up; per storm size, the storm; each
/// figure the median of the rounds. Targets: the API server's CPU and
/// peak RSS at or below KCM's, the manager's CPU at most 0.35x.
pub fn workloads(up: &CostRun, us: &CostRun) -> Vec<Workload> {
    let row = |id: String, description: String, u: &[Phase], o: &[Phase]| {
        let m = |name: &str, unit: &str, target, f: &dyn Fn(&Phase) -> f64| {
            metric(name, unit, median(u, f), median(o, f), target)
        };
        let rounds: Vec<String> = u
            .iter()
            .zip(o)
            .map(|(a, b)| {
                format!(
                    "{:.2} / {:.2} ({:.2}x)",
                    a.server.cpu_s,
                    b.server.cpu_s,
                    b.server.cpu_s / a.server.cpu_s
                )
            })
            .collect();
        let mut notes = vec![
            format!(
                "API server CPU-s per round (upstream / kcm-rs): {}",
                rounds.join("; ")
            ),
            format!(
                "API server RSS before: upstream {:.0} MiB, kcm-rs {:.0} MiB (medians)",
                median(u, |p| p.server_rss_before_mib),
                median(o, |p| p.server_rss_before_mib)
            ),
        ];
        for (who, ps) in [("upstream", u), ("kcm-rs", o)] {
            if let Some(p) = ps.first().filter(|p| !p.requests.is_empty()) {
                let kinds: Vec<String> =
                    p.requests.iter().map(|(k, n)| format!("{k} {n}")).collect();
                notes.push(format!(
                    "{who} requests (first round): {}",
                    kinds.join(", ")
                ));
            }
        }
        Workload {
            id,
            description,
            metrics: vec![
                m("API server CPU", "CPU-s", Some(1.0), &|p| p.server.cpu_s),
                m("API server CPU without GC", "CPU-s", None, &|p| {
                    p.server.cpu_s - p.go.gc_cpu_s
                }),
                m("API server GC CPU", "CPU-s", None, &|p| p.go.gc_cpu_s),
                m("API server allocated", "MiB", None, &|p| p.go.alloc_mib),
                m("API server peak RSS", "MiB", Some(1.0), &|p| {
                    p.server.peak_rss_mib
                }),
                m("API server RSS growth", "MiB", None, &|p| {
                    p.server.peak_rss_mib - p.server_rss_before_mib
                }),
                m("controller CPU", "CPU-s", Some(0.35), &|p| p.cpu_s),
                m("peak RSS", "MiB", None, &|p| p.peak_rss_mib),
                m("connections to the API server", "conns", None, &|p| {
                    p.connections as f64
                }),
                m("time to quiet", "s", None, &|p| p.seconds),
                m("writes", "requests", None, &|p| p.writes),
            ],
            notes,
        }
    };
    let mut v = Vec::new();
    for (u, o) in up.startups.iter().zip(&us.startups) {
        let pods = u.first().map_or(0, |p| p.pods);
        v.push(row(
            format!("W8 start-up {}k pods", pods / 1000),
            format!(
                "the manager started against {pods} pods (W4's mix), direct to the API server; over 10 s plus 1 s per 1,000 pods from its start; medians of {} rounds",
                u.len()
            ),
            u,
            o,
        ));
    }
    for (u, o) in up.storms.iter().zip(&us.storms) {
        let pods = u.first().map_or(0, |p| p.pods);
        v.push(row(
            format!("W8 relist storm {}k pods", pods / 1000),
            format!(
                "at {pods} pods, through the fault proxy (HTTP/1.1 for both): every connection cut, each collection's next resumed watch answered 410 once; over 20 s from the cut; API server peak RSS: the storm's own peak when above its start, else the RSS at its start; medians of {} rounds",
                u.len()
            ),
            u,
            o,
        ));
    }
    v
}

#[cfg(test)]
mod tests {
    use super::GoStats;

    #[test]
    fn go_stats_from_metrics() {
        let text = "# HELP go_cpu_classes_gc_total_cpu_seconds_total x\n\
            go_cpu_classes_gc_total_cpu_seconds_total 12.5\n\
            go_cpu_classes_gc_mark_assist_cpu_seconds_total 1\n\
            go_gc_heap_allocs_bytes_total 2.097152e+06\n\
            go_gc_cycles_total_gc_cycles_total 7\n";
        let g = GoStats::parse(text);
        assert_eq!((g.gc_cpu_s, g.alloc_mib, g.gc_cycles), (12.5, 2.0, 7.0));
        assert!(GoStats::parse("").gc_cpu_s.is_nan());
    }
}
