//! The client side of `--kube-api-content-type`: how long kcm-rs takes to
//! decode the same pods from JSON and from protobuf into its cache type,
//! and how many bytes each encoding puts on the wire. It starts the local
//! control plane, creates W4's pods (Job pods and unrelated pods, bound,
//! with PDBs), lists them once in each encoding and decodes each list
//! `--rounds` times. A profile, not a comparison with upstream: `make
//! bench`'s A/B (`--kcm-rs-arg`) measures whole-process CPU.

use std::time::Instant;

use anyhow::Context;
use clap::Parser;
use kcm_e2e::{ControlPlane, TestNamespace, wire};
use kcm_runtime::informer::PROTOBUF;

#[derive(Parser)]
struct Flags {
    /// Pods to create and decode.
    #[arg(long, default_value_t = 5000)]
    pods: usize,
    /// Times each list is decoded (the figures are per pod, averaged).
    #[arg(long, default_value_t = 20)]
    rounds: usize,
}

fn decode_json(bytes: &[u8]) -> anyhow::Result<usize> {
    Ok(wire::json_pods(bytes)?.len())
}

fn decode_protobuf(bytes: &[u8]) -> anyhow::Result<usize> {
    Ok(wire::protobuf_pods(bytes)?.len())
}

/// Mean nanoseconds per pod over `rounds` decodes.
fn time(rounds: usize, pods: usize, f: impl Fn() -> anyhow::Result<usize>) -> anyhow::Result<f64> {
    anyhow::ensure!(f()? == pods, "decoded a different number of pods");
    let start = Instant::now();
    for _ in 0..rounds {
        f()?;
    }
    Ok(start.elapsed().as_nanos() as f64 / (rounds * pods) as f64)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let flags = Flags::parse();
    let cp = ControlPlane::start().context("control plane")?;
    let client = cp.client().await?;
    let ns = TestNamespace::create(&client, "decode").await?;
    eprintln!("creating {} pods ...", flags.pods);
    kcm_bench::memory::grow(&client, &ns.name, 0, flags.pods).await?;
    let json = wire::list_pods_raw(&client, &ns.name, "application/json").await?;
    let proto = wire::list_pods_raw(&client, &ns.name, PROTOBUF).await?;
    let pods = decode_json(&json)?;
    let json_ns = time(flags.rounds, pods, || decode_json(&json))?;
    let proto_ns = time(flags.rounds, pods, || decode_protobuf(&proto))?;
    let per = |b: usize| b as f64 / pods as f64;
    println!("| encoding | bytes/pod | decode ns/pod |");
    println!("|---|--:|--:|");
    println!("| JSON | {:.0} | {json_ns:.0} |", per(json.len()));
    println!("| protobuf | {:.0} | {proto_ns:.0} |", per(proto.len()));
    println!(
        "\n{pods} pods, {} rounds: protobuf/JSON {:.2}× bytes, {:.2}× decode time",
        flags.rounds,
        proto.len() as f64 / json.len() as f64,
        proto_ns / json_ns
    );
    Ok(())
}
