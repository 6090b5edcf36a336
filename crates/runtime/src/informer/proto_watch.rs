//! The informer's list+watch in protobuf (`--kube-api-content-type`
//! `application/vnd.kubernetes.protobuf`), for kinds with a protobuf
//! decoder ([`Informable::DECODE_PROTO`]). kube's watcher decodes JSON
//! only, so this is its own loop, in client-go's reflector's order: a list
//! (pages of 500; the first from the watch cache at resourceVersion "0")
//! delivered as `Init`/`InitApply`/`InitDone`; a watch from the list's
//! version with bookmarks and a 290 s server timeout, resumed from the
//! last version seen when it ends; after 410 Gone or an event that does
//! not decode, a relist at least as new as that version (a consistent
//! read if it is gone too). Errors back off exponentially (0.8 s to 30 s);
//! a watch that delivers events starts the back-off over, and one that
//! ends at once without any counts as an error.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BytesMut};
use http::{HeaderValue, Request, header};
use http_body_util::BodyExt;
use kcm_proto::{ListBody, ProtoError, Status, WatchEvent, WatchEventType, next_frame};
use kube::api::{ListParams, VersionMatch, WatchParams};
use kube::client::Body;
use kube::runtime::watcher::Event;
use tokio_util::sync::CancellationToken;

use super::{Informable, Informer, WatchGuard};

/// The protobuf media type.
pub const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

/// The server ends a watch after this long; the client gives up on a
/// silent one (no event, no bookmark) a little later.
const WATCH_TIMEOUT_SECS: u32 = 290;
const IDLE_MARGIN: Duration = Duration::from_secs(30);
/// Items per list page (kube's watcher and client-go's pager use 500).
const PAGE_SIZE: u32 = 500;
const BACKOFF_MIN: Duration = Duration::from_millis(800);
const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// Upstream's streaming decoder refuses larger frames (`ErrObjectTooLarge`).
const MAX_FRAME: usize = 16 << 20;

/// Decodes one object message of the kind.
pub type ProtoDecoder<K> = fn(&[u8]) -> Result<K, ProtoError>;

/// Why a list or watch ended.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WatchError {
    #[error("request: {0}")]
    Request(#[from] kube::Error),
    #[error("reading the body: {0}")]
    Body(String),
    #[error("decoding protobuf: {0}")]
    Decode(#[from] ProtoError),
    #[error("API server returned {code} {reason}: {message}")]
    Api {
        code: u16,
        reason: String,
        message: String,
    },
    #[error("API server answered in {0:?}, not protobuf")]
    NotProtobuf(String),
    #[error("no event for {0:?}: reconnecting")]
    Idle(Duration),
    #[error("the watch ended at once without an event")]
    VeryShort,
    #[error("watch frame of {0} bytes exceeds the 16 MiB limit")]
    FrameTooLarge(usize),
}

impl WatchError {
    /// 410 Gone: the resourceVersion left the watch cache; relist.
    fn is_gone(&self) -> bool {
        matches!(self, WatchError::Api { code: 410, .. })
    }

    /// The stream cannot be resumed past this point: an event that does
    /// not decode (skipping it would lose it) or a corrupt frame.
    fn needs_relist(&self) -> bool {
        matches!(self, WatchError::Decode(_) | WatchError::FrameTooLarge(_))
    }
}

/// Where the next list reads from (client-go's reflector's order).
#[derive(Debug, Clone, PartialEq, Eq)]
enum ListFrom {
    /// resourceVersion "0": the watch cache, any version (the first list).
    Cache,
    /// At least as new as this version (a relist after 410 or a bad
    /// event: the newest version seen, from the cache).
    At(String),
    /// No resourceVersion: a consistent read (when `At` itself got 410).
    Latest,
}

/// What the loop does next.
enum Step {
    List(ListFrom),
    Watch(String),
}

/// How one list or watch went.
struct Outcome {
    next: Step,
    error: Option<WatchError>,
    /// A watch delivered at least one event: the back-off starts over.
    progress: bool,
}

impl<K: Informable> Informer<K> {
    /// Runs the protobuf list+watch until `stop` is cancelled.
    pub async fn run_proto(
        self: Arc<Self>,
        client: kube::Client,
        decode: ProtoDecoder<K>,
        stop: CancellationToken,
    ) {
        let _alive = WatchGuard::new(&self.watch, &stop);
        let path = <K::Wire as kube::Resource>::url_path(&(), None);
        let mut backoff = BACKOFF_MIN;
        let mut step = Step::List(ListFrom::Cache);
        loop {
            let current = std::mem::replace(&mut step, Step::List(ListFrom::Cache));
            let outcome = tokio::select! {
                _ = stop.cancelled() => return,
                o = self.step(&client, &path, decode, current) => o,
            };
            step = outcome.next;
            if outcome.progress {
                backoff = BACKOFF_MIN;
            }
            if let Some(e) = outcome.error {
                tracing::warn!(kind = %self.kind, "watch error (will retry with backoff): {e}");
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(BACKOFF_MAX);
            }
        }
    }

    async fn step(
        &self,
        client: &kube::Client,
        path: &str,
        decode: ProtoDecoder<K>,
        step: Step,
    ) -> Outcome {
        match step {
            Step::List(from) => match self.list(client, path, decode, &from).await {
                Ok(rv) => Outcome {
                    next: Step::Watch(rv),
                    error: None,
                    progress: false,
                },
                Err(e) => {
                    // The version asked for is gone too: read the latest.
                    let from = if e.is_gone() { ListFrom::Latest } else { from };
                    Outcome {
                        next: Step::List(from),
                        error: Some(e),
                        progress: false,
                    }
                }
            },
            Step::Watch(from) => {
                let started = tokio::time::Instant::now();
                let (last, events, result) = self.watch(client, path, decode, from).await;
                let result = match result {
                    // client-go's "very short watch": a server or proxy
                    // closing at once must not make a tight loop.
                    Ok(()) if events == 0 && started.elapsed() < Duration::from_secs(1) => {
                        Err(WatchError::VeryShort)
                    }
                    other => other,
                };
                let next = match &result {
                    // 410: the version left the watch cache; a bad event
                    // cannot be skipped without losing it. Either way,
                    // relist from the newest version seen.
                    Err(e) if e.is_gone() || e.needs_relist() => Step::List(ListFrom::At(last)),
                    _ => Step::Watch(last),
                };
                Outcome {
                    next,
                    error: result.err(),
                    progress: events > 0,
                }
            }
        }
    }

    /// Lists every object (all pages) and replaces the store with them;
    /// returns the list's resourceVersion.
    async fn list(
        &self,
        client: &kube::Client,
        path: &str,
        decode: ProtoDecoder<K>,
        from: &ListFrom,
    ) -> Result<String, WatchError> {
        let req = kube::core::Request::new(path);
        let mut objs = Vec::new();
        let mut cont: Option<String> = None;
        loop {
            let http = list_request(&req, from, cont.as_deref())?;
            let body = send(client, http, false).await?;
            let bytes = collect(body).await?;
            let list = ListBody::parse(kcm_proto::unwrap_envelope(&bytes)?)?;
            for item in &list.items {
                objs.push(decode(item)?);
            }
            if list.continue_token.is_empty() {
                // The last page's version starts the watch; without one it
                // would start from "now" and miss what came between.
                if list.resource_version.is_empty() {
                    return Err(ProtoError::Missing("list resourceVersion").into());
                }
                let mut relist = None;
                self.apply(Event::Init, &mut relist);
                for obj in objs {
                    self.apply(Event::InitApply(obj), &mut relist);
                }
                self.apply(Event::InitDone, &mut relist);
                return Ok(list.resource_version);
            }
            cont = Some(list.continue_token);
        }
    }

    /// Watches from `from` until the stream ends. Returns the last
    /// resourceVersion seen (a retry resumes there), how many events
    /// (bookmarks included) arrived, and how the watch ended.
    async fn watch(
        &self,
        client: &kube::Client,
        path: &str,
        decode: ProtoDecoder<K>,
        from: String,
    ) -> (String, usize, Result<(), WatchError>) {
        let mut last = from;
        let mut events = 0;
        // kube's default asks for bookmarks.
        let wp = WatchParams::default().timeout(WATCH_TIMEOUT_SECS);
        let http = match kube::core::Request::new(path).watch(&wp, &last) {
            Ok(r) => r,
            Err(e) => return (last, 0, Err(kube::Error::BuildRequest(e).into())),
        };
        let mut body = match send(client, http, true).await {
            Ok(b) => b,
            Err(e) => return (last, 0, Err(e)),
        };
        let idle = Duration::from_secs(u64::from(WATCH_TIMEOUT_SECS)) + IDLE_MARGIN;
        let mut buf = BytesMut::new();
        loop {
            let frame = match tokio::time::timeout(idle, body.frame()).await {
                Err(_) => return (last, events, Err(WatchError::Idle(idle))),
                // The server closed the watch (its timeout): resume. A
                // frame cut short is read again from `last`.
                Ok(None) => return (last, events, Ok(())),
                Ok(Some(Err(e))) => {
                    return (last, events, Err(WatchError::Body(e.to_string())));
                }
                Ok(Some(Ok(frame))) => frame,
            };
            let Ok(data) = frame.into_data() else {
                continue;
            };
            buf.extend_from_slice(&data);
            loop {
                let (payload, used) = match next_frame(&buf, MAX_FRAME) {
                    Ok(Some(frame)) => frame,
                    Ok(None) => break,
                    Err(ProtoError::FrameTooLarge(len)) => {
                        return (last, events, Err(WatchError::FrameTooLarge(len)));
                    }
                    Err(e) => return (last, events, Err(e.into())),
                };
                events += 1;
                match self.watch_event(payload, decode) {
                    Ok(Some(rv)) => last = rv,
                    Ok(None) => {}
                    Err(e) => return (last, events, Err(e)),
                }
                buf.advance(used);
            }
        }
    }

    /// Applies one watch frame; returns the resourceVersion it carried.
    fn watch_event(
        &self,
        payload: &[u8],
        decode: ProtoDecoder<K>,
    ) -> Result<Option<String>, WatchError> {
        let ev = WatchEvent::parse(payload)?;
        let event = match ev.type_ {
            WatchEventType::Added | WatchEventType::Modified => Event::Apply(decode(ev.object)?),
            WatchEventType::Deleted => Event::Delete(decode(ev.object)?),
            // A bookmark is an object with only its resourceVersion set.
            WatchEventType::Bookmark => {
                let rv = decode(ev.object)?.resource_version().to_string();
                return Ok(Some(rv).filter(|rv| !rv.is_empty()));
            }
            WatchEventType::Error => return Err(status_error(Status::parse(ev.object)?)),
        };
        let rv = match &event {
            Event::Apply(o) | Event::Delete(o) => o.resource_version().to_string(),
            _ => String::new(),
        };
        self.apply(event, &mut None);
        Ok(Some(rv).filter(|rv| !rv.is_empty()))
    }
}

/// A list page as client-go's reflector asks for it, 500 items each: the
/// first from where `from` says, the next by continue token. (kube's
/// `ListParams` drops resourceVersion "0" when a limit is set, so that
/// one is added by hand.)
fn list_request(
    req: &kube::core::Request,
    from: &ListFrom,
    cont: Option<&str>,
) -> Result<Request<Vec<u8>>, WatchError> {
    let lp = ListParams::default().limit(PAGE_SIZE);
    let built = match (cont, from) {
        (Some(token), _) => req.list(&lp.continue_token(token)),
        (None, ListFrom::Cache) => req.list(&ListParams::default().match_any()).map(|mut r| {
            let uri = format!("{}&limit={PAGE_SIZE}", r.uri());
            if let Ok(uri) = uri.parse() {
                *r.uri_mut() = uri;
            }
            r
        }),
        (None, ListFrom::At(rv)) => req.list(&lp.at(rv).matching(VersionMatch::NotOlderThan)),
        (None, ListFrom::Latest) => req.list(&lp),
    };
    built.map_err(|e| WatchError::Request(kube::Error::BuildRequest(e)))
}

fn status_error(s: Status) -> WatchError {
    WatchError::Api {
        code: u16::try_from(s.code).unwrap_or(500),
        reason: s.reason,
        message: s.message,
    }
}

/// Sends a request asking for protobuf; returns the body of a 2xx
/// protobuf response, or the server's Status as an error.
async fn send(
    client: &kube::Client,
    req: Request<Vec<u8>>,
    watch: bool,
) -> Result<Body, WatchError> {
    let mut req = req.map(Body::from);
    let headers = req.headers_mut();
    headers.insert(header::ACCEPT, HeaderValue::from_static(PROTOBUF));
    if watch {
        // One gzip member per event is not decoded by kube's decompression
        // layer (see kube's `request_events`); lists may be compressed.
        headers.insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_static("identity"),
        );
    }
    let res = client.send(req).await?;
    let status = res.status();
    let content_type = content_type(res.headers()).to_string();
    let body = res.into_body();
    if status.is_success() {
        if !content_type.starts_with(PROTOBUF) {
            return Err(WatchError::NotProtobuf(content_type));
        }
        return Ok(body);
    }
    let bytes = collect(body).await.unwrap_or_default();
    let parsed = kcm_proto::unwrap_envelope(&bytes)
        .ok()
        .and_then(|m| Status::parse(m).ok());
    Err(match parsed {
        Some(s) => WatchError::Api {
            code: status.as_u16(),
            reason: s.reason,
            message: s.message,
        },
        None => WatchError::Api {
            code: status.as_u16(),
            reason: String::new(),
            message: String::from_utf8_lossy(&bytes).chars().take(200).collect(),
        },
    })
}

/// A response's `Content-Type` ("" when absent or not text).
pub fn content_type(headers: &http::HeaderMap) -> &str {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

async fn collect(body: Body) -> Result<bytes::Bytes, WatchError> {
    body.collect()
        .await
        .map(|c| c.to_bytes())
        .map_err(|e| WatchError::Body(e.to_string()))
}

#[cfg(test)]
mod tests;
