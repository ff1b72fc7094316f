//! What the binary record codecs ([`super::snapshot`], [`super::model_request`]) share: LEB128
//! varints, length-prefixed bytes, and a reader whose every failure is a [`RecordError`] naming
//! the kind of record, never a panic.

use crate::service_error::{ServiceError, ServiceErrorCode};

/// A record that cannot be decoded (damaged, truncated, or written by a later format).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{record}: {reason}")]
pub struct RecordError {
    /// The kind of record (`snapshot record`, `model-request record`, ...).
    pub record: &'static str,
    /// What is wrong.
    pub reason: String,
}

impl ServiceError for RecordError {
    fn error_code(&self) -> ServiceErrorCode {
        ServiceErrorCode::Internal
    }
}

/// Appends `n` as a LEB128 varint.
pub(super) fn put_varint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

/// Appends the length of `bytes` (varint), then `bytes`.
pub(super) fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// A damaged record of kind `record`.
pub(super) fn corrupt(record: &'static str, reason: &str) -> RecordError {
    RecordError {
        record,
        reason: reason.to_string(),
    }
}

/// Reads the parts of an encoded record in order.
pub(super) struct Reader<'a> {
    bytes: &'a [u8],
    record: &'static str,
}

impl<'a> Reader<'a> {
    /// A reader of `bytes`, a record of kind `record`.
    pub(super) fn new(bytes: &'a [u8], record: &'static str) -> Self {
        Self { bytes, record }
    }

    fn corrupt(&self, reason: &str) -> RecordError {
        corrupt(self.record, reason)
    }

    /// The next `n` bytes.
    pub(super) fn take(&mut self, n: usize) -> Result<&'a [u8], RecordError> {
        if self.bytes.len() < n {
            return Err(self.corrupt("truncated"));
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    /// The record's header: its format byte, which must be `format`, then its flags byte, of
    /// which only `known_flags` may be set (a record written by a later version is an error,
    /// not misread). Gives the flags.
    pub(super) fn header(&mut self, format: u8, known_flags: u8) -> Result<u8, RecordError> {
        let found = self.byte()?;
        if found != format {
            return Err(self.corrupt(&format!("unknown format {found}")));
        }
        let flags = self.byte()?;
        if flags & !known_flags != 0 {
            return Err(self.corrupt(&format!("unknown flags {flags:#04x}")));
        }
        Ok(flags)
    }

    /// The next byte.
    pub(super) fn byte(&mut self) -> Result<u8, RecordError> {
        Ok(self.take(1)?[0])
    }

    /// The next varint.
    pub(super) fn varint(&mut self) -> Result<u64, RecordError> {
        let mut n = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = self.byte()?;
            n |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(n);
            }
        }
        Err(self.corrupt("varint too long"))
    }

    /// The next varint, as a count that fits 32 bits.
    pub(super) fn u32(&mut self) -> Result<u32, RecordError> {
        u32::try_from(self.varint()?).map_err(|_| self.corrupt("count out of range"))
    }

    /// The next length-prefixed bytes.
    pub(super) fn bytes(&mut self) -> Result<&'a [u8], RecordError> {
        let len =
            usize::try_from(self.varint()?).map_err(|_| self.corrupt("length out of range"))?;
        self.take(len)
    }

    /// The next length-prefixed UTF-8 text.
    pub(super) fn text(&mut self) -> Result<String, RecordError> {
        String::from_utf8(self.bytes()?.to_vec()).map_err(|_| self.corrupt("text is not UTF-8"))
    }

    /// The next part, read by `read`, when `present` (its flag is set); none otherwise.
    pub(super) fn optional<T>(
        &mut self,
        present: bool,
        read: impl FnOnce(&mut Self) -> Result<T, RecordError>,
    ) -> Result<Option<T>, RecordError> {
        if present {
            read(self).map(Some)
        } else {
            Ok(None)
        }
    }

    /// Bytes not read yet.
    pub(super) fn remaining(&self) -> usize {
        self.bytes.len()
    }

    /// Fails unless every byte was read.
    pub(super) fn finish(self) -> Result<(), RecordError> {
        if self.bytes.is_empty() {
            Ok(())
        } else {
            Err(self.corrupt("trailing bytes"))
        }
    }
}
