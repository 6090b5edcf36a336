//! The informer's list+watch loop, in client-go's reflector's order, for
//! both encodings (`encoding.rs`):
//!
//! - **Streaming list** (KEP-3157 `WatchList`; what KCM's informers do from
//!   1.34 on): one watch with `sendInitialEvents=true`,
//!   `resourceVersionMatch=NotOlderThan` and bookmarks; the server sends
//!   the current state as `ADDED` events from its watch cache and ends it
//!   with a bookmark annotated `k8s.io/initial-events-end`. That bookmark
//!   replaces the store (deletes for what is gone) and marks the informer
//!   synced; the same stream then goes on as the watch. The server never
//!   builds one large list response.
//! - **Fallback** (client-go's, when the server refuses the streaming
//!   list, e.g. the `WatchList` gate is off; or a stream ends at once): a
//!   list in pages of 500 (the first from the watch cache at
//!   resourceVersion "0"), then a watch from the list's version.
//! - A watch that ends is resumed from the last version seen (bookmarks
//!   included), with a 290 s server timeout; after 410 Gone or an event
//!   that does not decode, a relist at least as new as that version, by
//!   the same path (streaming first); a version gone too: a consistent read.
//!
//! Errors back off exponentially (0.8 s to 30 s); a stream that delivers
//! events starts the back-off over, and a watch that ends at once without
//! any counts as an error (client-go's "very short watch").

use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BytesMut};
use http::{HeaderValue, Request, header};
use http_body_util::BodyExt;
use kube::api::{ListParams, VersionMatch, WatchParams};
use kube::client::Body;
use kube::runtime::watcher::Event as StoreEvent;
use tokio_util::sync::CancellationToken;

use super::encoding::{ApiStatus, DecodeError, Encoding, Event};
use super::{Informable, Informer, WatchGuard};

/// The server ends a watch after this long; the client gives up on a
/// silent one (no event, no bookmark) a little later.
const WATCH_TIMEOUT_SECS: u32 = 290;
const IDLE_MARGIN: Duration = Duration::from_secs(30);
/// Items per list page (kube's watcher and client-go's pager use 500).
const PAGE_SIZE: u32 = 500;
const BACKOFF_MIN: Duration = Duration::from_millis(800);
const BACKOFF_MAX: Duration = Duration::from_secs(30);

/// How an informer lists and watches.
#[derive(Clone, Debug, Default)]
pub struct ListWatch {
    /// Never ask for a streaming list: list, then watch (kcm-rs before
    /// streaming lists; the benchmark's "before").
    pub no_streaming: bool,
    pub label_selector: Option<String>,
    pub field_selector: Option<String>,
}

impl ListWatch {
    /// Streaming lists unless `KCM_RS_STREAMING_LIST=false` (a benchmark
    /// switch: the A/B of `docs/apiserver-cost.md`).
    pub fn from_env() -> Self {
        let off = std::env::var("KCM_RS_STREAMING_LIST").is_ok_and(|v| v == "false" || v == "0");
        ListWatch {
            no_streaming: off,
            ..ListWatch::default()
        }
    }
}

/// Why a list or watch ended.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WatchError {
    #[error("request: {0}")]
    Request(#[from] kube::Error),
    #[error("reading the body: {0}")]
    Body(String),
    #[error(transparent)]
    Decode(#[from] DecodeError),
    #[error("API server returned {code} {reason}: {message}")]
    Api {
        code: u16,
        reason: String,
        message: String,
    },
    #[error("no event for {0:?}: reconnecting")]
    Idle(Duration),
    #[error("the watch ended at once without an event")]
    VeryShort,
    #[error("the streaming list ended before its initial-events-end bookmark")]
    Unfinished,
}

impl WatchError {
    fn api(s: ApiStatus, code: u16) -> Self {
        WatchError::Api {
            code,
            reason: s.reason,
            message: s.message,
        }
    }

    /// 410 Gone / Expired: the resourceVersion left the watch cache.
    fn is_gone(&self) -> bool {
        matches!(self, WatchError::Api { code: 410, .. })
            || matches!(self, WatchError::Api { reason, .. } if reason == "Expired" || reason == "Gone")
    }

    /// A version newer than the server has seen (client-go's
    /// `isTooLargeResourceVersionError`: 504 with a cause, or its message).
    fn is_too_large_rv(&self) -> bool {
        matches!(self, WatchError::Api { message, .. }
            if message.contains("Too large resource version"))
    }

    /// Worth the same request again after a back-off (client-go's
    /// `isWatchErrorRetriable`: 429 and connection refused).
    fn is_retriable(&self) -> bool {
        match self {
            WatchError::Api { code, .. } => *code == 429,
            WatchError::Request(e) => refused(e),
            _ => false,
        }
    }

    /// The stream cannot be resumed past this point: an event that does
    /// not decode (skipping it would lose it) or a frame over the bound.
    fn needs_relist(&self) -> bool {
        matches!(self, WatchError::Decode(_))
    }
}

/// Whether a request failed on a refused connection.
fn refused(e: &kube::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::ConnectionRefused
        {
            return true;
        }
        source = s.source();
    }
    false
}

/// Where the next (streaming) list reads from (client-go's reflector).
#[derive(Debug, Clone, PartialEq, Eq)]
enum ListFrom {
    /// The first one: the watch cache at any version (a list at "0"); a
    /// streaming list asks for the latest state, as client-go's does.
    Start,
    /// At least as new as this version (a relist after 410 or a bad
    /// event: the newest version seen, from the cache).
    At(String),
    /// No resourceVersion: a consistent read (when `At` itself got 410).
    Latest,
}

impl ListFrom {
    fn watch_rv(&self) -> &str {
        match self {
            ListFrom::At(rv) => rv,
            ListFrom::Start | ListFrom::Latest => "",
        }
    }
}

/// What the loop does next.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    /// A streaming list, then a watch on the same stream.
    Stream(ListFrom),
    /// A list, then a watch.
    List(ListFrom),
    /// A watch resumed from this version.
    Watch(String),
}

/// How one step went.
struct Outcome {
    next: Step,
    error: Option<WatchError>,
    /// The step delivered events: the back-off starts over.
    progress: bool,
}

/// What the loop needs to send requests.
pub(crate) struct Source<K> {
    pub client: kube::Client,
    pub path: String,
    pub encoding: Encoding<K>,
    pub settings: ListWatch,
}

impl<K: Informable> Informer<K> {
    /// Runs the list+watch until `stop` is cancelled.
    pub(crate) async fn reflect(self: Arc<Self>, src: Source<K>, stop: CancellationToken) {
        let _alive = WatchGuard::new(&self.watch, &stop);
        let mut backoff = BACKOFF_MIN;
        let mut step = src.relist(ListFrom::Start);
        loop {
            let outcome = tokio::select! {
                _ = stop.cancelled() => return,
                o = self.step(&src, step) => o,
            };
            step = outcome.next;
            if outcome.progress {
                backoff = BACKOFF_MIN;
            }
            if let Some(e) = outcome.error {
                tracing::warn!(kind = %self.kind, next = ?step, "watch error (will retry with backoff): {e}");
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(BACKOFF_MAX);
            }
        }
    }

    async fn step(&self, src: &Source<K>, step: Step) -> Outcome {
        match step {
            Step::Stream(from) => self.stream(src, from).await,
            Step::List(from) => match self.list(src, &from).await {
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
                let http = watch_request(src, &from, false);
                let mut body = match send(src, http, true).await {
                    Ok(b) => b,
                    Err(e) => return self.after_watch(src, from, 0, Err(e)),
                };
                let started = tokio::time::Instant::now();
                let (last, events, result) = self.read(src, &mut body, from, None).await;
                let result = match result {
                    // client-go's "very short watch": a server or proxy
                    // closing at once must not make a tight loop.
                    Ok(()) if events == 0 && started.elapsed() < Duration::from_secs(1) => {
                        Err(WatchError::VeryShort)
                    }
                    other => other,
                };
                self.after_watch(src, last, events, result)
            }
        }
    }

    /// Where a watch goes after it ended with `result`.
    fn after_watch(
        &self,
        src: &Source<K>,
        last: String,
        events: usize,
        result: Result<(), WatchError>,
    ) -> Outcome {
        let next = match &result {
            // 410: the version left the watch cache; a bad event cannot be
            // skipped without losing it. Either way, relist from the newest
            // version seen.
            Err(e) if e.is_gone() || e.needs_relist() => src.relist(ListFrom::At(last)),
            _ => Step::Watch(last),
        };
        Outcome {
            next,
            error: result.err(),
            progress: events > 0,
        }
    }

    /// A streaming list: the initial events into a buffer, applied at the
    /// initial-events-end bookmark, then the same stream as a watch.
    async fn stream(&self, src: &Source<K>, from: ListFrom) -> Outcome {
        let http = watch_request(src, from.watch_rv(), true);
        let refused = |e: WatchError| {
            let next = if e.is_retriable() {
                Step::Stream(from.clone())
            } else if e.is_gone() || e.is_too_large_rv() {
                Step::Stream(ListFrom::Latest)
            } else {
                // client-go falls back to a list for anything else: the
                // server may not serve streaming lists (the `WatchList`
                // gate off answers 422), or it answered at once with
                // nothing.
                tracing::info!(kind = %self.kind, "streaming list refused, listing instead: {e}");
                Step::List(from.clone())
            };
            Outcome {
                next,
                error: Some(e),
                progress: false,
            }
        };
        let mut body = match send(src, http, true).await {
            Ok(b) => b,
            Err(e) => return refused(e),
        };
        let mut initial = Some(Vec::new());
        let (last, events, result) = self
            .read(src, &mut body, String::new(), Some(&mut initial))
            .await;
        if initial.is_none() {
            // Synced: what follows is the watch's.
            return self.after_watch(src, last, events, result);
        }
        match result {
            Err(e) if matches!(e, WatchError::Api { .. }) => refused(e),
            Ok(()) if events == 0 => refused(WatchError::VeryShort),
            // Cut, idle or undecodable before the end: the buffer is
            // dropped and the streaming list asked for again (client-go).
            Err(e) => Outcome {
                next: Step::Stream(from),
                error: Some(e),
                progress: events > 0,
            },
            Ok(()) => Outcome {
                next: Step::Stream(from),
                error: Some(WatchError::Unfinished),
                progress: true,
            },
        }
    }

    /// Lists every object (all pages) and replaces the store with them;
    /// returns the list's resourceVersion.
    async fn list(&self, src: &Source<K>, from: &ListFrom) -> Result<String, WatchError> {
        let req = kube::core::Request::new(&src.path);
        let mut objs = Vec::new();
        let mut cont: Option<String> = None;
        loop {
            let http = list_request(&req, &src.settings, from, cont.as_deref())?;
            let body = send(src, Ok(http), false).await?;
            let bytes = collect(body).await?;
            let page = src.encoding.page(&bytes)?;
            objs.extend(page.items);
            if page.continue_token.is_empty() {
                // The last page's version starts the watch; without one it
                // would start from "now" and miss what came between.
                if page.resource_version.is_empty() {
                    return Err(DecodeError::NoListVersion.into());
                }
                self.replace(objs);
                return Ok(page.resource_version);
            }
            cont = Some(page.continue_token);
        }
    }

    /// Replaces the store with `objs` (a relist: deletes for what is gone)
    /// and marks the informer synced.
    fn replace(&self, objs: Vec<K>) {
        let mut relist = None;
        self.apply(StoreEvent::Init, &mut relist);
        for obj in objs {
            self.apply(StoreEvent::InitApply(obj), &mut relist);
        }
        self.apply(StoreEvent::InitDone, &mut relist);
    }

    /// Reads watch events until the stream ends. While `initial` holds a
    /// buffer (a streaming list's initial events), objects go there, and
    /// the initial-events-end bookmark applies them and takes it. Returns
    /// the last resourceVersion seen (a retry resumes there), how many
    /// events (bookmarks included) arrived, and how the stream ended.
    async fn read(
        &self,
        src: &Source<K>,
        body: &mut Body,
        from: String,
        mut initial: Option<&mut Option<Vec<K>>>,
    ) -> (String, usize, Result<(), WatchError>) {
        let mut last = from;
        let mut events = 0;
        let idle = Duration::from_secs(u64::from(WATCH_TIMEOUT_SECS)) + IDLE_MARGIN;
        let mut buf = BytesMut::new();
        let mut scanned = 0;
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
                let (payload, used) = match src.encoding.next_frame(&buf, &mut scanned) {
                    Ok(Some(frame)) => frame,
                    Ok(None) => break,
                    Err(e) => return (last, events, Err(e.into())),
                };
                let event = match src.encoding.event(payload) {
                    Ok(Some(ev)) => ev,
                    Ok(None) => {
                        buf.advance(used);
                        continue;
                    }
                    Err(e) => return (last, events, Err(e.into())),
                };
                buf.advance(used);
                events += 1;
                let buffer = initial.as_deref_mut().and_then(Option::as_mut);
                match self.watch_event(event, buffer) {
                    Ok((rv, end)) => {
                        if let Some(rv) = rv.filter(|rv| !rv.is_empty()) {
                            last = rv;
                        }
                        if end && let Some(slot) = initial.as_deref_mut() {
                            self.replace(slot.take().unwrap_or_default());
                        }
                    }
                    Err(e) => return (last, events, Err(e)),
                }
            }
        }
    }

    /// Applies one event (or buffers it, during a streaming list's initial
    /// events); returns the resourceVersion it carried and whether it ends
    /// the initial events.
    fn watch_event(
        &self,
        event: Event<K>,
        initial: Option<&mut Vec<K>>,
    ) -> Result<(Option<String>, bool), WatchError> {
        match event {
            Event::Apply(obj) => {
                let rv = obj.resource_version().to_string();
                match initial {
                    Some(buf) => buf.push(obj),
                    None => self.apply(StoreEvent::Apply(obj), &mut None),
                }
                Ok((Some(rv), false))
            }
            Event::Delete(obj) => {
                let rv = obj.resource_version().to_string();
                match initial {
                    // The server sends none among initial events (kube's
                    // watcher skips one too): the end replaces the store.
                    Some(_) => tracing::debug!(kind = %self.kind, "delete among initial events"),
                    None => self.apply(StoreEvent::Delete(obj), &mut None),
                }
                Ok((Some(rv), false))
            }
            Event::Bookmark {
                resource_version,
                initial_events_end,
            } => Ok((
                Some(resource_version),
                initial_events_end && initial.is_some(),
            )),
            Event::Error(s) => {
                let code = u16::try_from(s.code).unwrap_or(500);
                Err(WatchError::api(s, code))
            }
        }
    }
}

impl<K: Informable> Source<K> {
    /// How a relist from `from` starts: streaming unless switched off.
    fn relist(&self, from: ListFrom) -> Step {
        if self.settings.no_streaming {
            Step::List(from)
        } else {
            Step::Stream(from)
        }
    }
}

/// A watch from `rv` (a streaming list when `initial`: the state at least
/// as new as `rv`, "" for the latest, as initial events).
fn watch_request(
    src: &Source<impl Informable>,
    rv: &str,
    initial: bool,
) -> kube::Result<Request<Vec<u8>>> {
    let mut wp = WatchParams::default().timeout(WATCH_TIMEOUT_SECS);
    wp.label_selector = src.settings.label_selector.clone();
    wp.field_selector = src.settings.field_selector.clone();
    // kube adds resourceVersionMatch=NotOlderThan with it; bookmarks are
    // on by default (and required).
    wp.send_initial_events = initial;
    kube::core::Request::new(&src.path)
        .watch(&wp, rv)
        .map_err(kube::Error::BuildRequest)
}

/// A list page as client-go's reflector asks for it, 500 items each: the
/// first from where `from` says, the next by continue token. (kube's
/// `ListParams` drops resourceVersion "0" when a limit is set, so that
/// one is added by hand.)
fn list_request(
    req: &kube::core::Request,
    settings: &ListWatch,
    from: &ListFrom,
    cont: Option<&str>,
) -> Result<Request<Vec<u8>>, WatchError> {
    let mut lp = ListParams::default().limit(PAGE_SIZE);
    lp.label_selector = settings.label_selector.clone();
    lp.field_selector = settings.field_selector.clone();
    let built = match (cont, from) {
        (Some(token), _) => req.list(&lp.continue_token(token)),
        (None, ListFrom::Start) => {
            let mut any = ListParams::default().match_any();
            any.label_selector = lp.label_selector.clone();
            any.field_selector = lp.field_selector.clone();
            req.list(&any).map(|mut r| {
                let uri = format!("{}&limit={PAGE_SIZE}", r.uri());
                if let Ok(uri) = uri.parse() {
                    *r.uri_mut() = uri;
                }
                r
            })
        }
        (None, ListFrom::At(rv)) => req.list(&lp.at(rv).matching(VersionMatch::NotOlderThan)),
        (None, ListFrom::Latest) => req.list(&lp),
    };
    built.map_err(|e| WatchError::Request(kube::Error::BuildRequest(e)))
}

/// Sends a request in the source's encoding; returns the body of a 2xx
/// answer in that encoding, or the server's Status as an error.
async fn send(
    src: &Source<impl Informable>,
    req: kube::Result<Request<Vec<u8>>>,
    watch: bool,
) -> Result<Body, WatchError> {
    let mut req = req?.map(Body::from);
    let headers = req.headers_mut();
    headers.insert(
        header::ACCEPT,
        HeaderValue::from_static(src.encoding.media_type()),
    );
    if watch {
        // 1.37 gzips watch streams one member per event when asked; kube's
        // decompression does not read that, and we do not ask.
        headers.insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_static("identity"),
        );
    }
    let res = src.client.send(req).await?;
    let status = res.status();
    if status.is_success() {
        src.encoding.check_content_type(res.headers())?;
        return Ok(res.into_body());
    }
    let bytes = collect(res.into_body()).await.unwrap_or_default();
    Err(match src.encoding.status(&bytes) {
        Some(s) => WatchError::api(s, status.as_u16()),
        None => WatchError::Api {
            code: status.as_u16(),
            reason: String::new(),
            message: String::from_utf8_lossy(&bytes).chars().take(200).collect(),
        },
    })
}

async fn collect(body: Body) -> Result<bytes::Bytes, WatchError> {
    body.collect()
        .await
        .map(|c| c.to_bytes())
        .map_err(|e| WatchError::Body(e.to_string()))
}

#[cfg(test)]
mod proto_tests;
#[cfg(test)]
mod tests;
