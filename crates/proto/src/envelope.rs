//! What Kubernetes wraps around protobuf messages.
//!
//! - A response body or an embedded object is `k8s\0` followed by a
//!   `runtime.Unknown` {typeMeta 1, raw 2, contentEncoding 3, contentType 4}
//!   whose `raw` is the object's own message.
//! - A watch stream is frames of a 4-byte big-endian length and a
//!   `metav1.WatchEvent` {type 1, object 2}; `object` is a
//!   `runtime.RawExtension` {raw 1} holding an enveloped object.
//! - A list is {metadata 1 (`ListMeta`: resourceVersion 2), items 2}.
//! - `metav1.Status` is {status 2, message 3, reason 4, code 6}.

use crate::ProtoError;
use crate::reader::{Reader, lossy_str};

/// Kubernetes' protobuf magic prefix.
pub const MAGIC: &[u8; 4] = b"k8s\0";

/// The object message inside an envelope. Bytes without the magic, or an
/// envelope without `raw`, are an error.
pub fn unwrap_envelope(bytes: &[u8]) -> Result<&[u8], ProtoError> {
    let Some(unknown) = bytes.strip_prefix(MAGIC.as_slice()) else {
        return Err(ProtoError::NoMagic);
    };
    let mut raw = None;
    let mut r = Reader::new(unknown);
    while let Some((field, v)) = r.next()? {
        match field {
            2 => raw = Some(v.bytes(field)?),
            3 => {
                let enc = v.str(field)?;
                if !enc.is_empty() {
                    return Err(ProtoError::ContentEncoding(enc.into_owned()));
                }
            }
            _ => {}
        }
    }
    raw.ok_or(ProtoError::Missing("runtime.Unknown raw"))
}

/// A list response's resourceVersion and its items' messages.
#[derive(Debug, Default)]
pub struct ListBody<'a> {
    pub resource_version: String,
    /// `metadata.continue` (empty when this is the last page).
    pub continue_token: String,
    pub items: Vec<&'a [u8]>,
}

impl<'a> ListBody<'a> {
    /// Reads an unwrapped list message.
    pub fn parse(list: &'a [u8]) -> Result<Self, ProtoError> {
        let mut out = ListBody::default();
        let mut r = Reader::new(list);
        while let Some((field, v)) = r.next()? {
            match field {
                1 => {
                    let mut m = Reader::new(v.bytes(field)?);
                    while let Some((f, v)) = m.next()? {
                        match f {
                            2 => out.resource_version = v.str(f)?.into_owned(),
                            3 => out.continue_token = v.str(f)?.into_owned(),
                            _ => {}
                        }
                    }
                }
                2 => out.items.push(v.bytes(field)?),
                _ => {}
            }
        }
        Ok(out)
    }
}

/// A watch event's type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchEventType {
    Added,
    Modified,
    Deleted,
    Bookmark,
    Error,
}

/// One watch event: its type and its object's message (unwrapped).
#[derive(Debug)]
pub struct WatchEvent<'a> {
    pub type_: WatchEventType,
    pub object: &'a [u8],
}

impl<'a> WatchEvent<'a> {
    /// Reads one frame's payload (without its length prefix).
    pub fn parse(frame: &'a [u8]) -> Result<Self, ProtoError> {
        // The frame is the bare event; accept an enveloped one too.
        let frame = if frame.starts_with(MAGIC) {
            unwrap_envelope(frame)?
        } else {
            frame
        };
        let mut type_ = None;
        let mut object = None;
        let mut r = Reader::new(frame);
        while let Some((field, v)) = r.next()? {
            match field {
                1 => {
                    type_ = Some(match &*v.str(field)? {
                        "ADDED" => WatchEventType::Added,
                        "MODIFIED" => WatchEventType::Modified,
                        "DELETED" => WatchEventType::Deleted,
                        "BOOKMARK" => WatchEventType::Bookmark,
                        "ERROR" => WatchEventType::Error,
                        // client-go ends the watch on these too.
                        other => return Err(ProtoError::EventType(other.to_string())),
                    })
                }
                2 => {
                    let mut ext = Reader::new(v.bytes(field)?);
                    while let Some((f, v)) = ext.next()? {
                        if f == 1 {
                            object = Some(v.bytes(f)?);
                        }
                    }
                }
                _ => {}
            }
        }
        let type_ = type_.ok_or(ProtoError::Missing("watch event type"))?;
        let object = object.ok_or(ProtoError::Missing("watch event object"))?;
        let object = if object.starts_with(MAGIC) {
            unwrap_envelope(object)?
        } else {
            object
        };
        Ok(WatchEvent { type_, object })
    }
}

/// The length of the watch frame at the start of `buf`, once its 4-byte
/// prefix has arrived.
pub fn read_frame_len(buf: &[u8]) -> Option<usize> {
    let prefix: [u8; 4] = buf.get(..4)?.try_into().ok()?;
    Some(u32::from_be_bytes(prefix) as usize)
}

/// The watch frame at the start of `buf`: its payload and how many bytes
/// it spans with its prefix, or `None` until all of it has arrived. A
/// prefix claiming more than `max` is refused as soon as it is read, so a
/// bogus length (up to 4 GiB) is never waited or buffered for; nothing
/// here allocates.
pub fn next_frame(buf: &[u8], max: usize) -> Result<Option<(&[u8], usize)>, ProtoError> {
    let Some(len) = read_frame_len(buf) else {
        return Ok(None);
    };
    if len > max {
        return Err(ProtoError::FrameTooLarge(len));
    }
    let end = len.saturating_add(4);
    Ok(buf.get(4..end).map(|payload| (payload, end)))
}

/// A `metav1.Status`: what an error response or an `ERROR` watch event holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Status {
    pub status: String,
    pub message: String,
    pub reason: String,
    pub code: i32,
}

impl Status {
    /// Reads an unwrapped Status message.
    pub fn parse(msg: &[u8]) -> Result<Self, ProtoError> {
        let mut out = Status::default();
        let mut r = Reader::new(msg);
        while let Some((field, v)) = r.next()? {
            match field {
                2 => out.status = lossy_str(v.bytes(field)?).into_owned(),
                3 => out.message = lossy_str(v.bytes(field)?).into_owned(),
                4 => out.reason = lossy_str(v.bytes(field)?).into_owned(),
                6 => out.code = v.int32(field)?,
                _ => {}
            }
        }
        Ok(out)
    }
}

/// A bookmark's object (unwrapped): its `metadata.resourceVersion` and
/// whether its annotations hold `annotation` = "true" (a streaming list's
/// `k8s.io/initial-events-end`). Any kind's message has its `ObjectMeta`
/// at field 1: resourceVersion 6, annotations 12 (map entries {key 1,
/// value 2}).
pub fn bookmark(object: &[u8], annotation: &str) -> Result<(String, bool), ProtoError> {
    let (mut rv, mut marked) = (String::new(), false);
    let mut r = Reader::new(object);
    while let Some((field, v)) = r.next()? {
        if field != 1 {
            continue;
        }
        let mut meta = Reader::new(v.bytes(field)?);
        while let Some((f, v)) = meta.next()? {
            match f {
                6 => rv = v.str(f)?.into_owned(),
                12 => {
                    let (mut key, mut value) = (None, None);
                    let mut entry = Reader::new(v.bytes(f)?);
                    while let Some((ef, ev)) = entry.next()? {
                        match ef {
                            1 => key = Some(ev.bytes(ef)?),
                            2 => value = Some(ev.bytes(ef)?),
                            _ => {}
                        }
                    }
                    if key == Some(annotation.as_bytes()) && value == Some(b"true".as_slice()) {
                        marked = true;
                    }
                }
                _ => {}
            }
        }
    }
    Ok((rv, marked))
}
