//! `make chaos`: the chaos driver (see `kcm_e2e::chaos`). Runs the workload
//! once without kills and once with `--kills` SIGKILLs of kcm-rs, prints
//! the checks and writes them to `--out`. Exit 1 on any violation.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use kcm_e2e::chaos::{ChaosConfig, ChaosReport, compare, run};

#[derive(Parser)]
struct Args {
    #[arg(long, default_value_t = 20261201)]
    seed: u64,
    #[arg(long, default_value_t = 50)]
    kills: usize,
    /// Completions of each Job.
    #[arg(long, default_value_t = 30)]
    scale: i32,
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

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    let bin =
        std::fs::canonicalize(&a.kcm_rs).with_context(|| format!("{}", a.kcm_rs.display()))?;
    let cfg = ChaosConfig {
        seed: a.seed,
        kills: a.kills,
        scale: a.scale,
        timeout: Duration::from_secs(a.timeout_secs),
    };
    eprintln!("chaos: seed {}, no kills first", a.seed);
    let calm = run(&cfg, &bin, 0).await?;
    eprintln!("chaos: {} kills", a.kills);
    let wild = run(&cfg, &bin, a.kills).await?;
    let mut bad: Vec<String> = calm
        .violations
        .iter()
        .map(|v| format!("no kills: {v}"))
        .collect();
    bad.extend(wild.violations.iter().map(|v| format!("kills: {v}")));
    bad.extend(compare(&wild, &calm));
    let mut md = format!(
        "# kcm-rs chaos run\n\nseed {}, scale {}\n\n| run | SIGKILLs | pods seen | pods with DisruptionTarget | deletes by taint eviction and pod GC | wall time |\n|---|--:|--:|--:|--:|--:|\n\
         | without kills | {} | {} | {} | {} | {:.0} s |\n| with kills | {} | {} | {} | {} | {:.0} s |\n\n",
        a.seed,
        a.scale,
        calm.kills,
        calm.pods,
        calm.evicted,
        calm.disruption_deletes,
        calm.elapsed.as_secs_f64(),
        wild.kills,
        wild.pods,
        wild.evicted,
        wild.disruption_deletes,
        wild.elapsed.as_secs_f64()
    );
    md.push_str("## Without kills\n\n");
    md.push_str(&table(&calm));
    md.push_str("\n## With kills\n\n");
    md.push_str(&table(&wild));
    md.push_str(&format!(
        "\n## Checks\n\nExactly-once (no UID re-enters uncountedTerminatedPods), counters never decrease, \
         no tracking finalizer left, active <= parallelism, DisruptionTarget before delete, \
         same conditions (and indexes, and counts of completed Jobs) as without kills: **{}**\n",
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
