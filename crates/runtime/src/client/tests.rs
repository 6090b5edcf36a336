//! The client stack over a mocked API server: real `kube::Api` calls, fake
//! transport.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kcm_mock_api::{MockApi, Reply, Seen};
use kube::api::{Api, PostParams};
use kube::client::ClientBuilder;
use tokio::time::Instant;

use super::*;

/// The shared mock API server with this file's client stack on top.
#[derive(Clone)]
struct Mock(MockApi);

const POD_JSON: &str =
    r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"default"}}"#;

/// `code` with a pod (success) or a `Status` (failure) body.
fn code(code: u16) -> Reply {
    if code < 300 {
        Reply::json(code, serde_json::from_str(POD_JSON).expect("pod json"))
    } else {
        Reply::status(code, "ServiceUnavailable")
    }
}

impl Mock {
    /// Answers with `replies` in order; the last one repeats.
    fn new(replies: &[Reply]) -> Self {
        Mock(MockApi::new().replies(replies.to_vec()))
    }

    fn seen(&self) -> Vec<Seen> {
        self.0.seen()
    }

    fn client(&self, opts: &ClientOptions, host: &str) -> kube::Client {
        let stack = ClientStack::new(opts, host).expect("valid options");
        ClientBuilder::new(self.0.service(), "default")
            .with_layer(&stack)
            .build()
    }
}

fn opts(qps: f32, burst: u32) -> ClientOptions {
    ClientOptions {
        qps,
        burst,
        user_agent_component: "job-controller".into(),
        ..ClientOptions::default()
    }
}

fn pod() -> Pod {
    serde_json::from_str(POD_JSON).expect("pod json")
}

fn requests(o: &ClientOptions, code: &str, method: &str, host: &str) -> u64 {
    o.metrics
        .client
        .requests_total
        .with_label_values(&[code, method, host])
        .get()
}

fn durations(o: &ClientOptions, verb: &str, host: &str) -> u64 {
    o.metrics
        .client
        .request_duration
        .with_label_values(&[verb, host])
        .get_sample_count()
}

#[tokio::test(start_paused = true)]
async fn burst_plus_one_request_waits_one_over_qps() {
    let o = opts(10.0, 3);
    let host = "limiter.test:6443";
    let mock = Mock::new(&[code(200)]);
    let pods: Api<Pod> = Api::default_namespaced(mock.client(&o, host));
    for _ in 0..5 {
        pods.get("p").await.expect("get");
    }
    let seen = mock.seen();
    assert_eq!(seen.len(), 5);
    let t0 = seen[0].at;
    let offsets: Vec<Duration> = seen.iter().map(|s| s.at - t0).collect();
    // Three free (the burst), then one every 100 ms (1/qps).
    assert_eq!(offsets[1], Duration::ZERO);
    assert_eq!(offsets[2], Duration::ZERO);
    assert!(
        offsets[3] >= Duration::from_millis(100) && offsets[3] <= Duration::from_millis(102),
        "{offsets:?}"
    );
    assert!(
        offsets[4] >= Duration::from_millis(200) && offsets[4] <= Duration::from_millis(203),
        "{offsets:?}"
    );
    let waited = o
        .metrics
        .client
        .rate_limiter_duration
        .with_label_values(&["GET", host]);
    assert_eq!(waited.get_sample_count(), 5);
    assert!(
        (waited.get_sample_sum() - 0.2).abs() < 0.01,
        "{}",
        waited.get_sample_sum()
    );
}

#[tokio::test(start_paused = true)]
async fn each_client_has_its_own_bucket() {
    let mock = Mock::new(&[code(200)]);
    let a: Api<Pod> = Api::default_namespaced(mock.client(&opts(1.0, 1), "bucket-a.test"));
    let b: Api<Pod> = Api::default_namespaced(mock.client(&opts(1.0, 1), "bucket-b.test"));
    let start = Instant::now();
    a.get("p").await.expect("get");
    b.get("p").await.expect("get");
    assert_eq!(start.elapsed(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn watches_are_neither_throttled_nor_timed() {
    let o = opts(1.0, 1);
    let host = "watch.test";
    let mock = Mock::new(&[code(200)]);
    let client = mock.client(&o, host);
    Api::<Pod>::default_namespaced(client.clone())
        .get("p")
        .await
        .expect("get");
    let before = durations(&o, "GET", host);
    let start = Instant::now();
    let req = Request::get("/api/v1/namespaces/default/pods?watch=true&resourceVersion=1")
        .body(Body::empty())
        .expect("request");
    let res = client.send(req).await.expect("watch");
    drop(res);
    assert_eq!(start.elapsed(), Duration::ZERO, "watch was throttled");
    assert_eq!(durations(&o, "GET", host), before, "watch was timed");
    assert_eq!(
        requests(&o, "200", "GET", host),
        2,
        "watch attempts are still counted"
    );
}

#[tokio::test(start_paused = true)]
async fn get_is_retried_at_most_three_times_on_503() {
    let o = opts(100.0, 100);
    let host = "retry-get.test";
    let mock = Mock::new(&[code(503)]);
    let pods: Api<Pod> = Api::default_namespaced(mock.client(&o, host));
    let start = Instant::now();
    let err = pods.get("p").await.expect_err("503 surfaces");
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 503),
        "{err:?}"
    );
    assert_eq!(mock.seen().len(), 4, "1 attempt + 3 retries");
    // 100 + 200 + 400 ms of backoff.
    assert!(
        start.elapsed() >= Duration::from_millis(700),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(requests(&o, "503", "GET", host), 4);
    let retries = o
        .metrics
        .client
        .retries_total
        .with_label_values(&["503", "GET", host])
        .get();
    assert_eq!(retries, 3);
    assert_eq!(
        durations(&o, "GET", host),
        1,
        "one duration per request, not per attempt"
    );
}

#[tokio::test(start_paused = true)]
async fn retry_succeeds_and_honours_retry_after() {
    let o = opts(100.0, 100);
    let host = "retry-after.test";
    let mock = Mock::new(&[
        code(429).retry_after("2"),
        code(503).retry_after("600"),
        code(200),
    ]);
    let pods: Api<Pod> = Api::default_namespaced(mock.client(&o, host));
    pods.get("p").await.expect("third attempt succeeds");
    let seen = mock.seen();
    assert_eq!(seen.len(), 3);
    assert_eq!(seen[1].at - seen[0].at, Duration::from_secs(2));
    // 600 s asked, capped at 10 s.
    assert!(seen[2].at - seen[1].at >= MAX_RETRY_AFTER);
    assert!(seen[2].at - seen[1].at < MAX_RETRY_AFTER + Duration::from_millis(50));
    assert_eq!(requests(&o, "429", "GET", host), 1);
    assert_eq!(requests(&o, "503", "GET", host), 1);
    assert_eq!(requests(&o, "200", "GET", host), 1);
}

#[tokio::test(start_paused = true)]
async fn post_is_never_retried() {
    let o = opts(100.0, 100);
    let host = "retry-post.test";
    for reply in [code(503), code(429).retry_after("1"), Reply::Reset] {
        let mock = Mock::new(std::slice::from_ref(&reply));
        let pods: Api<Pod> = Api::default_namespaced(mock.client(&o, host));
        pods.create(&PostParams::default(), &pod())
            .await
            .expect_err("failure surfaces");
        assert_eq!(mock.seen().len(), 1, "{reply:?}");
        assert_eq!(mock.seen()[0].method, http::Method::POST);
    }
    assert_eq!(requests(&o, "503", "POST", host), 1);
    assert_eq!(requests(&o, "429", "POST", host), 1);
    assert_eq!(requests(&o, "<error>", "POST", host), 1);
}

#[tokio::test(start_paused = true)]
async fn get_is_retried_after_connection_reset_but_put_is_not() {
    let o = opts(100.0, 100);
    let host = "retry-conn.test";
    let mock = Mock::new(&[Reply::Reset, code(200)]);
    let pods: Api<Pod> = Api::default_namespaced(mock.client(&o, host));
    pods.get("p").await.expect("retried");
    assert_eq!(mock.seen().len(), 2);
    assert_eq!(requests(&o, "<error>", "GET", host), 1);
    assert_eq!(requests(&o, "200", "GET", host), 1);

    let mock = Mock::new(&[Reply::Reset, code(200)]);
    let pods: Api<Pod> = Api::default_namespaced(mock.client(&o, host));
    pods.replace("p", &PostParams::default(), &pod())
        .await
        .expect_err("PUT not retried on a connection error");
    assert_eq!(mock.seen().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn metrics_and_user_agent_per_request() {
    let o = opts(100.0, 100);
    let host = "labels.test:443";
    let mock = Mock::new(&[code(200)]);
    let pods: Api<Pod> = Api::default_namespaced(mock.client(&o, host));
    pods.get("p").await.expect("get");
    pods.create(&PostParams::default(), &pod())
        .await
        .expect("post");
    pods.delete("p", &Default::default()).await.expect("delete");
    assert_eq!(requests(&o, "200", "GET", host), 1);
    assert_eq!(requests(&o, "200", "POST", host), 1);
    assert_eq!(requests(&o, "200", "DELETE", host), 1);
    assert_eq!(durations(&o, "GET", host), 1);
    assert_eq!(durations(&o, "POST", host), 1);
    assert_eq!(durations(&o, "DELETE", host), 1);
    let ua = user_agent("job-controller");
    for s in mock.seen() {
        assert_eq!(s.user_agent.as_deref(), Some(ua.as_str()), "{}", s.path);
    }
    // The families are in the registry under their upstream names.
    let text = o.metrics.render();
    for name in [
        "rest_client_requests_total",
        "rest_client_request_duration_seconds_bucket",
        "rest_client_rate_limiter_duration_seconds_bucket",
    ] {
        assert!(text.contains(name), "{name} missing");
    }
    assert!(text.contains(r#"le="0.005""#) && text.contains(r#"le="60""#));
}

#[test]
fn user_agent_looks_like_kcm() {
    let ua = user_agent("job-controller");
    assert!(
        ua.starts_with(&format!("kcm-rs/v{} (", env!("CARGO_PKG_VERSION"))),
        "{ua}"
    );
    assert!(ua.ends_with(") kcm-rs/job-controller"), "{ua}");
    assert!(ua.contains(&format!("({}/", std::env::consts::OS)), "{ua}");
    assert!(!user_agent("").ends_with('/'));
}

#[test]
fn host_label_is_authority_without_credentials() {
    let h = |s: &str| host_label(&s.parse::<Uri>().expect("uri"));
    assert_eq!(h("https://10.0.0.1:6443"), "10.0.0.1:6443");
    assert_eq!(
        h("https://kubernetes.default.svc"),
        "kubernetes.default.svc"
    );
    assert_eq!(h("https://user:pw@example.com:443/"), "example.com:443");
    assert_eq!(h("/relative"), "none");
}

#[test]
fn options_are_validated() {
    let bad_qps = [0.0, -1.0, f32::NAN, f32::INFINITY];
    for qps in bad_qps {
        let o = ClientOptions {
            qps,
            ..ClientOptions::default()
        };
        assert!(
            matches!(ClientStack::new(&o, "h"), Err(ClientError::InvalidQps(_))),
            "{qps}"
        );
    }
    let o = ClientOptions {
        burst: 0,
        ..ClientOptions::default()
    };
    assert!(matches!(
        ClientStack::new(&o, "h"),
        Err(ClientError::InvalidBurst)
    ));
    let o = ClientOptions::for_component("bad\ncomponent", &Default::default());
    assert!(matches!(
        ClientStack::new(&o, "h"),
        Err(ClientError::InvalidUserAgent(_))
    ));
    let o = ClientOptions::for_component("job-controller", &Default::default());
    assert_eq!((o.qps, o.burst), (DEFAULT_QPS, DEFAULT_BURST));
}

#[test]
fn build_client_needs_a_runtime() {
    let config = kube::Config::new("https://127.0.0.1:6443".parse().expect("uri"));
    let res = build_client(
        config,
        &ClientOptions::for_component("x", &Default::default()),
    );
    assert!(matches!(res, Err(ClientError::NoRuntime)));
}

#[tokio::test]
async fn build_client_from_config() {
    let config = kube::Config::new("http://127.0.0.1:1".parse().expect("uri"));
    let client = build_client(
        config,
        &ClientOptions::for_component("job-controller", &Default::default()),
    )
    .expect("client");
    assert_eq!(client.default_namespace(), "default");
}

fn fenced_opts(fence: Fence, timeout: Duration) -> ClientOptions {
    ClientOptions {
        request_timeout: timeout,
        fence,
        ..opts(100.0, 100)
    }
}

#[tokio::test(start_paused = true)]
async fn a_passed_fence_refuses_writes_before_they_are_sent() {
    let mock = Mock::new(&[code(200)]);
    let client = mock.client(&fenced_opts(Fence::closed(), REQUEST_TIMEOUT), "h");
    let api: Api<Pod> = Api::namespaced(client, "default");
    let err = api
        .create(&PostParams::default(), &pod())
        .await
        .expect_err("fenced");
    assert!(err.to_string().contains("leadership"), "{err}");
    assert!(api.delete("p", &Default::default()).await.is_err());
    assert!(mock.seen().is_empty(), "a fenced write reached the server");
    // Reads are never fenced.
    api.get("p").await.expect("get");
    assert_eq!(mock.seen().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn closing_the_fence_cancels_a_write_in_flight() {
    let mock = Mock::new(&[Reply::Stall]);
    let fence = Fence::closed();
    fence.extend_to(Instant::now() + Duration::from_secs(60));
    let client = mock.client(&fenced_opts(fence.clone(), REQUEST_TIMEOUT), "h");
    let api: Api<Pod> = Api::namespaced(client, "default");
    let write = tokio::spawn(async move { api.create(&PostParams::default(), &pod()).await });
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(mock.seen().len(), 1, "the write was sent");
    let began = Instant::now();
    fence.close();
    let err = write.await.expect("join").expect_err("cancelled");
    assert!(err.to_string().contains("leadership"), "{err}");
    assert!(began.elapsed() < Duration::from_secs(1));
}

#[tokio::test(start_paused = true)]
async fn a_write_ends_when_the_fence_passes_and_a_read_at_its_timeout() {
    let mock = Mock::new(&[Reply::Stall]);
    let fence = Fence::closed();
    fence.extend_to(Instant::now() + Duration::from_secs(3));
    let timeout = Duration::from_secs(7);
    let client = mock.client(&fenced_opts(fence, timeout), "h");
    let api: Api<Pod> = Api::namespaced(client, "default");
    let began = Instant::now();
    let err = api
        .create(&PostParams::default(), &pod())
        .await
        .expect_err("fenced");
    assert!(err.to_string().contains("leadership"), "{err}");
    assert_eq!(began.elapsed(), Duration::from_secs(3));
    let began = Instant::now();
    let err = api.get("p").await.expect_err("timed out");
    assert!(err.to_string().contains("timed out"), "{err}");
    // A GET is retried on dropped connections only, not on its own timeout.
    assert_eq!(began.elapsed(), timeout);
}
