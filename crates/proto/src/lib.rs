//! kcm-proto: reading the API server's protobuf (`application/vnd.kubernetes.protobuf`)
//! without generated types.
//!
//! Layout:
//! - `reader.rs`: [`Reader`], a pull reader over one message's bytes that
//!   yields `(field number, value)` pairs and skips nothing it is not asked
//!   to read (skipping a length-delimited field is a pointer bump);
//! - `envelope.rs`: what Kubernetes wraps around messages: the `k8s\0`
//!   magic and `runtime.Unknown` ([`unwrap_envelope`]), a list's
//!   resourceVersion and items ([`ListBody`]), one watch event
//!   ([`WatchEvent`]), the frames of a watch stream ([`next_frame`]), a
//!   bookmark's version and initial-events-end mark ([`bookmark`]) and a
//!   `metav1.Status` ([`Status`]);
//! - `writer.rs`: [`Writer`], the inverse, for tests and mock servers.
//!
//! Data flow: the informer's protobuf watch reads a list body or a watch
//! frame, unwraps the envelope here, and hands each object's bytes to its
//! kind's decoder (`kcm_pod::CachedPod::decode_proto`), which walks them
//! with a [`Reader`]. Field numbers are stable by API rule; fields a
//! decoder does not know (newer servers) are skipped, except groups (wire
//! types 3 and 4, which Kubernetes never writes): those are an error.

mod envelope;
mod reader;
mod writer;

pub use envelope::{
    ListBody, MAGIC, Status, WatchEvent, WatchEventType, bookmark, next_frame, read_frame_len,
    unwrap_envelope,
};
pub use reader::{Reader, Value, lossy_str};
pub use writer::{Writer, watch_frame};

/// Why bytes could not be read as the expected message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtoError {
    /// The message ended inside a field.
    #[error("protobuf message truncated")]
    Truncated,
    /// A varint longer than ten bytes or beyond 64 bits.
    #[error("protobuf varint too long")]
    VarintOverflow,
    /// A wire type this format never uses (groups, or 6 and 7).
    #[error("unsupported protobuf wire type {0}")]
    WireType(u8),
    /// Field number 0 (invalid in protobuf).
    #[error("protobuf field number 0")]
    FieldZero,
    /// A field of the wrong wire type for what the decoder expects.
    #[error("protobuf field {field}: expected {expected}")]
    Unexpected { field: u32, expected: &'static str },
    /// The bytes do not start with Kubernetes' `k8s\0` magic.
    #[error("not a Kubernetes protobuf object (no k8s magic prefix)")]
    NoMagic,
    /// A field every valid message of this kind carries is absent (an
    /// empty body must not read as an empty list).
    #[error("protobuf message lacks {0}")]
    Missing(&'static str),
    /// A watch event type the API does not define.
    #[error("unknown watch event type {0:?}")]
    EventType(String),
    /// The envelope names a content encoding (e.g. gzip) we do not read.
    #[error("unsupported protobuf envelope content encoding {0:?}")]
    ContentEncoding(String),
    /// A watch frame's length prefix over the reader's limit.
    #[error("watch frame of {0} bytes exceeds the limit")]
    FrameTooLarge(usize),
}

#[cfg(test)]
mod tests;
