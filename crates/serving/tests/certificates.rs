//! Client certificates on the kcm-rs binary against a real API server with
//! RBAC: a certificate from an untrusted CA and an expired one are
//! unauthenticated (401); a trusted certificate that is not
//! `system:masters` goes through a SubjectAccessReview for its CN and O:
//! 403 until RBAC grants the user /metrics, then 200.

mod binary;

use std::path::Path;
use std::time::Duration;

use kcm_e2e::https::{Credential, get_as};
use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair};
use serde_json::json;

struct Ca(rcgen::Certificate, KeyPair);

fn ca(name: &str) -> Ca {
    let key = KeyPair::generate().expect("key");
    let mut p = CertificateParams::new(vec![]).expect("params");
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.distinguished_name.push(DnType::CommonName, name);
    Ca(p.self_signed(&key).expect("ca"), key)
}

/// A client certificate for `cn` in `org` signed by `ca`, written to
/// `<dir>/<file>.crt` and `.key`.
fn client(dir: &Path, file: &str, ca: &Ca, cn: &str, org: &str, expired: bool) {
    let key = KeyPair::generate().expect("key");
    let mut p = CertificateParams::new(vec![]).expect("params");
    p.distinguished_name.push(DnType::CommonName, cn);
    p.distinguished_name.push(DnType::OrganizationName, org);
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    if expired {
        p.not_before = rcgen::date_time_ymd(2020, 1, 1);
        p.not_after = rcgen::date_time_ymd(2021, 1, 1);
    }
    let cert = p.signed_by(&key, &ca.0, &ca.1).expect("cert");
    std::fs::write(dir.join(format!("{file}.crt")), cert.pem()).expect("write");
    std::fs::write(dir.join(format!("{file}.key")), key.serialize_pem()).expect("write");
}

async fn code(port: u16, dir: &Path, file: &str) -> u16 {
    let (c, k) = (
        dir.join(format!("{file}.crt")),
        dir.join(format!("{file}.key")),
    );
    get_as(port, "/metrics", Credential::Cert(&c, &k))
        .await
        .map(|(c, _)| c)
        .unwrap_or(0)
}

#[tokio::test]
async fn client_certificates_as_kcm_judges_them() {
    let cp = kcm_e2e::shared();
    let admin = cp.client().await.expect("admin");
    let dir = tempfile::tempdir().expect("dir");
    let d = dir.path();
    let trusted = ca("kcm-rs-test-client-ca");
    std::fs::write(d.join("ca.crt"), trusted.0.pem()).expect("ca");
    client(d, "master", &trusted, "root", "system:masters", false);
    client(d, "rogue", &ca("rogue-ca"), "root", "system:masters", false);
    client(d, "expired", &trusted, "root", "system:masters", true);
    client(d, "reader", &trusted, "cert-reader", "cert-readers", false);
    let ca_flag = format!("--client-ca-file={}", d.join("ca.crt").display());
    let kcm = binary::start(
        cp,
        "certificates",
        &[ca_flag, "--controllers=job-controller".into()],
    )
    .await;

    let master = code(kcm.port, d, "master").await;
    let rogue = code(kcm.port, d, "rogue").await;
    let expired = code(kcm.port, d, "expired").await;
    let denied = code(kcm.port, d, "reader").await;
    eprintln!(
        "GET /metrics with a client certificate: system:masters {master}, untrusted CA {rogue}, \
         expired {expired}, CN=cert-reader O=cert-readers without RBAC {denied}"
    );
    assert_eq!(
        (master, rogue, expired, denied),
        (200, 401, 401, 403),
        "{}",
        kcm.log_tail()
    );

    // RBAC grants the certificate's group (its O): allowed once the
    // denial's 10 s cache entry is gone.
    let group = json!({ "kind": "Group", "name": "cert-readers",
        "apiGroup": "rbac.authorization.k8s.io" });
    binary::grant_metrics(&admin, "kcm-rs-test-cert-readers", group).await;
    let (c, k) = (d.join("reader.crt"), d.join("reader.key"));
    let allowed = binary::until(
        kcm.port,
        "/metrics",
        Credential::Cert(&c, &k),
        Duration::from_secs(20),
        |code| code == 200,
    )
    .await;
    eprintln!("after binding cert-readers to a /metrics reader role: {allowed}");
    assert_eq!(allowed, 200, "{}", kcm.log_tail());
}
