//! The Job controller's settings and their flags (flattened into the
//! binary's; KCM's names and defaults).

/// `--concurrent-job-syncs`.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct JobSettings {
    /// Number of Job objects synced concurrently.
    #[arg(long, default_value_t = 5)]
    pub concurrent_job_syncs: u32,
}

impl Default for JobSettings {
    fn default() -> Self {
        JobSettings {
            concurrent_job_syncs: 5,
        }
    }
}
