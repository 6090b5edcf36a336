//! W8: what each controller manager costs the API server (issue 40). On a
//! fresh control plane per implementation, the W4 cluster (nodes, PDBs,
//! Job pods and unrelated pods) grown to each size in turn; at each size:
//!
//! - **start-up**: the manager started against the API server directly
//!   (TLS; HTTP/2 where the client speaks it), measured over a fixed
//!   window (10 s plus 1 s per 1,000 pods; the manager is quiet well
//!   before): the API server's CPU and peak RSS (and its growth over the
//!   RSS before), the manager's CPU and peak RSS, the most TCP
//!   connections the manager held to the API server, and how long until
//!   its CPU was quiet;
//! - **relist storm** (at the sizes asked for): the manager started
//!   through the fault proxy, settled, then every connection cut and the
//!   first resumed watch of each collection answered 410
//!   ([`FaultProxy::gone_once_per_watch`]): every informer relists once.
//!   Measured over 20 s from the cut. Both managers talk plain
//!   HTTP/1.1 to the proxy here, so the row isolates the relist path
//!   (streaming list against LIST), not the transport.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use anyhow::Context;

use super::common::{Env, Impl, Manager, ServerCost, spawn_manager_via};
use super::memory::{CONTROLLERS, grow};
use super::results::{Metric, Workload};
use kcm_e2e::faults::{FaultProxy, FaultSettings};
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
}

/// Start-up at every size, and the storms.
#[derive(Debug, Clone, Default)]
pub struct CostRun {
    pub startups: Vec<Phase>,
    pub storms: Vec<Phase>,
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

/// Waits until `mgr`'s CPU is quiet (under 20 ms per second for three
/// seconds in a row) after at least `min`, at most `max`, then until
/// `window` has passed in all; samples the connections to `port`
/// meanwhile. Returns (seconds to quiet, most connections). The API
/// server's CPU is read over the whole `window`, the same for both
/// managers, so its background work weighs the same in both.
async fn settle(
    mgr: &Manager,
    port: u16,
    min: Duration,
    max: Duration,
    window: Duration,
) -> (f64, usize) {
    let t0 = Instant::now();
    let (quiet_s, mut most) = settle_quiet(mgr, port, min, max).await;
    while t0.elapsed() < window {
        most = most.max(connections_to(mgr.pid, port));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    (quiet_s, most)
}

async fn settle_quiet(mgr: &Manager, port: u16, min: Duration, max: Duration) -> (f64, usize) {
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
        if (waited >= min && quiet >= 3) || waited >= max {
            // The quiet seconds are not part of the phase.
            return ((waited.as_secs_f64() - 3.0).max(0.0), most);
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
    }
}

/// Runs W8 for `imp`: start-up at each of `sizes` (ascending), a relist
/// storm at each of `storm_sizes`.
pub async fn run(
    env: &Env,
    imp: Impl,
    sizes: &[usize],
    storm_sizes: &[usize],
) -> anyhow::Result<CostRun> {
    let cp = ControlPlane::start().context("control plane")?;
    let port = cp.port().context("API server port")?;
    let client = cp.client().await?;
    let ns = TestNamespace::create(&client, "bench-cost").await?;
    let (min, max) = (Duration::from_secs(5), Duration::from_secs(600));
    let mut out = CostRun::default();
    let mut have = 0;
    for &pods in sizes {
        let t = Instant::now();
        grow(&client, &ns.name, have, pods).await?;
        have = pods;
        env.progress(format!(
            "W8 {}: {pods} pods ({:.0} s to create)",
            imp.label(),
            t.elapsed().as_secs_f64()
        ));
        // Start-up, direct.
        let rss0 = kcm_e2e::procstat::rss_mib(cp.pid()).unwrap_or(0.0);
        let mgr = spawn_manager_via(env, &cp, cp.kubeconfig(), imp, &CONTROLLERS, 20, 30, &[])?;
        let window = Duration::from_secs(10 + pods as u64 / 1000);
        let s = settle(&mgr, port, min, max, window).await;
        let p = phase(&mgr, pods, mgr.server_cpu_at_start, rss0, 0.0, s);
        mgr.stop().await;
        env.progress(format!(
            "W8 {} start-up at {pods} pods: API server {:.1} CPU-s, peak {:.0} MiB (from {:.0}); manager {:.1} CPU-s, {:.0} MiB; {} connections; {:.0} s",
            imp.label(),
            p.server.cpu_s,
            p.server.peak_rss_mib,
            p.server_rss_before_mib,
            p.cpu_s,
            p.peak_rss_mib,
            p.connections,
            p.seconds
        ));
        out.startups.push(p);
        if !storm_sizes.contains(&pods) {
            continue;
        }
        // The storm, through the proxy.
        let proxy = FaultProxy::start(&cp, FaultSettings::none()).await?;
        let proxy_port = proxy.addr().port();
        let mgr = spawn_manager_via(env, &cp, proxy.kubeconfig(), imp, &CONTROLLERS, 20, 30, &[])?;
        settle(&mgr, proxy_port, min, max, Duration::ZERO).await;
        let rss0 = kcm_e2e::procstat::rss_mib(cp.pid()).unwrap_or(0.0);
        let (server0, cpu0) = (mgr.server_cpu(), mgr.cpu());
        let peak_before = mgr.server_cost(server0).peak_rss_mib;
        proxy.gone_once_per_watch();
        proxy.cut(true);
        tokio::time::sleep(Duration::from_millis(200)).await;
        proxy.cut(false);
        let s = settle(&mgr, proxy_port, min, max, Duration::from_secs(20)).await;
        let mut p = phase(&mgr, pods, server0, rss0, cpu0, s);
        // The peak since the manager started includes its start-up; the
        // storm's own peak is only known when higher.
        if p.server.peak_rss_mib <= peak_before {
            p.server.peak_rss_mib = rss0;
        }
        let gone = proxy
            .records()
            .iter()
            .filter(|r| r.fault == Some(kcm_e2e::faults::Fault::WatchGone))
            .count();
        mgr.stop().await;
        env.progress(format!(
            "W8 {} relist storm at {pods} pods ({gone} watches answered 410): API server {:.1} CPU-s, peak {:.0} MiB; manager {:.1} CPU-s; {:.0} s",
            imp.label(),
            p.server.cpu_s,
            p.server.peak_rss_mib,
            p.cpu_s,
            p.seconds
        ));
        out.storms.push(p);
    }
    Ok(out)
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

/// The rows of W8: per size, start-up; per storm size, the storm. Targets:
/// the API server's CPU and peak RSS at or below KCM's, the manager's CPU
/// at most 0.35x.
pub fn workloads(up: &CostRun, us: &CostRun) -> Vec<Workload> {
    let row = |id: String, description: String, u: &Phase, o: &Phase| Workload {
        id,
        description,
        metrics: vec![
            metric(
                "API server CPU",
                "CPU-s",
                u.server.cpu_s,
                o.server.cpu_s,
                Some(1.0),
            ),
            metric(
                "API server peak RSS",
                "MiB",
                u.server.peak_rss_mib,
                o.server.peak_rss_mib,
                Some(1.0),
            ),
            metric(
                "API server RSS growth",
                "MiB",
                u.server.peak_rss_mib - u.server_rss_before_mib,
                o.server.peak_rss_mib - o.server_rss_before_mib,
                None,
            ),
            metric("controller CPU", "CPU-s", u.cpu_s, o.cpu_s, Some(0.35)),
            metric("peak RSS", "MiB", u.peak_rss_mib, o.peak_rss_mib, None),
            metric(
                "connections to the API server",
                "conns",
                u.connections as f64,
                o.connections as f64,
                None,
            ),
            metric("time to quiet", "s", u.seconds, o.seconds, None),
        ],
        notes: vec![format!(
            "API server RSS before: upstream {:.0} MiB, kcm-rs {:.0} MiB",
            u.server_rss_before_mib, o.server_rss_before_mib
        )],
    };
    let mut v = Vec::new();
    for (u, o) in up.startups.iter().zip(&us.startups) {
        v.push(row(
            format!("W8 start-up {}k pods", u.pods / 1000),
            format!(
                "the manager started against {} pods (W4's mix), direct to the API server; over 10 s plus 1 s per 1,000 pods from its start",
                u.pods
            ),
            u,
            o,
        ));
    }
    for (u, o) in up.storms.iter().zip(&us.storms) {
        v.push(row(
            format!("W8 relist storm {}k pods", u.pods / 1000),
            format!(
                "at {} pods, through the fault proxy (HTTP/1.1 for both): every connection cut, each collection's next resumed watch answered 410 once; over 20 s from the cut; API server peak RSS: the storm's own peak when above its start, else the RSS at its start",
                u.pods
            ),
            u,
            o,
        ));
    }
    v
}
