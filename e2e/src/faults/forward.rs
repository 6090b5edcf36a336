//! Serving one client connection: each request recorded, faulted or
//! forwarded, its answer streamed back.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Request, Response, StatusCode, Uri};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpStream;

use super::plan::{self, Fault, Injection, When};
use super::{Inner, Record};

pub(super) type Upstream = Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;
type Out = UnsyncBoxBody<Bytes, std::io::Error>;

pub(super) fn upstream_client(c: hyper_rustls::HttpsConnector<HttpConnector>) -> Upstream {
    Client::builder(TokioExecutor::new()).build(c)
}

/// Serves HTTP/1.1 on `tcp` until the client closes it (or a cut aborts
/// this task, dropping everything in flight).
pub(super) async fn serve(inner: Arc<Inner>, tcp: TcpStream, id: u64) {
    let _ = tcp.set_nodelay(true);
    let svc = hyper::service::service_fn({
        let inner = Arc::clone(&inner);
        move |req| handle(Arc::clone(&inner), req)
    });
    let _ = hyper::server::conn::http1::Builder::new()
        // Idle keep-alive connections stay open as long as the client wants.
        .header_read_timeout(None)
        .serve_connection(TokioIo::new(tcp), svc)
        .await;
    inner.conns.lock().remove(&id);
}

/// Ends the record when the exchange ends, however it ends.
struct Guard {
    inner: Arc<Inner>,
    id: usize,
    done: bool,
}

impl Guard {
    fn finish(&mut self, completed: bool) {
        if !self.done {
            self.done = true;
            self.inner.update(self.id, |r| {
                r.end = Some(SystemTime::now());
                r.completed = completed;
            });
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.finish(false);
    }
}

const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
];

fn strip_hop_by_hop(h: &mut HeaderMap) {
    for name in HOP_BY_HOP {
        h.remove(name);
    }
    h.remove(header::UPGRADE);
}

fn fixed(status: u16, headers: &[(&'static str, &str)], body: impl Into<Bytes>) -> Response<Out> {
    let body = body.into();
    let mut r = Response::new(Full::new(body).map_err(|e| match e {}).boxed_unsync());
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    for (k, v) in headers {
        if let Ok(v) = HeaderValue::from_str(v) {
            h.insert(*k, v);
        }
    }
    r
}

/// The error answer of `fault` to a request for `path`.
fn fault_response(fault: Fault, path: &str) -> Response<Out> {
    let body = plan::fault_status(fault, path).to_string();
    let code = fault.code().unwrap_or(500);
    if fault == Fault::TooManyRequests {
        fixed(code, &[("retry-after", "1")], body)
    } else {
        fixed(code, &[], body)
    }
}

/// The annotation of the bookmark that ends a streaming list's initial
/// events.
const INITIAL_EVENTS_END: &[u8] = b"k8s.io/initial-events-end";

/// Streams `body` to the client; with `cut_at`, drops the stream then;
/// with `cut_initial`, drops it just before the line of the bookmark that
/// ends a streaming list's initial events (the lines before it forwarded).
fn stream(
    body: Incoming,
    guard: Guard,
    cut_at: Option<tokio::time::Instant>,
    cut_initial: bool,
) -> Out {
    struct State {
        body: Incoming,
        guard: Guard,
        cut_at: Option<tokio::time::Instant>,
        cut_initial: bool,
        /// The end of the last whole line seen (a bookmark line may span
        /// chunks): bytes held back from the client until their line ends.
        held: Vec<u8>,
        cut: bool,
    }
    let first = Some(State {
        body,
        guard,
        cut_at,
        cut_initial,
        held: Vec::new(),
        cut: false,
    });
    let s = futures::stream::unfold(first, |st| async move {
        let mut st = st?;
        if st.cut {
            st.guard.finish(false);
            let e =
                std::io::Error::other("watch stream cut in its initial events by the fault proxy");
            return Some((Err(e), None));
        }
        let next = match st.cut_at {
            Some(at) => match tokio::time::timeout_at(at, st.body.frame()).await {
                Ok(next) => next,
                Err(_) => {
                    st.guard.finish(false);
                    let e = std::io::Error::other("watch stream cut by the fault proxy");
                    return Some((Err(e), None));
                }
            },
            None => st.body.frame().await,
        };
        if let Some(Ok(frame)) = &next
            && let Some(data) = frame.data_ref()
        {
            let n = data.len() as u64;
            st.guard.inner.update(st.guard.id, |r| {
                r.frames += 1;
                r.bytes += n;
            });
        }
        match next {
            None => {
                st.guard.finish(true);
                None
            }
            Some(Ok(frame)) if st.cut_initial => {
                let Ok(data) = frame.into_data() else {
                    return Some((Ok(hyper::body::Frame::data(Bytes::new())), Some(st)));
                };
                st.held.extend_from_slice(&data);
                // Forward whole lines only; stop before the marked one.
                let marked = find(&st.held, INITIAL_EVENTS_END);
                let upto = match marked {
                    Some(at) => st.held[..at]
                        .iter()
                        .rposition(|&b| b == b'\n')
                        .map_or(0, |i| i + 1),
                    None => st
                        .held
                        .iter()
                        .rposition(|&b| b == b'\n')
                        .map_or(0, |i| i + 1),
                };
                let out: Vec<u8> = st.held.drain(..upto).collect();
                st.cut = marked.is_some();
                Some((Ok(hyper::body::Frame::data(Bytes::from(out))), Some(st)))
            }
            Some(Ok(frame)) => Some((Ok(frame), Some(st))),
            Some(Err(e)) => {
                st.guard.finish(false);
                Some((Err(std::io::Error::other(e)), None))
            }
        }
    });
    StreamBody::new(s).boxed_unsync()
}

/// Forwards `up` after `hold` from a task of its own, so the request lands
/// even if its client is gone by then (killed, or gave up). The answer is
/// read whole, and a created object's name recorded ([`Record::created`]):
/// a checker must know which objects no live client asked for.
async fn forward_later(
    inner: Arc<Inner>,
    id: usize,
    up: Request<Full<Bytes>>,
    hold: std::time::Duration,
) -> Result<Response<Out>, String> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        tokio::time::sleep(hold).await;
        inner.update(id, |r| r.forwarded = Some(SystemTime::now()));
        let answer = match inner.client.request(up).await {
            Ok(r) => {
                let (head, body) = r.into_parts();
                match body.collect().await {
                    Ok(b) => Ok((head, b.to_bytes())),
                    Err(e) => Err(e.to_string()),
                }
            }
            Err(e) => Err(e.to_string()),
        };
        // Recorded here: the client may be gone, and `handle` with it.
        if let Ok((head, body)) = &answer {
            let status = head.status.as_u16();
            let created = (status == 201)
                .then(|| serde_json::from_slice::<serde_json::Value>(body).ok())
                .flatten()
                .and_then(|v| v["metadata"]["name"].as_str().map(str::to_string));
            inner.update(id, |rec| {
                rec.status = Some(status);
                rec.created = created;
            });
        }
        let _ = tx.send(answer);
    });
    let (mut head, body) = rx
        .await
        .unwrap_or_else(|_| Err("the delayed request's task ended".into()))?;
    strip_hop_by_hop(&mut head.headers);
    head.headers.remove(header::CONTENT_LENGTH);
    let body = Full::new(body)
        .map_err(|never| match never {})
        .boxed_unsync();
    Ok(Response::from_parts(head, body))
}

async fn handle(inner: Arc<Inner>, req: Request<Incoming>) -> Result<Response<Out>, Infallible> {
    let (mut parts, body) = req.into_parts();
    let path = parts
        .uri
        .path_and_query()
        .map_or_else(|| "/".to_string(), |p| p.as_str().to_string());
    let watch = plan::is_watch(parts.uri.query());
    let injection = inner
        .gone_once(&path)
        .or_else(|| inner.scripted(&parts.method, &path))
        .or_else(|| inner.planner.lock().decide(&parts.method, watch));
    let header_of = |name| {
        parts
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string()
    };
    let (user_agent, accept) = (header_of(header::USER_AGENT), header_of(header::ACCEPT));
    let id = {
        let mut records = inner.records.lock();
        let id = records.len();
        records.push(Record {
            id,
            start: SystemTime::now(),
            forwarded: None,
            end: None,
            method: parts.method.to_string(),
            path: path.clone(),
            user_agent,
            accept,
            watch,
            status: None,
            sent: None,
            fault: injection.map(|i| i.fault),
            after: injection.is_some_and(|i| i.when == When::After),
            completed: false,
            upstream_error: None,
            created: None,
            frames: 0,
            bytes: 0,
        });
        id
    };
    let mut guard = Guard {
        inner: Arc::clone(&inner),
        id,
        done: false,
    };
    let Ok(body) = body.collect().await.map(|b| b.to_bytes()) else {
        // The client went away mid-body; the guard ends the record.
        return Ok(fixed(400, &[], "{}"));
    };
    let sent = |r: Response<Out>| {
        inner.update(id, |rec| rec.sent = Some(r.status().as_u16()));
        r
    };
    match injection {
        Some(Injection {
            fault: Fault::WatchGone,
            ..
        }) => {
            guard.finish(true);
            return Ok(sent(fixed(200, &[], plan::gone_event())));
        }
        Some(Injection {
            fault,
            when: When::Before,
            ..
        }) if fault.code().is_some() => {
            guard.finish(true);
            return Ok(sent(fault_response(fault, &path)));
        }
        _ => {}
    }
    strip_hop_by_hop(&mut parts.headers);
    parts.headers.remove(header::HOST);
    parts.uri = match format!("{}{path}", inner.upstream).parse::<Uri>() {
        Ok(u) => u,
        Err(e) => {
            guard.finish(true);
            let s = plan::status(400, "BadRequest", &format!("fault proxy: {e}"), None);
            return Ok(sent(fixed(400, &[], s.to_string())));
        }
    };
    let up = Request::from_parts(parts, Full::new(body));
    let sending = match injection {
        Some(Injection {
            fault: Fault::Delay,
            hold,
            ..
        }) => {
            return Ok(
                match forward_later(Arc::clone(&inner), id, up, hold).await {
                    Ok(r) => {
                        guard.finish(true);
                        sent(r)
                    }
                    Err(e) => {
                        let msg = format!("fault proxy: the API server did not answer: {e}");
                        inner.update(id, |r| r.upstream_error = Some(msg.clone()));
                        guard.finish(true);
                        let s = plan::status(503, "ServiceUnavailable", &msg, None);
                        sent(fixed(503, &[], s.to_string()))
                    }
                },
            );
        }
        _ => {
            inner.update(id, |r| r.forwarded = Some(SystemTime::now()));
            inner.client.request(up).await.map_err(|e| e.to_string())
        }
    };
    let resp = match sending {
        Ok(r) => r,
        Err(e) => {
            let msg = format!("fault proxy: the API server did not answer: {e}");
            inner.update(id, |r| r.upstream_error = Some(msg.clone()));
            guard.finish(true);
            let s = plan::status(503, "ServiceUnavailable", &msg, None);
            return Ok(sent(fixed(503, &[], s.to_string())));
        }
    };
    let status = resp.status().as_u16();
    inner.update(id, |r| r.status = Some(status));
    let (mut head, upstream_body) = resp.into_parts();
    match injection {
        Some(Injection {
            fault,
            when: When::After,
            ..
        }) => {
            // The write is applied; read its answer, send the fault's.
            let _ = upstream_body.collect().await;
            guard.finish(true);
            return Ok(sent(fault_response(fault, &path)));
        }
        Some(Injection {
            fault: Fault::Stall,
            ..
        }) => {
            let stall = *inner.stall.lock();
            tokio::time::sleep(stall).await;
        }
        _ => {}
    }
    let cut_at = match injection {
        Some(Injection {
            fault: Fault::WatchCut,
            cut_after,
            ..
        }) => Some(tokio::time::Instant::now() + cut_after),
        _ => None,
    };
    let cut_initial = injection.is_some_and(|i| i.fault == Fault::WatchCutInitial);
    strip_hop_by_hop(&mut head.headers);
    Ok(sent(Response::from_parts(
        head,
        stream(upstream_body, guard, cut_at, cut_initial),
    )))
}

/// Where `needle` first occurs in `hay`.
fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}
