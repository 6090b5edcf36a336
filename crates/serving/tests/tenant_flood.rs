//! The authenticated tenant against the kcm-rs binary and upstream KCM on
//! a real API server (issue "[authenticated-abuse]"): the token of a
//! ServiceAccount with no bindings of its own floods the secure port over
//! HTTP/1.1 (1,100 and 5,000 keep-alive connections: `GET /version`, then
//! `GET /apis/r<random>` back to back) and over HTTP/2 (h2load, 200
//! connections × 100 streams), while an authorized scraper scrapes on a new
//! connection every 0.5 s and a probe asks every 1 s, each with the
//! kubelet's 5 s timeout (kcm-rs: `/livez` on its health port, as the
//! chart probes; KCM: `/healthz` on its one port). Per run: scrapes and
//! probes answered, SubjectAccessReviews per second (the API server's own
//! count), the server's peak RSS and CPU.
//!
//! `make abuse` runs it (`TENANT_FLOOD=h1:1100,h1:5000,h2:200x100` picks
//! runs, `TENANT_FLOOD_SECS` their length, default 60;
//! `ABUSE_SKIP_UPSTREAM=1` skips KCM; `ABUSE_RESULTS=<dir>` writes the
//! table to `<dir>/tenant-flood.md`). kcm-rs must answer every scrape and
//! every probe, cause at most [`MAX_SARS_PER_SECOND`] reviews a second and
//! grow by at most [`MAX_RSS_GROWTH_MIB`].

mod binary;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use binary::tenant::{self, Answer};
use kcm_e2e::procstat::{cpu_seconds, rss_mib};

const MAX_SARS_PER_SECOND: f64 = 5.0;
const MAX_RSS_GROWTH_MIB: f64 = 100.0;
const SCRAPE_EVERY: Duration = Duration::from_millis(500);
const PROBE_EVERY: Duration = Duration::from_secs(1);

#[derive(Clone, Copy, Debug)]
enum Flood {
    H1 { conns: usize },
    H2 { conns: usize, streams: usize },
}

impl Flood {
    fn parse(s: &str) -> Option<Flood> {
        let (proto, size) = s.trim().split_once(':')?;
        match proto {
            "h1" => Some(Flood::H1 {
                conns: size.parse().ok()?,
            }),
            "h2" => {
                let (c, m) = size.split_once('x')?;
                Some(Flood::H2 {
                    conns: c.parse().ok()?,
                    streams: m.parse().ok()?,
                })
            }
            _ => None,
        }
    }

    fn label(self) -> String {
        match self {
            Flood::H1 { conns } => format!("HTTP/1.1, {conns} connections"),
            Flood::H2 { conns, streams } => {
                format!("HTTP/2, {conns} connections × {streams} streams")
            }
        }
    }
}

fn floods() -> Vec<Flood> {
    let spec =
        std::env::var("TENANT_FLOOD").unwrap_or_else(|_| "h1:1100,h1:5000,h2:200x100".into());
    spec.split(',')
        .map(|s| Flood::parse(s).unwrap_or_else(|| panic!("TENANT_FLOOD: bad entry {s:?}")))
        .collect()
}

fn window() -> Duration {
    Duration::from_secs(
        std::env::var("TENANT_FLOOD_SECS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(60),
    )
}

/// SubjectAccessReviews the API server has answered so far.
async fn apiserver_sars(admin: &kube::Client) -> f64 {
    let req = http::Request::get("/metrics")
        .body(Vec::new())
        .expect("request");
    let text = admin.request_text(req).await.expect("API server metrics");
    text.lines()
        .filter(|l| {
            l.starts_with("apiserver_request_total{")
                && l.contains("resource=\"subjectaccessreviews\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// One run's figures.
struct Row {
    who: &'static str,
    flood: Flood,
    scrapes: Vec<Answer>,
    probes: Vec<Answer>,
    sars_per_second: f64,
    rss: (f64, f64),
    cpu: f64,
    secs: f64,
    attack: String,
}

impl Row {
    fn markdown(&self) -> String {
        format!(
            "| {} | {} | {} | {} | {:.1} | {:.0} → {:.0} MiB | {:.2} | {} |",
            self.who,
            self.flood.label(),
            tenant::answered(&self.scrapes),
            tenant::answered(&self.probes),
            self.sars_per_second,
            self.rss.0,
            self.rss.1,
            self.cpu / self.secs,
            self.attack,
        )
    }
}

/// Where a server answers: its secure port, its pid, and where and how it
/// is probed.
struct Target {
    who: &'static str,
    port: u16,
    pid: u32,
    probe_port: u16,
    probe_path: &'static str,
    probe_tls: bool,
}

async fn run(
    admin: &kube::Client,
    t: &Target,
    flood: Flood,
    scraper: &str,
    tenant_token: &str,
    dir: &std::path::Path,
) -> Row {
    // The scraper is authorized (and its answers cached) before the flood.
    let code = binary::until(
        t.port,
        "/metrics",
        kcm_e2e::https::Credential::Bearer(scraper),
        Duration::from_secs(30),
        |c| c == 200,
    )
    .await;
    assert_eq!(code, 200, "{}: the scraper is not authorized", t.who);
    let rss_before = rss_mib(t.pid).unwrap_or_default();
    let stop = Arc::new(AtomicBool::new(false));
    let (attack, tasks, h2) = match flood {
        Flood::H1 { conns } => {
            let (stats, tasks) = tenant::h1_flood(t.port, conns, tenant_token, Arc::clone(&stop));
            // The flood's first connections are a burst of handshakes:
            // the window starts once they are up (or after 30 s).
            let end = Instant::now() + Duration::from_secs(30);
            while stats.connects.load(Ordering::Relaxed) < conns as u64 && Instant::now() < end {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            (Some(stats), tasks, None)
        }
        Flood::H2 { conns, streams } => {
            let (port, token, dir) = (t.port, tenant_token.to_string(), dir.to_path_buf());
            let secs = window().as_secs() + 5;
            let h2 = std::thread::spawn(move || {
                tenant::h2_flood(port, conns, streams, secs, &token, &dir)
            });
            tokio::time::sleep(Duration::from_secs(3)).await;
            (None, Vec::new(), Some(h2))
        }
    };
    let sars_before = apiserver_sars(admin).await;
    let cpu_before = cpu_seconds(t.pid).unwrap_or_default();
    let began = Instant::now();
    let polls = Arc::new(AtomicBool::new(false));
    let scrapes = tenant::poller(
        t.port,
        "/metrics",
        true,
        Some(scraper.to_string()),
        SCRAPE_EVERY,
        Arc::clone(&polls),
    );
    let probes = tenant::poller(
        t.probe_port,
        t.probe_path,
        t.probe_tls,
        None,
        PROBE_EVERY,
        Arc::clone(&polls),
    );
    let mut rss_peak = rss_before;
    while began.elapsed() < window() {
        rss_peak = rss_peak.max(rss_mib(t.pid).unwrap_or_default());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    polls.store(true, Ordering::Relaxed);
    let secs = began.elapsed().as_secs_f64();
    let cpu = cpu_seconds(t.pid).unwrap_or_default() - cpu_before;
    let sars = apiserver_sars(admin).await - sars_before;
    let scrapes = scrapes.join().expect("scraper");
    let probes = probes.join().expect("prober");
    stop.store(true, Ordering::Relaxed);
    for task in &tasks {
        task.abort();
    }
    for task in tasks {
        let _ = task.await;
    }
    let attack = match (attack, h2) {
        (Some(stats), _) => stats.summary(),
        (None, Some(h2)) => h2
            .join()
            .expect("h2load")
            .unwrap_or_else(|e| format!("h2load: {e}")),
        _ => String::new(),
    };
    // Let the server settle before the next run.
    tokio::time::sleep(Duration::from_secs(5)).await;
    Row {
        who: t.who,
        flood,
        scrapes,
        probes,
        sars_per_second: sars / secs,
        rss: (rss_before, rss_peak),
        cpu,
        secs,
        attack,
    }
}

const HEADER: &str = "| server | flood | authorized scrapes answered | probes answered | SubjectAccessReviews / s | RSS before → peak | CPU (cores) | the flood's own count |\n|---|---|--:|--:|--:|--:|--:|---|";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "make abuse runs it"]
async fn a_tenant_token_starves_neither_probes_nor_scrapes_nor_the_api_server() {
    let cp = kcm_e2e::shared();
    let admin = cp.client().await.expect("admin");
    let scraper = binary::scraper_token(&admin, "tenant-flood-scraper").await;
    let tenant_token =
        binary::service_account_token(&admin, "default", "tenant-flood-attacker").await;
    let dir = tempfile::tempdir().expect("dir");
    let mut rows = Vec::new();

    let health = binary::free_port();
    let kcm = binary::start(
        cp,
        "tenant-flood",
        &[
            "--controllers=job-controller".to_string(),
            format!("--health-port={health}"),
        ],
    )
    .await;
    let ours = Target {
        who: "kcm-rs",
        port: kcm.port,
        pid: kcm.child.id(),
        probe_port: health,
        probe_path: "/livez",
        probe_tls: false,
    };
    for flood in floods() {
        let row = run(&admin, &ours, flood, &scraper, &tenant_token, dir.path()).await;
        eprintln!("{HEADER}\n{}", row.markdown());
        rows.push(row);
    }
    let tail = kcm.log_tail();
    drop(kcm);

    if std::env::var_os("ABUSE_SKIP_UPSTREAM").is_none() {
        let (upstream, port) = binary::upstream(cp).await;
        let theirs = Target {
            who: "KCM",
            port,
            pid: upstream.pid(),
            probe_port: port,
            probe_path: "/healthz",
            probe_tls: true,
        };
        for flood in floods() {
            let row = run(&admin, &theirs, flood, &scraper, &tenant_token, dir.path()).await;
            eprintln!("{HEADER}\n{}", row.markdown());
            rows.push(row);
        }
    }
    let table = format!(
        "{HEADER}\n{}\n",
        rows.iter()
            .map(Row::markdown)
            .collect::<Vec<_>>()
            .join("\n")
    );
    eprintln!("{table}");
    if let Some(out) = std::env::var_os("ABUSE_RESULTS") {
        let out = std::path::PathBuf::from(out);
        std::fs::create_dir_all(&out).expect("results dir");
        let bin = binary::kcm_rs_binary();
        let version = std::process::Command::new(&bin)
            .arg("--version")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default();
        let note = format!(
            "# The authenticated tenant's floods\n\n`make abuse` (`crates/serving/tests/tenant_flood.rs`), {} s per run, on this machine's 2 cores shared by the API server, the server under test and the attacker; kcm-rs: `{}` ({version}); KCM: upstream kube-controller-manager of the API server's version, job-controller only, both with delegated authentication and authorization.\n\n{table}",
            window().as_secs(),
            bin.display(),
        );
        std::fs::write(out.join("tenant-flood.md"), note).expect("write results");
    }
    for r in rows.iter().filter(|r| r.who == "kcm-rs") {
        let failed = |a: &[Answer]| a.iter().filter(|x| x.0 != 200).count();
        assert!(
            !r.scrapes.is_empty() && failed(&r.scrapes) == 0,
            "{}: scrapes {}\n{tail}",
            r.flood.label(),
            tenant::answered(&r.scrapes)
        );
        assert!(
            !r.probes.is_empty() && failed(&r.probes) == 0,
            "{}: probes {}",
            r.flood.label(),
            tenant::answered(&r.probes)
        );
        assert!(
            r.sars_per_second <= MAX_SARS_PER_SECOND,
            "{}: {:.1} SubjectAccessReviews a second",
            r.flood.label(),
            r.sars_per_second
        );
        assert!(
            r.rss.1 - r.rss.0 <= MAX_RSS_GROWTH_MIB,
            "{}: RSS {:.0} -> {:.0} MiB",
            r.flood.label(),
            r.rss.0,
            r.rss.1
        );
    }
}
