//! `kcm-rs lint`: files or the cluster's Jobs and CronJobs through
//! `kcm_job::lint`, and from the cluster also `managed_by` (a Job whose
//! `managedBy` no running controller answers to); exit 1 when anything is
//! found.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use k8s_openapi::api::batch::v1::{CronJob, Job};
use kcm_job::lint::{Finding, lint_document};
use kube::api::{Api, ListParams};
use serde_json::Value;

use jiff::Timestamp;

use super::managed_by::{self, Subject};
use super::{Output, ToolError, input};

/// Which namespaces a cluster lint reads: `-A`, or `-n` (else the
/// kubeconfig context's namespace, as kubectl).
pub enum Scope {
    All,
    Namespace(Option<String>),
}

pub async fn run(
    files: &[PathBuf],
    scope: Scope,
    output: Output,
    kubeconfig: Option<&Path>,
    context: Option<&str>,
    kcm_rs_lease: (Option<String>, String),
) -> Result<ExitCode, ToolError> {
    let mut docs: Vec<Value> = Vec::new();
    let mut findings: Vec<Finding> = Vec::new();
    if files.is_empty() {
        let (client, context_ns) = input::client(kubeconfig, context).await?;
        let (jobs, crons): (Api<Job>, Api<CronJob>) = match scope {
            Scope::Namespace(ns) => {
                let ns = ns.unwrap_or(context_ns);
                (
                    Api::namespaced(client.clone(), &ns),
                    Api::namespaced(client.clone(), &ns),
                )
            }
            Scope::All => (Api::all(client.clone()), Api::all(client.clone())),
        };
        let lp = ListParams::default();
        let jobs = jobs
            .list(&lp)
            .await
            .map_err(|e| ToolError(format!("listing Jobs: {e}")))?;
        let crons = crons
            .list(&lp)
            .await
            .map_err(|e| ToolError(format!("listing CronJobs: {e}")))?;
        let subjects = || (jobs.iter().map(Subject::Job)).chain(crons.iter().map(Subject::CronJob));
        if managed_by::any_named(subjects()) {
            let now = Timestamp::now();
            let (ns, name) = kcm_rs_lease;
            let ns = match ns {
                Some(ns) => ns,
                None => managed_by::locate(&client, &name, now).await,
            };
            let leases = managed_by::Leases::read(&client, (ns, name), now).await;
            findings.extend(subjects().filter_map(|s| managed_by::check(s, &leases)));
        }
        for j in &jobs {
            docs.push(with_kind(serde_json::to_value(j)?, "Job"));
        }
        for c in &crons {
            docs.push(with_kind(serde_json::to_value(c)?, "CronJob"));
        }
    } else {
        for f in files {
            docs.extend(input::documents(f)?);
        }
    }
    for d in &docs {
        findings.extend(lint_document(d)?);
    }
    match output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&findings)?),
        Output::Yaml => print!("{}", serde_yaml_ng::to_string(&findings)?),
        Output::Text => print!("{}", text(&findings, docs.len())),
    }
    Ok(if findings.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Objects from a typed list have no `kind`; the checks key on it.
fn with_kind(mut v: Value, kind: &str) -> Value {
    v["kind"] = Value::String(kind.into());
    v
}

pub fn text(findings: &[Finding], objects: usize) -> String {
    let mut out = String::new();
    for f in findings {
        out.push_str(&format!(
            "{}: {}: {} [{}]\n    fix: {}\n",
            f.object, f.path, f.problem, f.check, f.fix
        ));
    }
    out.push_str(&format!(
        "{} finding(s) in {objects} object(s)\n",
        findings.len()
    ));
    out
}
