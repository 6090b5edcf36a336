//! kcm-rs as its Deployment runs it in a pod, on the real API server:
//!
//! - the chart installed into a namespace other than kube-system: kcm-rs,
//!   given the pod's namespace by the downward API (`POD_NAMESPACE`) and the
//!   rendered Deployment's flags, finds its controllers' ServiceAccounts
//!   there, holds the chart's Lease there and runs a Job to the end (before
//!   the fix it looked in kube-system and stopped at the first TokenRequest);
//! - the controllers' tokens are bound to a Secret the pod owns: the API
//!   server refuses to bind them to the pod itself (another ServiceAccount),
//!   the token's claims name the Secret, and once the pod is deleted upstream
//!   KCM's garbage collector deletes the Secret and the API server refuses
//!   the token.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{SelfSubjectReview, TokenRequest};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Pod, Secret, ServiceAccount};
use kcm_e2e::control_plane::client_from_kubeconfig;
use kcm_e2e::manifests::{
    CONTROLLER_ACCOUNTS, KcmRs, POD, container, container_args, create, finish_job_pod, holder,
    job, job_has, kcm_rs_binary, kcm_rs_pod, manifests, parse_docs, run_helm, sa_token, text,
    token_kubeconfig,
};
use kcm_e2e::upstream::UpstreamKcm;
use kcm_e2e::wait::wait_gone;
use kcm_e2e::{ControlPlane, TestNamespace, kubelet};
use kcm_runtime::client::identity::{self, BoundObject};
use kube::api::{DeleteParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

/// The namespace the chart is installed into.
const RELEASE_NS: &str = "kcm-system";

/// Who the API server says `client` is (SelfSubjectReview), or its error.
async fn who(client: &kube::Client) -> Result<String, kube::Error> {
    let api: Api<SelfSubjectReview> = Api::all(client.clone());
    let r = api
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await?;
    let user = r.status.and_then(|s| s.user_info).and_then(|u| u.username);
    Ok(user.unwrap_or_default())
}

/// A client of the control plane authenticating with `token`.
async fn with_token(cp: &ControlPlane, token: &str, name: &str) -> kube::Client {
    let path = cp.dir().join(format!("{name}.kubeconfig"));
    token_kubeconfig(cp.kubeconfig(), token, &path);
    client_from_kubeconfig(&path).await.expect("client")
}

/// The claims of a JWT (its middle part, base64url without padding).
fn jwt_claims(token: &str) -> Value {
    let part = token.split('.').nth(1).expect("a JWT");
    let mut bits = 0u32;
    let mut n = 0;
    let mut out = Vec::new();
    for c in part.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'-' => 62,
            b'_' => 63,
            _ => panic!("not base64url: {c}"),
        };
        bits = (bits << 6) | u32::from(v);
        n += 6;
        if n >= 8 {
            n -= 8;
            out.push((bits >> n) as u8);
            bits &= (1 << n) - 1;
        }
    }
    serde_json::from_slice(&out).expect("claims JSON")
}

#[tokio::test]
async fn the_chart_in_another_namespace_runs_with_that_namespaces_accounts() {
    let began = Instant::now();
    let bin = kcm_rs_binary();
    let cp = ControlPlane::start_with_audit().expect("control plane");
    let admin = cp.client().await.expect("admin client");
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    create(&namespaces, json!({ "metadata": { "name": RELEASE_NS } })).await;

    // The chart's objects for a release in kcm-system, applied as they are.
    let rendered = run_helm(&[
        "template",
        "kcm-rs",
        "charts/kcm-rs",
        "--namespace",
        RELEASE_NS,
    ]);
    let file = cp.dir().join("chart.yaml");
    std::fs::write(&file, &rendered).expect("write rendering");
    let made = kcm_e2e::apply::create_from_file(&admin, &file, RELEASE_NS).await;
    eprintln!("applied the chart's rendering: {:?}", made.expect("apply"));
    let docs = parse_docs(&rendered, "helm template");
    let dep = docs
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .expect("Deployment");
    let env: Vec<&str> = container(dep)["env"]
        .as_array()
        .expect("env")
        .iter()
        .map(|e| text(&e["valueFrom"]["fieldRef"]["fieldPath"]))
        .collect();
    assert_eq!(env, ["metadata.name", "metadata.namespace", "metadata.uid"]);

    // The pod it would run in, and its process identity kcm-system/kcm-rs.
    let pods: Api<Pod> = Api::namespaced(admin.clone(), RELEASE_NS);
    let spec = json!({ "serviceAccountName": "kcm-rs",
        "containers": [{ "name": "kcm-rs", "image": "kcm-rs:e2e" }] });
    let pod = create(
        &pods,
        json!({ "metadata": { "name": "kcm-rs-0" }, "spec": spec }),
    )
    .await;
    let uid = pod.uid().expect("uid");
    let token = sa_token(&admin, RELEASE_NS, "kcm-rs").await;
    let kubeconfig = cp.dir().join("kcm-rs.kubeconfig");
    token_kubeconfig(cp.kubeconfig(), &token, &kubeconfig);

    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port();
    let overridden = ["--kubeconfig=", "--bind-address=", "--secure-port="];
    let mut args =
        kcm_e2e::manifests::kubelet_expand(container_args(dep), &[("POD_NAMESPACE", RELEASE_NS)]);
    args.retain(|a| !overridden.iter().any(|o| a.starts_with(o)));
    args.extend([
        format!("--kubeconfig={}", kubeconfig.display()),
        "--bind-address=127.0.0.1".into(),
        format!("--secure-port={port}"),
        kcm_e2e::https::OPEN_PATHS.into(),
    ]);
    let log = cp.dir().join("kcm-rs.log");
    let out = std::fs::File::create(&log).expect("log");
    let child = Command::new(&bin)
        .args(&args)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env("POD_NAME", "kcm-rs-0")
        .env("POD_NAMESPACE", RELEASE_NS)
        .env("POD_UID", &uid)
        .stdin(Stdio::null())
        .stdout(out.try_clone().expect("log"))
        .stderr(out)
        .spawn()
        .expect("kcm-rs");
    let kcm = KcmRs { child, port, log };

    // The chart's Lease, in the release namespace.
    let leases: Api<Lease> = Api::namespaced(admin.clone(), RELEASE_NS);
    let lease = kcm
        .until(&leases, "kcm-rs", |l| !holder(l).is_empty())
        .await;
    eprintln!("{RELEASE_NS}/kcm-rs held by {}", holder(&lease));
    let text = std::fs::read_to_string(&kcm.log).expect("log");
    for account in CONTROLLER_ACCOUNTS {
        let user = format!("system:serviceaccount:{RELEASE_NS}:{account}");
        let checked = text
            .lines()
            .any(|l| l.contains("token checked") && l.contains(&user));
        kcm.check(checked, format!("no token checked for {user}"));
    }
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), RELEASE_NS);
    let anchor = kcm.ok(secrets.get("kcm-rs-0-controller-tokens").await);
    assert_eq!(anchor.owner_references()[0].uid, uid);

    // A Job runs to the end under kcm-system/kcm-rs-job-controller.
    let ns = TestNamespace::create(&admin, "in-cluster")
        .await
        .expect("ns");
    let node = format!("{}-node", ns.name);
    kubelet::create_node(&admin, &node, true, vec![])
        .await
        .expect("node");
    let jobs: Api<Job> = Api::namespaced(admin.clone(), &ns.name);
    let pods: Api<Pod> = Api::namespaced(admin.clone(), &ns.name);
    create(&jobs, job("one", false)).await;
    finish_job_pod(&kcm, &pods, "one", &node, 0).await;
    kcm.until(&jobs, "one", |j| job_has(j, "Complete")).await;

    // The writes were kcm-system/kcm-rs-job-controller's (the audit log).
    let audit = std::fs::read_to_string(cp.audit_log()).expect("audit log");
    let writer = format!("system:serviceaccount:{RELEASE_NS}:kcm-rs-job-controller");
    let wrote = audit
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .any(|e| {
            e["user"]["username"] == writer.as_str()
                && e["verb"] == "create"
                && e["objectRef"]["resource"] == "pods"
                && e["objectRef"]["namespace"] == ns.name.as_str()
                && e["responseStatus"]["code"] == 201
        });
    assert!(wrote, "no pod created by {writer}");
    eprintln!(
        "the chart in {RELEASE_NS}: Lease held, Job complete, in {:.1?}",
        began.elapsed()
    );
}

#[tokio::test]
async fn controller_tokens_are_bound_to_a_secret_the_pod_owns_and_die_with_it() {
    let cp = ControlPlane::start().expect("control plane");
    let admin = cp.client().await.expect("admin client");
    let rbac = manifests().join("base/rbac.yaml");
    let applied = kcm_e2e::apply::create_from_file(&admin, &rbac, "kube-system").await;
    applied.expect("apply base/rbac.yaml");
    let uid = kcm_rs_pod(&admin).await;
    let account = "kcm-rs-job-controller";
    let pp = PostParams::default();

    // The API server binds a token to a pod only when the pod runs as the
    // token's own ServiceAccount; kcm-rs's pod runs as kcm-rs.
    let sas: Api<ServiceAccount> = Api::namespaced(admin.clone(), "kube-system");
    let to_pod = BoundObject {
        kind: "Pod",
        name: POD.into(),
        uid: Some(uid.clone()),
    };
    let req = identity::token_request(Some(&to_pod));
    let refused = sas
        .create_subresource::<TokenRequest, TokenRequest>("token", account, &pp, &req)
        .await;
    eprintln!("a token of {account} bound to the pod: {refused:?}");
    assert!(
        matches!(&refused, Err(kube::Error::Api(s)) if s.code == 400
            && s.message.contains("different serviceaccount")),
        "{refused:?}"
    );

    // As the process's own account (base/rbac.yaml's rights): the Secret,
    // then again as a restarted container in the same pod finds it.
    let as_kcm = with_token(
        &cp,
        &sa_token(&admin, "kube-system", "kcm-rs").await,
        "kcm-rs",
    )
    .await;
    let anchor = identity::token_anchor(&as_kcm, "kube-system", (POD, &uid))
        .await
        .expect("the anchor Secret");
    let again = identity::token_anchor(&as_kcm, "kube-system", (POD, &uid))
        .await
        .expect("the anchor Secret, again");
    assert_eq!(
        (again.kind, &again.name, &again.uid),
        ("Secret", &anchor.name, &None)
    );
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), "kube-system");
    let secret = secrets.get(&anchor.name).await.expect("the Secret");
    let owner = &secret.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), &owner.uid),
        ("Pod", POD, &uid)
    );
    assert_eq!(anchor.uid, secret.uid());

    // Tokens as kcm-rs asks for them (bound by name and UID, and by name
    // only after a restart): the claims name the Secret, the lifetime is
    // 10 minutes, and they authenticate as the controller's account.
    let as_kcm_sas: Api<ServiceAccount> = Api::namespaced(as_kcm.clone(), "kube-system");
    let user = format!("system:serviceaccount:kube-system:{account}");
    let mut tokens = Vec::new();
    for bound in [&anchor, &again] {
        let req = identity::token_request(Some(bound));
        let got = as_kcm_sas
            .create_subresource::<TokenRequest, TokenRequest>("token", account, &pp, &req)
            .await
            .expect("a bound token");
        let token = got.status.and_then(|s| s.token).expect("token");
        let claims = jwt_claims(&token);
        let k = &claims["kubernetes.io"];
        assert_eq!(
            k["secret"],
            json!({ "name": anchor.name, "uid": secret.uid() }),
            "{claims}"
        );
        assert!(k.get("pod").is_none(), "{claims}");
        assert_eq!(claims["sub"], user.as_str());
        let life = claims["exp"].as_i64().unwrap_or(0) - claims["iat"].as_i64().unwrap_or(0);
        assert_eq!(life, 600, "{claims}");
        let client = with_token(&cp, &token, &format!("bound-{}", tokens.len())).await;
        assert_eq!(who(&client).await.expect("authenticates"), user);
        tokens.push(client);
    }

    // The pod is deleted: upstream KCM's garbage collector deletes the
    // Secret it owns, and the API server refuses the tokens.
    let _gc = UpstreamKcm::start(&cp, &["garbage-collector-controller"], &[]).expect("KCM");
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "kube-system");
    let deleted = Instant::now();
    pods.delete(POD, &DeleteParams::default().grace_period(0))
        .await
        .expect("delete the pod");
    wait_gone(&secrets, &anchor.name, Duration::from_secs(60))
        .await
        .expect("the garbage collector deletes the Secret");
    let secret_gone = deleted.elapsed();
    let deadline = Instant::now() + Duration::from_secs(60);
    for client in &tokens {
        loop {
            match who(client).await {
                Err(kube::Error::Api(s)) if s.code == 401 => break,
                other => {
                    assert!(
                        Instant::now() < deadline,
                        "the token still works: {other:?}"
                    );
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
            }
        }
    }
    eprintln!(
        "pod deleted: its Secret gone after {secret_gone:.1?}, both tokens refused (401) after {:.1?}",
        deleted.elapsed()
    );
}
