//! Command-line flags, with kube-controller-manager's names and defaults for
//! everything kcm-rs shares with it.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use kcm_runtime::host::HostSettings;

pub use kcm_runtime::flag_values::{parse_go_bool, parse_go_duration};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Parser)]
#[command(
    name = "kcm-rs",
    version,
    about = "The Job, pod GC, taint-eviction and disruption controllers of kube-controller-manager, in Rust"
)]
pub struct Flags {
    /// Path to a kubeconfig file; in-cluster config or $KUBECONFIG when unset.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,

    /// The address of the API server (overrides any value in kubeconfig).
    #[arg(long)]
    pub master: Option<String>,

    /// Controllers to run: '*' for all on by default, 'name' to enable one,
    /// '-name' to disable one (KCM names: job-controller,
    /// pod-garbage-collector-controller, taint-eviction-controller,
    /// disruption-controller).
    #[arg(long, value_delimiter = ',', default_value = "*")]
    pub controllers: Vec<String>,

    /// Feature gates as key=value pairs: JobPodFailurePolicy=true|false,
    /// PodDisruptionConditions=true|false.
    #[arg(long, default_value = "")]
    pub feature_gates: String,

    /// QPS to use while talking with the API server, per controller.
    #[arg(long, default_value_t = 20.0)]
    pub kube_api_qps: f32,

    /// Burst to use while talking with the API server, per controller.
    #[arg(long, default_value_t = 30)]
    pub kube_api_burst: u32,

    /// Content type of the shared informers' lists and watches:
    /// application/vnd.kubernetes.protobuf (pods in protobuf, other kinds
    /// in JSON; KCM's default), or application/json. Writes are JSON
    /// either way.
    #[arg(long, default_value = "application/vnd.kubernetes.protobuf")]
    pub kube_api_content_type: kcm_runtime::informer::ContentType,

    /// The Job controller's flags.
    #[command(flatten)]
    pub job: kcm_job::JobSettings,

    /// The disruption controller's flags.
    #[command(flatten)]
    pub disruption: kcm_disruption::DisruptionSettings,

    /// The pod garbage collector's flags.
    #[command(flatten)]
    pub podgc: kcm_podgc::PodGcSettings,

    /// Time the controllers get to finish in-flight work after SIGTERM
    /// (KCM 1.35+; kcm-rs never drains past the leadership fence).
    /// Unset: `--shutdown-grace-period`.
    #[arg(long, value_parser = parse_go_duration)]
    pub controller_shutdown_timeout: Option<Duration>,

    /// Start a leader election client and gain leadership before running.
    /// A bare `--leader-elect` means true, as with KCM's Go flags.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set,
        num_args = 0..=1, require_equals = true, default_missing_value = "true",
        value_parser = parse_go_bool)]
    pub leader_elect: bool,

    /// Behave as this Kubernetes minor's kube-controller-manager (`1.N` or
    /// `kube=1.N`, 1.34 to 1.37) instead of the API server's own version.
    #[arg(long)]
    pub emulated_version: Option<String>,

    /// How long a standby waits after the last observed renewal before
    /// taking the lease.
    #[arg(long, default_value = "15s", value_parser = parse_go_duration)]
    pub leader_elect_lease_duration: Duration,

    /// How long the leader keeps trying to renew before it gives up.
    #[arg(long, default_value = "10s", value_parser = parse_go_duration)]
    pub leader_elect_renew_deadline: Duration,

    /// How long clients wait between acquire and renew attempts.
    #[arg(long, default_value = "2s", value_parser = parse_go_duration)]
    pub leader_elect_retry_period: Duration,

    /// The lock type; only `leases` is supported (as in current KCM).
    #[arg(long, default_value = "leases")]
    pub leader_elect_resource_lock: String,

    /// Name of the Lease; distinct from KCM's own so both can run.
    #[arg(long, default_value = "kcm-rs")]
    pub leader_elect_resource_name: String,

    /// Namespace of the Lease.
    #[arg(long, default_value = "kube-system")]
    pub leader_elect_resource_namespace: String,

    /// Address to serve /healthz, /readyz and /metrics on.
    #[arg(long, default_value = "0.0.0.0")]
    pub bind_address: IpAddr,

    /// HTTPS port for /healthz, /readyz, /livez and /metrics. 0 disables
    /// serving.
    #[arg(long = "secure-port", alias = "port", default_value_t = 10257)]
    pub port: u16,

    /// Plain-HTTP port for /healthz, /livez and /readyz alone, served on a
    /// thread of its own so that the kubelet's probes are answered whatever
    /// floods the secure port (not a KCM flag; the chart and manifests
    /// probe it). 0 (the default, as KCM): the probes use the secure port.
    #[arg(long, default_value_t = 0)]
    pub health_port: u16,

    /// Address of the health port; unset: --bind-address.
    #[arg(long)]
    pub health_bind_address: Option<IpAddr>,

    /// Serving certificate (PEM, with intermediates); with
    /// --tls-private-key-file. Unset: a self-signed certificate.
    #[arg(long)]
    pub tls_cert_file: Option<PathBuf>,

    /// Serving key (PEM) for --tls-cert-file.
    #[arg(long)]
    pub tls_private_key_file: Option<PathBuf>,

    /// Where the self-signed certificate is kept (kcm-rs.crt, kcm-rs.key);
    /// empty: generated in memory at every start. Ignored with
    /// --tls-cert-file.
    #[arg(long)]
    pub cert_dir: Option<PathBuf>,

    /// CA bundle for client certificates: a verified certificate's last CN
    /// is the user, its O entries the groups. Reloaded when it changes, as
    /// are --tls-cert-file and --tls-private-key-file.
    #[arg(long)]
    pub client_ca_file: Option<PathBuf>,

    /// Minimum TLS version: VersionTLS10, VersionTLS11, VersionTLS12 (the
    /// default) or VersionTLS13. rustls has no TLS 1.0 or 1.1, so the first
    /// two serve TLS 1.2 and up.
    #[arg(long, default_value = "", hide_default_value = true,
        value_parser = kcm_serving::parse_min_version)]
    pub tls_min_version: kcm_serving::MinVersion,

    /// TLS 1.2 cipher suites, by Go's names (KCM's accepted values); TLS 1.3
    /// suites are always on, as in Go. Names rustls does not implement (RSA
    /// key exchange, CBC, 3DES, RC4) are skipped with a warning; unknown
    /// names are refused. Unset: rustls's defaults (ECDHE with AES-GCM or
    /// ChaCha20-Poly1305).
    #[arg(long, value_delimiter = ',', value_parser = kcm_serving::parse_cipher_suite)]
    pub tls_cipher_suites: Vec<kcm_serving::CipherSuite>,

    /// kubeconfig for TokenReview calls; in-cluster configuration when
    /// unset. Without either, bearer tokens are refused.
    #[arg(long)]
    pub authentication_kubeconfig: Option<PathBuf>,

    /// kubeconfig for SubjectAccessReview calls; in-cluster configuration
    /// when unset. Without either, only system:masters and the always-allowed
    /// paths pass.
    #[arg(long)]
    pub authorization_kubeconfig: Option<PathBuf>,

    /// Paths served without authentication or authorization (a trailing
    /// `*` matches a prefix).
    #[arg(long, value_delimiter = ',', default_value = "/healthz,/readyz,/livez")]
    pub authorization_always_allow_paths: Vec<String>,

    /// Give each controller its own ServiceAccount token (TokenRequest
    /// API, `<namespace>/<prefix><controller client name>`), as KCM's flag.
    /// In a pod (`POD_NAME`, `POD_UID`), the tokens are bound to a Secret
    /// the pod owns, so they die with it.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set,
        num_args = 0..=1, require_equals = true, default_missing_value = "true",
        value_parser = parse_go_bool)]
    pub use_service_account_credentials: bool,

    /// Prefix of the controllers' ServiceAccount names
    /// (`<prefix><controller client name>`, e.g. `kcm-rs-job-controller`).
    /// Not KCM's names: kube-apiserver binds those to its broad bootstrap
    /// roles on every start. An empty prefix in kube-system (KCM's own
    /// accounts) is refused unless --allow-kcm-service-accounts.
    #[arg(long, default_value = "kcm-rs-")]
    pub controller_service_account_prefix: String,

    /// Namespace of the controllers' ServiceAccounts. Unset: the pod's own
    /// namespace in a pod (POD_NAMESPACE, else the in-cluster namespace
    /// file), kube-system (KCM's) elsewhere.
    #[arg(long)]
    pub controller_service_account_namespace: Option<String>,

    /// Accept an empty --controller-service-account-prefix in kube-system:
    /// the controllers then act as KCM's own accounts, with the rights of
    /// upstream's system:controller:* roles (wider than kcm-rs's roles).
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set,
        num_args = 0..=1, require_equals = true, default_missing_value = "true",
        value_parser = parse_go_bool)]
    pub allow_kcm_service_accounts: bool,

    /// Renew controller tokens this often instead of at 80 % of their
    /// lifetime. For tests.
    #[arg(long, value_parser = parse_go_duration, hide = true)]
    pub service_account_token_renewal: Option<Duration>,

    /// Log verbosity, as klog's -v: 0-1 info, 2-3 debug, 4+ trace.
    #[arg(short = 'v', long = "v", default_value_t = 0)]
    pub verbosity: u8,

    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub logging_format: LogFormat,

    /// How long in-flight syncs may take to finish after SIGTERM.
    #[arg(long, default_value = "30s", value_parser = parse_go_duration)]
    pub shutdown_grace_period: Duration,

    /// A sync (or a pod GC pass without progress) running longer is
    /// cancelled and its key retried with back-off. Default 5m.
    #[arg(long, value_parser = positive_duration)]
    pub controller_sync_timeout: Option<Duration>,

    /// A controller's /healthz check fails while a sync has run (without
    /// progress) longer, or keys have waited longer with no sync finished.
    /// Default 6m.
    #[arg(long, value_parser = positive_duration)]
    pub controller_stall_timeout: Option<Duration>,
}

/// A positive Go duration.
fn positive_duration(s: &str) -> Result<Duration, String> {
    let d = parse_go_duration(s)?;
    if d.is_zero() {
        return Err("must be more than 0".into());
    }
    Ok(d)
}

impl Flags {
    /// The controller hosts' bounds these flags give.
    pub fn host_settings(&self) -> HostSettings {
        HostSettings::from_flags(self.controller_sync_timeout, self.controller_stall_timeout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kcm_runtime::informer::ContentType;

    #[test]
    fn go_durations() {
        assert_eq!(parse_go_duration("15s"), Ok(Duration::from_secs(15)));
        assert_eq!(parse_go_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_go_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_go_duration("1.5h"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_go_duration("0"), Ok(Duration::ZERO));
        for bad in ["", "15", "s", "1x", "-1s", "1.2.3s"] {
            assert!(parse_go_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn kcm_defaults() {
        let f = Flags::try_parse_from(["kcm-rs"]).expect("defaults parse");
        assert_eq!(f.controllers, vec!["*"]);
        assert_eq!(f.kube_api_qps, 20.0);
        assert_eq!(f.kube_api_burst, 30);
        assert_eq!(f.kube_api_content_type, ContentType::Protobuf);
        assert_eq!(f.job.concurrent_job_syncs, 5);
        assert_eq!(f.podgc.terminated_pod_gc_threshold, 12500);
        assert!(f.leader_elect);
        assert_eq!(f.leader_elect_lease_duration, Duration::from_secs(15));
        assert_eq!(f.leader_elect_renew_deadline, Duration::from_secs(10));
        assert_eq!(f.leader_elect_retry_period, Duration::from_secs(2));
        assert_eq!(f.leader_elect_resource_name, "kcm-rs");
        assert_eq!(f.leader_elect_resource_namespace, "kube-system");
        assert_eq!(f.port, 10257);
    }

    #[test]
    fn kcm_syntax_parses() {
        let f = Flags::try_parse_from([
            "kcm-rs",
            "--controllers=*,-job-controller",
            "--feature-gates=JobPodFailurePolicy=false",
            "--leader-elect=false",
            "--leader-elect-lease-duration=4s",
            "--kube-api-qps=50",
            "-v=4",
        ])
        .expect("parse");
        assert_eq!(f.controllers, vec!["*", "-job-controller"]);
        assert_eq!(f.feature_gates, "JobPodFailurePolicy=false");
        assert!(!f.leader_elect);
        assert_eq!(f.leader_elect_lease_duration, Duration::from_secs(4));
        assert_eq!(f.kube_api_qps, 50.0);
        assert_eq!(f.verbosity, 4);
    }

    #[test]
    fn controller_bounds_set_the_host_settings() {
        let f = Flags::try_parse_from([
            "kcm-rs",
            "--controller-sync-timeout=90s",
            "--controller-stall-timeout=2m",
        ])
        .expect("parse");
        assert_eq!(f.controller_sync_timeout, Some(Duration::from_secs(90)));
        let h = f.host_settings();
        assert_eq!(h.sync_timeout, Duration::from_secs(90));
        assert_eq!(h.stall_timeout, Duration::from_secs(120));
        let only_sync = Flags::try_parse_from(["kcm-rs", "--controller-sync-timeout=10m"])
            .expect("parse")
            .host_settings();
        assert_eq!(only_sync.stall_timeout, Duration::from_secs(660));
        assert_eq!(
            Flags::try_parse_from(["kcm-rs"])
                .expect("parse")
                .host_settings(),
            HostSettings::default()
        );
        assert!(Flags::try_parse_from(["kcm-rs", "--controller-sync-timeout=0"]).is_err());
        assert!(Flags::try_parse_from(["kcm-rs", "--controller-stall-timeout=soon"]).is_err());
    }

    #[test]
    fn bad_values_are_rejected() {
        assert!(Flags::try_parse_from(["kcm-rs", "--leader-elect-retry-period=soon"]).is_err());
        assert!(Flags::try_parse_from(["kcm-rs", "--kube-api-burst=-1"]).is_err());
        assert!(Flags::try_parse_from(["kcm-rs", "--kube-api-content-type=text/yaml"]).is_err());
        let json = ["kcm-rs", "--kube-api-content-type=application/json"];
        let json = Flags::try_parse_from(json).expect("json");
        assert_eq!(json.kube_api_content_type, ContentType::Json);
        assert!(Flags::try_parse_from(["kcm-rs", "--no-such-flag"]).is_err());
    }

    #[test]
    fn newer_kcm_flags() {
        let f = Flags::try_parse_from([
            "kcm-rs",
            "--concurrent-disruption-syncs=3",
            "--controller-shutdown-timeout=5s",
        ])
        .expect("parse");
        assert_eq!(f.disruption.concurrent_disruption_syncs, 3);
        assert_eq!(f.controller_shutdown_timeout, Some(Duration::from_secs(5)));
        let d = Flags::try_parse_from(["kcm-rs"]).expect("parse");
        assert_eq!(
            (
                d.disruption.concurrent_disruption_syncs,
                d.controller_shutdown_timeout
            ),
            (1, None)
        );
        assert!(Flags::try_parse_from(["kcm-rs", "--concurrent-disruption-syncs=0"]).is_err());
    }

    #[test]
    fn tls_flags_take_component_base_names() {
        let d = Flags::try_parse_from(["kcm-rs"]).expect("defaults");
        assert_eq!(d.tls_min_version, kcm_serving::MinVersion::Tls12);
        assert!(d.tls_cipher_suites.is_empty());
        let f = Flags::try_parse_from([
            "kcm-rs",
            "--tls-min-version=VersionTLS13",
            "--tls-cipher-suites=TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,TLS_RSA_WITH_AES_256_GCM_SHA384",
        ])
        .expect("parse");
        assert_eq!(f.tls_min_version, kcm_serving::MinVersion::Tls13);
        let names: Vec<&str> = f.tls_cipher_suites.iter().map(|s| s.name).collect();
        assert_eq!(
            names,
            [
                "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
                "TLS_RSA_WITH_AES_256_GCM_SHA384"
            ]
        );
        for bad in ["--tls-min-version=TLS1.3", "--tls-cipher-suites=TLS_NOPE"] {
            let e = Flags::try_parse_from(["kcm-rs", bad]).expect_err(bad);
            assert_eq!(e.exit_code(), 2, "{bad}");
        }
    }

    #[test]
    fn bool_flags_parse_as_go_flags_do() {
        let le = |args: &[&str]| {
            let mut v = vec!["kcm-rs"];
            v.extend_from_slice(args);
            Flags::try_parse_from(v).map(|f| f.leader_elect)
        };
        assert!(le(&["--leader-elect"]).expect("bare"));
        assert!(!le(&["--leader-elect=false"]).expect("false"));
        assert!(!le(&["--leader-elect=F"]).expect("F"));
        assert!(le(&["--leader-elect=1"]).expect("1"));
        assert!(le(&["--leader-elect=yes"]).is_err());
        let f = Flags::try_parse_from(["kcm-rs", "--use-service-account-credentials"]);
        assert!(f.expect("bare").use_service_account_credentials);
        let f = Flags::try_parse_from(["kcm-rs", "--emulated-version=1.35"]).expect("parse");
        assert_eq!(f.emulated_version.as_deref(), Some("1.35"));
    }
}
