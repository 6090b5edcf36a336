//! The encodings the informer's list+watch reads: JSON (the default) and
//! protobuf (`--kube-api-content-type`, kinds with a protobuf decoder).
//! Each turns a list page into objects and a watch stream into bounded
//! frames and events; the loop in `reflector.rs` does the rest.
//!
//! Frames are bounded by [`MAX_FRAME`] in both encodings, so a huge object
//! (a tenant's, or a broken server's) cannot make the reader buffer
//! without bound: the API server accepts write bodies of at most 3 MiB
//! (twice etcd's 1.5 MiB request limit, for JSON's overhead), and client-go's
//! streaming decoder refuses frames over 16 MiB (`ErrObjectTooLarge`); we
//! take client-go's bound, which no object the server can hold reaches.

use std::collections::BTreeMap;

use http::header;
use kcm_proto::{ListBody, ProtoError, Status, WatchEvent, WatchEventType, next_frame};
use serde::Deserialize;

use super::Informable;

/// The protobuf media type.
pub const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
/// The JSON media type.
pub const JSON: &str = "application/json";
/// The longest watch frame read (an event of one object); longer ones are
/// refused before they are buffered whole.
pub const MAX_FRAME: usize = 16 << 20;
/// The annotation of the bookmark that ends a streaming list's initial
/// events (`metav1.InitialEventsAnnotationKey`).
pub const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// Decodes one object message of the kind.
pub type ProtoDecoder<K> = fn(&[u8]) -> Result<K, ProtoError>;

/// How the informer's requests and answers are encoded.
pub(crate) enum Encoding<K> {
    Json,
    Protobuf(ProtoDecoder<K>),
}

// Derived impls would require `K: Clone`/`Copy`.
impl<K> Clone for Encoding<K> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<K> Copy for Encoding<K> {}

/// Why an answer could not be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DecodeError {
    #[error("decoding JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("decoding protobuf: {0}")]
    Proto(#[from] ProtoError),
    #[error("watch frame of {0} bytes or more exceeds the {MAX_FRAME}-byte limit")]
    FrameTooLarge(usize),
    #[error("API server answered in {0:?}, not {1}")]
    ContentType(String, &'static str),
    #[error("list without a resourceVersion")]
    NoListVersion,
}

/// One page of a list.
pub(crate) struct Page<K> {
    pub items: Vec<K>,
    pub resource_version: String,
    pub continue_token: String,
}

/// A `metav1.Status` failure, as far as the loop reads it.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct ApiStatus {
    #[serde(default)]
    pub code: i32,
    #[serde(default)]
    pub reason: String,
    #[serde(default)]
    pub message: String,
}

/// One watch event.
pub(crate) enum Event<K> {
    Apply(K),
    Delete(K),
    Bookmark {
        resource_version: String,
        /// The bookmark ends a streaming list's initial events.
        initial_events_end: bool,
    },
    Error(ApiStatus),
}

impl<K: Informable> Encoding<K> {
    pub fn media_type(self) -> &'static str {
        match self {
            Encoding::Json => JSON,
            Encoding::Protobuf(_) => PROTOBUF,
        }
    }

    /// Refuses a 2xx answer in another encoding (a proxy's HTML page, or
    /// JSON where protobuf was asked for).
    pub fn check_content_type(self, headers: &http::HeaderMap) -> Result<(), DecodeError> {
        let ct = content_type(headers);
        let ok = match self {
            // The API server always labels JSON; an unlabelled body is
            // tried as JSON too (decoding decides).
            Encoding::Json => ct.is_empty() || ct.starts_with(JSON),
            Encoding::Protobuf(_) => ct.starts_with(PROTOBUF),
        };
        if ok {
            Ok(())
        } else {
            Err(DecodeError::ContentType(ct.to_string(), self.media_type()))
        }
    }

    /// Decodes one list page.
    pub fn page(self, body: &[u8]) -> Result<Page<K>, DecodeError> {
        match self {
            Encoding::Json => {
                let list: JsonList<K::Wire> = serde_json::from_slice(body)?;
                Ok(Page {
                    items: list
                        .items
                        .unwrap_or_default()
                        .into_iter()
                        .map(K::from_wire)
                        .collect(),
                    resource_version: list.metadata.resource_version.unwrap_or_default(),
                    continue_token: list.metadata.continue_.unwrap_or_default(),
                })
            }
            Encoding::Protobuf(decode) => {
                let list = ListBody::parse(kcm_proto::unwrap_envelope(body)?)?;
                let items = list
                    .items
                    .iter()
                    .map(|item| decode(item))
                    .collect::<Result<_, _>>()?;
                Ok(Page {
                    items,
                    resource_version: list.resource_version,
                    continue_token: list.continue_token,
                })
            }
        }
    }

    /// The next whole frame at the start of `buf`, and the bytes it takes
    /// (`None`: more bytes are needed). `scanned` remembers how far a JSON
    /// line was searched, so a long line arriving in many chunks is not
    /// searched again from its start.
    pub fn next_frame<'b>(
        self,
        buf: &'b [u8],
        scanned: &mut usize,
    ) -> Result<Option<(&'b [u8], usize)>, DecodeError> {
        match self {
            Encoding::Json => {
                let from = (*scanned).min(buf.len());
                match buf[from..].iter().position(|&b| b == b'\n') {
                    Some(i) => {
                        *scanned = 0;
                        let end = from + i;
                        if end > MAX_FRAME {
                            return Err(DecodeError::FrameTooLarge(end));
                        }
                        Ok(Some((&buf[..end], end + 1)))
                    }
                    None if buf.len() > MAX_FRAME => Err(DecodeError::FrameTooLarge(buf.len())),
                    None => {
                        *scanned = buf.len();
                        Ok(None)
                    }
                }
            }
            Encoding::Protobuf(_) => next_frame(buf, MAX_FRAME).map_err(|e| match e {
                ProtoError::FrameTooLarge(n) => DecodeError::FrameTooLarge(n),
                e => e.into(),
            }),
        }
    }

    /// Decodes one watch frame; `None` for a blank JSON line.
    pub fn event(self, frame: &[u8]) -> Result<Option<Event<K>>, DecodeError> {
        match self {
            Encoding::Json => {
                if frame.iter().all(u8::is_ascii_whitespace) {
                    return Ok(None);
                }
                Ok(Some(match serde_json::from_slice(frame)? {
                    JsonEvent::Added(w) | JsonEvent::Modified(w) => Event::Apply(K::from_wire(w)),
                    JsonEvent::Deleted(w) => Event::Delete(K::from_wire(w)),
                    JsonEvent::Bookmark(b) => Event::Bookmark {
                        resource_version: b.metadata.resource_version.unwrap_or_default(),
                        initial_events_end: b
                            .metadata
                            .annotations
                            .as_ref()
                            .and_then(|a| a.get(INITIAL_EVENTS_END))
                            .is_some_and(|v| v == "true"),
                    },
                    JsonEvent::Error(s) => Event::Error(s),
                }))
            }
            Encoding::Protobuf(decode) => {
                let ev = WatchEvent::parse(frame)?;
                Ok(Some(match ev.type_ {
                    WatchEventType::Added | WatchEventType::Modified => {
                        Event::Apply(decode(ev.object)?)
                    }
                    WatchEventType::Deleted => Event::Delete(decode(ev.object)?),
                    WatchEventType::Bookmark => {
                        let (resource_version, initial_events_end) =
                            kcm_proto::bookmark(ev.object, INITIAL_EVENTS_END)?;
                        Event::Bookmark {
                            resource_version,
                            initial_events_end,
                        }
                    }
                    WatchEventType::Error => {
                        let s = Status::parse(ev.object)?;
                        Event::Error(ApiStatus {
                            code: s.code,
                            reason: s.reason,
                            message: s.message,
                        })
                    }
                }))
            }
        }
    }

    /// The Status of an error answer's body, if it is one.
    pub fn status(self, body: &[u8]) -> Option<ApiStatus> {
        if let Ok(m) = kcm_proto::unwrap_envelope(body)
            && let Ok(s) = Status::parse(m)
        {
            return Some(ApiStatus {
                code: s.code,
                reason: s.reason,
                message: s.message,
            });
        }
        serde_json::from_slice(body).ok()
    }
}

/// A response's `Content-Type` ("" when absent or not text).
pub fn content_type(headers: &http::HeaderMap) -> &str {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

#[derive(Deserialize)]
struct JsonList<T> {
    #[serde(default)]
    metadata: JsonListMeta,
    #[serde(default = "none")]
    items: Option<Vec<T>>,
}

fn none<T>() -> Option<T> {
    None
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct JsonListMeta {
    resource_version: Option<String>,
    #[serde(rename = "continue")]
    continue_: Option<String>,
}

/// A JSON watch event: `{"type": ..., "object": ...}` (either order).
#[derive(Deserialize)]
#[serde(tag = "type", content = "object")]
enum JsonEvent<T> {
    #[serde(rename = "ADDED")]
    Added(T),
    #[serde(rename = "MODIFIED")]
    Modified(T),
    #[serde(rename = "DELETED")]
    Deleted(T),
    #[serde(rename = "BOOKMARK")]
    Bookmark(JsonBookmark),
    #[serde(rename = "ERROR")]
    Error(ApiStatus),
}

/// A bookmark: an object with only its resourceVersion (and, ending a
/// streaming list, the initial-events-end annotation).
#[derive(Deserialize)]
struct JsonBookmark {
    #[serde(default)]
    metadata: JsonBookmarkMeta,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct JsonBookmarkMeta {
    resource_version: Option<String>,
    annotations: Option<BTreeMap<String, String>>,
}
