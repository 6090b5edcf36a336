//! The API server's bytes, read as the informers read them.

use kcm_pod::CachedPod;
use kcm_proto::{ListBody, Status, WatchEvent, WatchEventType, next_frame, unwrap_envelope};

/// The protobuf informer's frame limit (upstream's `ErrObjectTooLarge`).
const MAX_FRAME: usize = 16 << 20;

/// A protobuf list response (or error body), as the informer's list reads
/// it: the envelope, the list, each item as a pod; a body that is not a
/// list is tried as the `Status` of an error answer.
pub fn proto_list(data: &[u8]) {
    let Ok(msg) = unwrap_envelope(data) else {
        return;
    };
    if let Ok(list) = ListBody::parse(msg) {
        for item in &list.items {
            let _ = CachedPod::decode_proto(item);
        }
    }
    let _ = Status::parse(msg);
}

/// A protobuf watch stream: length-prefixed frames, each a watch event
/// whose object is a pod (or a `Status` for `ERROR`), split as the
/// informer splits them as bytes arrive.
pub fn proto_watch(data: &[u8]) {
    let mut rest = data;
    while let Ok(Some((payload, used))) = next_frame(rest, MAX_FRAME) {
        rest = &rest[used..];
        let Ok(ev) = WatchEvent::parse(payload) else {
            continue;
        };
        match ev.type_ {
            WatchEventType::Error => {
                let _ = Status::parse(ev.object);
            }
            _ => {
                let _ = CachedPod::decode_proto(ev.object);
            }
        }
    }
}

/// One pod message, bare or enveloped.
pub fn pod_proto(data: &[u8]) {
    let _ = CachedPod::decode_proto(data);
    if let Ok(msg) = unwrap_envelope(data) {
        let _ = CachedPod::decode_proto(msg);
    }
}

/// One pod in JSON, as the JSON informer decodes each watch event's object.
pub fn pod_json(data: &[u8]) {
    let _ = serde_json::from_slice::<CachedPod>(data);
}
