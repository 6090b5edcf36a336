//! A pull reader over the fields of one protobuf message.

use std::borrow::Cow;

use crate::ProtoError;

/// One field's value, by wire type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Value<'a> {
    /// Wire type 0: int32, int64, bool, enums.
    Varint(u64),
    /// Wire type 1.
    Fixed64(u64),
    /// Wire type 2: strings, bytes, nested messages, map entries.
    Bytes(&'a [u8]),
    /// Wire type 5.
    Fixed32(u32),
}

impl<'a> Value<'a> {
    /// An int64 field (two's complement in the varint).
    pub fn int64(self, field: u32) -> Result<i64, ProtoError> {
        match self {
            Value::Varint(v) => Ok(v as i64),
            _ => Err(ProtoError::Unexpected {
                field,
                expected: "a varint",
            }),
        }
    }

    /// An int32 field (negative values are sign-extended to ten bytes).
    pub fn int32(self, field: u32) -> Result<i32, ProtoError> {
        self.int64(field).map(|v| v as i32)
    }

    /// A bool field.
    pub fn bool(self, field: u32) -> Result<bool, ProtoError> {
        self.int64(field).map(|v| v != 0)
    }

    /// A string, bytes or nested message field.
    pub fn bytes(self, field: u32) -> Result<&'a [u8], ProtoError> {
        match self {
            Value::Bytes(b) => Ok(b),
            _ => Err(ProtoError::Unexpected {
                field,
                expected: "length-delimited bytes",
            }),
        }
    }

    /// A string field. Go does not check UTF-8 on the wire (gogo
    /// protobuf), so neither do we fail on it: bad bytes become U+FFFD.
    pub fn str(self, field: u32) -> Result<Cow<'a, str>, ProtoError> {
        self.bytes(field).map(lossy_str)
    }
}

/// Bytes as a string, borrowed when valid UTF-8.
pub fn lossy_str(b: &[u8]) -> Cow<'_, str> {
    String::from_utf8_lossy(b)
}

/// Reads one message's fields in wire order.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf }
    }

    /// The next field, `None` at the end of the message.
    #[allow(clippy::should_implement_trait)] // fallible: not an Iterator
    pub fn next(&mut self) -> Result<Option<(u32, Value<'a>)>, ProtoError> {
        if self.buf.is_empty() {
            return Ok(None);
        }
        let key = self.varint()?;
        let field = u32::try_from(key >> 3).map_err(|_| ProtoError::FieldZero)?;
        if field == 0 {
            return Err(ProtoError::FieldZero);
        }
        let value = match (key & 7) as u8 {
            0 => Value::Varint(self.varint()?),
            1 => Value::Fixed64(u64::from_le_bytes(self.take_array()?)),
            2 => {
                let len = usize::try_from(self.varint()?).map_err(|_| ProtoError::Truncated)?;
                Value::Bytes(self.take(len)?)
            }
            5 => Value::Fixed32(u32::from_le_bytes(self.take_array()?)),
            other => return Err(ProtoError::WireType(other)),
        };
        Ok(Some((field, value)))
    }

    fn varint(&mut self) -> Result<u64, ProtoError> {
        let mut out = 0u64;
        for (i, &b) in self.buf.iter().enumerate().take(10) {
            // The tenth byte holds only bit 63: more would be dropped.
            if i == 9 && b > 1 {
                return Err(ProtoError::VarintOverflow);
            }
            out |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                self.buf = &self.buf[i + 1..];
                return Ok(out);
            }
        }
        if self.buf.len() < 10 {
            Err(ProtoError::Truncated)
        } else {
            Err(ProtoError::VarintOverflow)
        }
    }

    fn take(&mut self, len: usize) -> Result<&'a [u8], ProtoError> {
        if len > self.buf.len() {
            return Err(ProtoError::Truncated);
        }
        let (head, rest) = self.buf.split_at(len);
        self.buf = rest;
        Ok(head)
    }

    fn take_array<const N: usize>(&mut self) -> Result<[u8; N], ProtoError> {
        let b = self.take(N)?;
        let mut out = [0u8; N];
        out.copy_from_slice(b);
        Ok(out)
    }
}
