//! `kcm-rs explain` and `kcm-rs lint`: tools over the Job controller's own
//! pure code (`kcm_job::explain`, `kcm_job::lint`), separate from the
//! controller flags so `kcm-rs --kubeconfig=… --controllers=…` parses as
//! KCM's command line does.
//!
//! Layout: `mod.rs` parses the subcommands and maps errors to exit codes;
//! `input.rs` reads Jobs, pods, events and policies from files or the API
//! server; `render.rs` prints an explanation for a terminal; `lint.rs`
//! runs the checks and prints findings; `managed_by.rs` checks, from leader
//! Leases, that a Job's `spec.managedBy` names a running controller.

mod input;
mod lint;
mod managed_by;
mod render;

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use kcm_features::{FeatureGates, KubeVersion};
use kcm_job::explain::{self, Request, WhatIf};

#[derive(Debug, Parser)]
#[command(name = "kcm-rs", about = "Tools over kcm-rs's Job controller")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Text,
    Json,
    Yaml,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Color {
    Auto,
    Always,
    Never,
}

#[derive(Debug, clap::Args)]
struct Cluster {
    /// Path to a kubeconfig file; in-cluster config or $KUBECONFIG when unset.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (its namespace is the default for -n).
    #[arg(long)]
    context: Option<String>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Why a Job's pods were decided as they were, rule by rule.
    ///
    /// `kcm-rs explain job NAMESPACE/NAME` reads the Job, its pods and
    /// events from the API server; `kcm-rs explain -f job.yaml --pods
    /// pods.yaml` works offline.
    Explain {
        /// `job` (the only kind explained).
        kind: Option<String>,
        /// NAMESPACE/NAME, or NAME in -n's namespace (default: the
        /// kubeconfig context's).
        target: Option<String>,
        #[arg(short = 'n', long)]
        namespace: Option<String>,
        /// A Job manifest (YAML or JSON) instead of the API server.
        #[arg(short = 'f', long = "filename")]
        file: Option<PathBuf>,
        /// The Job's pods (a List, multi-document YAML or JSON), with -f.
        #[arg(long)]
        pods: Option<PathBuf>,
        /// Events of the Job's namespace, with -f.
        #[arg(long)]
        events: Option<PathBuf>,
        /// A proposed podFailurePolicy (or a Job carrying one) to evaluate
        /// against the Job's real failures.
        #[arg(long)]
        policy: Option<PathBuf>,
        /// With --policy: a proposed backoffLimit.
        #[arg(long)]
        backoff_limit: Option<i32>,
        /// With --policy: a proposed backoffLimitPerIndex.
        #[arg(long)]
        backoff_limit_per_index: Option<i32>,
        /// As the controller's flag; JobPodFailurePolicy=false explains what
        /// the controller does with the gate off.
        #[arg(long, default_value = "")]
        feature_gates: String,
        #[arg(short = 'o', long, value_enum, default_value_t = Output::Text)]
        output: Output,
        #[arg(long, value_enum, default_value_t = Color::Auto)]
        color: Color,
        #[command(flatten)]
        cluster: Cluster,
    },
    /// Pod failure policy mistakes in Job, CronJob or JobSet manifests.
    /// Exit code 1 when there are findings.
    Lint {
        /// Manifest files (`-` for stdin); none: the Jobs and CronJobs of
        /// the cluster.
        files: Vec<PathBuf>,
        /// With no files: this namespace (default: the kubeconfig
        /// context's).
        #[arg(short = 'n', long, conflicts_with = "all_namespaces")]
        namespace: Option<String>,
        /// With no files: every namespace.
        #[arg(short = 'A', long)]
        all_namespaces: bool,
        #[arg(short = 'o', long, value_enum, default_value_t = Output::Text)]
        output: Output,
        /// With no files: the namespace of kcm-rs's leader Lease (as its
        /// flag), read to tell whether Jobs' spec.managedBy runs. Default:
        /// the namespace of the Lease of that name the manifests or the
        /// chart made (labelled app.kubernetes.io/name=kcm-rs), wherever
        /// kcm-rs was installed; kube-system when none is found.
        #[arg(long)]
        leader_elect_resource_namespace: Option<String>,
        /// With no files: the name of kcm-rs's leader Lease (as its flag).
        #[arg(long, default_value = "kcm-rs")]
        leader_elect_resource_name: String,
        #[command(flatten)]
        cluster: Cluster,
    },
}

/// A tool failure: bad input (exit 2) or what the API server said.
#[derive(Debug)]
pub struct ToolError(pub String);

impl<E: std::fmt::Display> From<E> for ToolError {
    fn from(e: E) -> Self {
        ToolError(e.to_string())
    }
}

/// Is `arg` one of the tool subcommands (checked before KCM's flags)?
pub fn is_tool(arg: Option<&str>) -> bool {
    matches!(arg, Some("explain" | "lint"))
}

pub fn main(args: Vec<OsString>) -> ExitCode {
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: starting the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(run(cli.command)) {
        Ok(code) => code,
        Err(ToolError(msg)) => {
            eprintln!("error: {msg}");
            ExitCode::from(2)
        }
    }
}

async fn run(command: Command) -> Result<ExitCode, ToolError> {
    match command {
        Command::Explain {
            kind,
            target,
            namespace,
            file,
            pods,
            events,
            policy,
            backoff_limit,
            backoff_limit_per_index,
            feature_gates,
            output,
            color,
            cluster,
        } => {
            // Not tied to a cluster: a value any supported minor accepts.
            let parsed = KubeVersion::ALL
                .iter()
                .rev()
                .map(|v| FeatureGates::parse_for(*v, &feature_gates))
                .collect::<Vec<_>>();
            let gates = match parsed.iter().find_map(|r| r.as_ref().ok()) {
                Some(g) => g.clone(),
                None => match parsed.into_iter().next() {
                    Some(Err(e)) => return Err(ToolError(format!("--feature-gates: {e}"))),
                    _ => FeatureGates::default(),
                },
            };
            let snapshot = match file {
                Some(f) => input::from_files(&f, pods.as_deref(), events.as_deref())?,
                None => {
                    if let Some(k) = kind.as_deref()
                        && !matches!(k, "job" | "jobs" | "job.batch")
                    {
                        return Err(ToolError(format!(
                            "explain works on Jobs: kcm-rs explain job NAMESPACE/NAME (got {k:?})"
                        )));
                    }
                    let target = target.ok_or_else(|| {
                        ToolError(
                            "name the Job: kcm-rs explain job NAMESPACE/NAME, or -f FILE".into(),
                        )
                    })?;
                    let (client, context_ns) =
                        input::client(cluster.kubeconfig.as_deref(), cluster.context.as_deref())
                            .await?;
                    let default_ns = namespace.unwrap_or(context_ns);
                    let (ns, name) = split_target(&target, &default_ns)?;
                    input::from_cluster(client, &ns, &name).await?
                }
            };
            let what_if = match policy {
                Some(p) => Some(input::what_if(&p, backoff_limit, backoff_limit_per_index)?),
                None if backoff_limit.is_some() || backoff_limit_per_index.is_some() => {
                    let mut w = WhatIf {
                        policy: snapshot
                            .job
                            .spec
                            .as_ref()
                            .and_then(|s| s.pod_failure_policy.clone()),
                        ..WhatIf::default()
                    };
                    w.backoff_limit = backoff_limit;
                    w.backoff_limit_per_index = backoff_limit_per_index;
                    Some(w)
                }
                None => None,
            };
            let report = explain::explain(&Request {
                job: &snapshot.job,
                pods: &snapshot.pods,
                events: &snapshot.events,
                config: kcm_job::sync::Config::new(&gates),
                now: jiff::Timestamp::now(),
                what_if: what_if.as_ref(),
            });
            print!("{}", render::render(&report, output, color)?);
            Ok(ExitCode::SUCCESS)
        }
        Command::Lint {
            files,
            namespace,
            all_namespaces,
            output,
            leader_elect_resource_namespace,
            leader_elect_resource_name,
            cluster,
        } => {
            let scope = if all_namespaces {
                lint::Scope::All
            } else {
                lint::Scope::Namespace(namespace)
            };
            lint::run(
                &files,
                scope,
                output,
                cluster.kubeconfig.as_deref(),
                cluster.context.as_deref(),
                (leader_elect_resource_namespace, leader_elect_resource_name),
            )
            .await
        }
    }
}

/// `NAMESPACE/NAME`, or `NAME` in `namespace` (-n, else the context's).
fn split_target(target: &str, namespace: &str) -> Result<(String, String), ToolError> {
    match target.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() => {
            Ok((ns.to_string(), name.to_string()))
        }
        None if !target.is_empty() => Ok((namespace.to_string(), target.to_string())),
        _ => Err(ToolError(format!(
            "{target:?} is not NAMESPACE/NAME (or NAME with -n NAMESPACE)"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets() {
        assert_eq!(
            split_target("a/b", "x").ok(),
            Some(("a".to_string(), "b".to_string()))
        );
        assert_eq!(
            split_target("b", "x").ok(),
            Some(("x".to_string(), "b".to_string()))
        );
        assert!(split_target("a/", "x").is_err());
        assert!(split_target("/b", "x").is_err());
    }

    #[test]
    fn only_tool_words_leave_the_controller_flags() {
        assert!(is_tool(Some("explain")));
        assert!(is_tool(Some("lint")));
        assert!(!is_tool(Some("--kubeconfig=x")));
        assert!(!is_tool(None));
    }
}
