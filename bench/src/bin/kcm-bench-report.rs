//! kcm-bench-report: re-renders the Markdown table and PNG chart of a
//! benchmark results JSON (as written by `make bench`), next to it, without
//! running the benchmarks again: `results/2026-11-30.json` gives
//! `results/2026-11-30.md` and `results/2026-11-30.png`.

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use kcm_bench::report;
use kcm_bench::results::Results;

#[derive(Debug, Parser)]
#[command(about = "Re-render the .md and .png report of a kcm-rs benchmark results JSON")]
struct Flags {
    /// Results JSON written by a benchmark run, e.g. bench/results/2026-11-30.json.
    results: PathBuf,
}

fn main() -> anyhow::Result<()> {
    let flags = Flags::parse();
    let text = std::fs::read_to_string(&flags.results)
        .with_context(|| format!("reading {}", flags.results.display()))?;
    let results: Results = serde_json::from_str(&text)
        .with_context(|| format!("parsing {}", flags.results.display()))?;
    let written = report::render_beside(&results, &flags.results)?;
    println!("{}", written.markdown.display());
    println!("{}", written.png.display());
    Ok(())
}
