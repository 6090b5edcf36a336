//! A protobuf writer, for tests and mock servers that need to speak the
//! wire format (kcm-rs itself only reads it).

/// Builds one message's bytes field by field.
#[derive(Debug, Default, Clone)]
pub struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    pub fn new() -> Self {
        Writer::default()
    }

    /// A varint field (int32, int64, bool); negative values take ten bytes.
    pub fn varint(mut self, field: u32, v: i64) -> Self {
        self.key(field, 0);
        put_varint(&mut self.buf, v as u64);
        self
    }

    /// A string, bytes or nested message field.
    pub fn bytes(mut self, field: u32, b: impl AsRef<[u8]>) -> Self {
        let b = b.as_ref();
        self.key(field, 2);
        put_varint(&mut self.buf, b.len() as u64);
        self.buf.extend_from_slice(b);
        self
    }

    /// A nested message field.
    pub fn message(self, field: u32, m: Writer) -> Self {
        self.bytes(field, m.buf)
    }

    /// The message's bytes.
    pub fn finish(self) -> Vec<u8> {
        self.buf
    }

    /// The message inside Kubernetes' envelope (`k8s\0` + `runtime.Unknown`).
    pub fn enveloped(self) -> Vec<u8> {
        let mut out = crate::MAGIC.to_vec();
        out.extend(Writer::new().bytes(2, self.buf).finish());
        out
    }

    fn key(&mut self, field: u32, wire: u8) {
        put_varint(&mut self.buf, (u64::from(field) << 3) | u64::from(wire));
    }
}

fn put_varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

/// A watch frame: the 4-byte big-endian length and the event
/// {type 1, object 2 {raw 1}} around an enveloped object.
pub fn watch_frame(type_: &str, object: Writer) -> Vec<u8> {
    let event = Writer::new()
        .bytes(1, type_)
        .message(2, Writer::new().bytes(1, object.enveloped()))
        .finish();
    let mut out = (event.len() as u32).to_be_bytes().to_vec();
    out.extend(event);
    out
}
