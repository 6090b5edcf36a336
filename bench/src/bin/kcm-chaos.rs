//! `make chaos`: the chaos driver (see `kcm_bench::chaos`). Runs the workload
//! calm (no kills, no faults), with `--kills` SIGKILLs of kcm-rs, with API
//! faults at `--fault-rate` through the fault proxy (`kcm_e2e::faults`),
//! and with both (`--runs` picks); prints the checks and writes
//! them to `--out`. kcm-rs always goes through the proxy, so every run
//! counts its requests. Exit 1 on any violation.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use kcm_bench::chaos::{ChaosConfig, ChaosReport, compare, run};
use kcm_e2e::faults::{Fault, FaultSettings};

#[derive(Parser)]
struct Args {
    #[arg(long, default_value_t = 20261201)]
    seed: u64,
    #[arg(long, default_value_t = 50)]
    kills: usize,
    /// Completions of each Job.
    #[arg(long, default_value_t = 30)]
    scale: i32,
    /// Share of kcm-rs's requests that get an API fault in the fault runs.
    #[arg(long, default_value_t = 0.10)]
    fault_rate: f64,
    /// Share of kcm-rs's watch requests that get a fault (cut, 410, or an
    /// error or stall at the start) in the fault runs: watches are few (one
    /// per informer), so more of them.
    #[arg(long, default_value_t = 0.5)]
    watch_fault_rate: f64,
    /// Also inject 404 before forwarding a DELETE or PATCH of an object
    /// that exists (no API server answers so; off by default).
    #[arg(long)]
    not_found_before: bool,
    /// How long a stalled answer is held.
    #[arg(long, default_value_t = 30)]
    stall_secs: u64,
    /// Requests held before they reach the API server (then forwarded even
    /// if kcm-rs was killed meanwhile), in seconds: `MIN-MAX`, or `0` for
    /// none. One of the fault kinds drawn in the fault runs.
    #[arg(long, default_value = "2-10")]
    delay_secs: String,
    /// The runs besides the calm one (the reference the others are
    /// compared with): `kills`, `faults`, `combined` (kills and faults);
    /// `nocalm` skips the calm run and the comparison.
    #[arg(long, value_delimiter = ',', default_value = "kills,faults,combined")]
    runs: Vec<String>,
    #[arg(long, default_value = "target/debug/kcm-rs")]
    kcm_rs: PathBuf,
    /// A Markdown report; none: stdout only.
    #[arg(long)]
    out: Option<PathBuf>,
    #[arg(long, default_value_t = 600)]
    timeout_secs: u64,
}

fn table(r: &ChaosReport) -> String {
    let mut s = String::from(
        "| Job | condition | succeeded | failed | completedIndexes | failedIndexes |\n|---|---|--:|--:|---|---|\n",
    );
    for (name, e) in &r.ends {
        s.push_str(&format!(
            "| {name} | {} | {} | {} | {} | {} |\n",
            e.condition,
            e.succeeded,
            e.failed,
            e.completed_indexes.as_deref().unwrap_or("-"),
            e.failed_indexes.as_deref().unwrap_or("-")
        ));
    }
    s
}

/// `MIN-MAX` seconds, or `0`: none.
fn delay_range(s: &str) -> anyhow::Result<Option<(Duration, Duration)>> {
    if s.trim() == "0" {
        return Ok(None);
    }
    let (lo, hi) = s
        .split_once('-')
        .with_context(|| format!("--delay-secs {s:?}: MIN-MAX or 0"))?;
    let (lo, hi): (u64, u64) = (
        lo.trim().parse().context("--delay-secs MIN")?,
        hi.trim().parse().context("--delay-secs MAX")?,
    );
    anyhow::ensure!(lo <= hi, "--delay-secs {s:?}: MIN above MAX");
    Ok(Some((Duration::from_secs(lo), Duration::from_secs(hi))))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    let bin =
        std::fs::canonicalize(&a.kcm_rs).with_context(|| format!("{}", a.kcm_rs.display()))?;
    let calm_cfg = ChaosConfig {
        seed: a.seed,
        kills: a.kills,
        scale: a.scale,
        timeout: Duration::from_secs(a.timeout_secs),
        faults: None,
        // Logs of a run with violations (kcm-rs, proxy records, audit).
        keep_dir: Some(PathBuf::from("target/chaos-logs")),
    };
    let fault_cfg = ChaosConfig {
        faults: Some(FaultSettings {
            seed: a.seed,
            rate: a.fault_rate,
            watch_rate: Some(a.watch_fault_rate),
            not_found_before: a.not_found_before,
            stall: Duration::from_secs(a.stall_secs),
            delay: delay_range(&a.delay_secs)?,
            ..FaultSettings::default()
        }),
        ..calm_cfg.clone()
    };
    let mut plan: Vec<(&str, &ChaosConfig, usize)> = vec![("calm", &calm_cfg, 0)];
    for r in &a.runs {
        match r.as_str() {
            // Only the runs named: no reference, no comparison.
            "nocalm" => plan.retain(|(n, _, _)| *n != "calm"),
            "kills" => plan.push(("kills", &calm_cfg, a.kills)),
            "faults" => plan.push(("faults", &fault_cfg, 0)),
            "combined" => plan.push(("kills + faults", &fault_cfg, a.kills)),
            other => {
                anyhow::bail!("--runs: unknown run {other:?} (kills, faults, combined, nocalm)")
            }
        }
    }
    let mut runs: Vec<(&str, ChaosReport)> = Vec::new();
    for (name, cfg, kills) in plan {
        eprintln!("chaos: seed {}, run {name}", a.seed);
        let r = run(cfg, &bin, kills).await?;
        eprintln!(
            "chaos: {name}: {} kills, {} requests, {:.1} requests/pod, faults {}, {} violations, {:.0} s",
            r.kills,
            r.requests,
            r.requests_per_pod(),
            r.fault_summary,
            r.violations.len(),
            r.elapsed.as_secs_f64()
        );
        runs.push((name, r));
    }
    let calm = runs.iter().find(|(n, _)| *n == "calm").map(|(_, r)| r);
    let mut bad: Vec<String> = Vec::new();
    for (name, r) in &runs {
        bad.extend(r.violations.iter().map(|v| format!("{name}: {v}")));
        if let Some(calm) = calm
            && !std::ptr::eq(r, calm)
        {
            bad.extend(compare(r, calm).iter().map(|v| format!("{name}: {v}")));
        }
    }
    let mut md = format!(
        "# kcm-rs chaos run\n\nseed {}, scale {}, fault rate {:.0}% of requests ({:.0}% of watches), stall {} s, delay {} s\n\n\
         | run | SIGKILLs | faults injected | kcm-rs requests (watches) | pods seen | requests per pod | \
         kcm-rs exits on its own | pods with DisruptionTarget | deletes by taint eviction and pod GC | wall time |\n\
         |---|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n",
        a.seed,
        a.scale,
        a.fault_rate * 100.0,
        a.watch_fault_rate * 100.0,
        a.stall_secs,
        a.delay_secs
    );
    for (name, r) in &runs {
        md.push_str(&format!(
            "| {name} | {} | {} | {} ({}) | {} | {:.1} | {} | {} | {} | {:.0} s |\n",
            r.kills,
            r.faults_total(),
            r.requests,
            r.watch_requests,
            r.pods,
            r.requests_per_pod(),
            r.exits.len(),
            r.evicted,
            r.disruption_deletes,
            r.elapsed.as_secs_f64()
        ));
    }
    md.push_str("\n## Faults injected per kind\n\n| run |");
    for f in Fault::ALL {
        md.push_str(&format!(" {f} |"));
    }
    md.push_str(" error answers after an applied write |\n|---|");
    md.push_str(&"--:|".repeat(Fault::ALL.len() + 1));
    md.push('\n');
    for (name, r) in runs.iter().filter(|(_, r)| r.faults_total() > 0) {
        md.push_str(&format!("| {name} |"));
        for f in Fault::ALL {
            md.push_str(&format!(" {} |", r.faults.get(&f).copied().unwrap_or(0)));
        }
        md.push_str(&format!(" {} |\n", r.faults_after_write));
    }
    for (name, r) in &runs {
        md.push_str(&format!("\n## {name}\n\n"));
        md.push_str(&table(r));
        if !r.exits.is_empty() {
            md.push_str("\nkcm-rs exits not caused by a kill:\n\n");
            for e in &r.exits {
                md.push_str(&format!("- {e}\n"));
            }
        }
        if let Some(k) = &r.kept {
            md.push_str(&format!("\nlogs kept in `{}`\n", k.display()));
        }
    }
    md.push_str(&format!(
        "\n## Checks\n\nExactly-once (no UID re-enters uncountedTerminatedPods; no Job counts more pods than it had, a Job complete by its completions every succeeded pod), counters never decrease, \
         no tracking finalizer left, active <= parallelism, DisruptionTarget before delete, \
         same conditions (and indexes, and counts of completed Jobs) as the calm run: **{}**\n",
        if bad.is_empty() { "all hold".to_string() } else { format!("{} violations", bad.len()) }
    ));
    for b in &bad {
        md.push_str(&format!("- {b}\n"));
    }
    print!("{md}");
    if let Some(out) = &a.out {
        if let Some(dir) = out.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(out, &md)?;
    }
    if bad.is_empty() {
        Ok(())
    } else {
        std::process::exit(1)
    }
}
