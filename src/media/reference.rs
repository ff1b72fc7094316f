//! Content-addressed media references: `media+sha256://<64 lowercase hex>`.

use std::fmt;

use sha2::{Digest, Sha256};

/// The scheme prefix of a media reference.
pub const SCHEME: &str = "media+sha256://";

/// The SHA-256 of a blob's decoded bytes: its name in the object store and in stored messages.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MediaRef(String);

impl MediaRef {
    /// The reference of `bytes`.
    pub fn of(bytes: &[u8]) -> Self {
        Self(hex::encode(Sha256::digest(bytes)))
    }

    /// Parses `media+sha256://<hex>`; anything else (wrong scheme, not 64 lowercase hex
    /// characters) gives `None`.
    pub fn parse(text: &str) -> Option<Self> {
        let hex = text.strip_prefix(SCHEME)?;
        let valid = hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        valid.then(|| Self(hex.to_owned()))
    }

    /// The hex digest.
    pub fn hex(&self) -> &str {
        &self.0
    }

    /// The object's path in the store: `sha256/<first two hex>/<hex>` (a fan-out so a local
    /// directory never holds millions of entries).
    pub fn object_path(&self) -> object_store::path::Path {
        object_store::path::Path::from(format!("sha256/{}/{}", &self.0[..2], self.0))
    }

    /// True when `bytes` are the blob this reference names.
    pub fn matches(&self, bytes: &[u8]) -> bool {
        hex::encode(Sha256::digest(bytes)) == self.0
    }
}

impl fmt::Display for MediaRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{SCHEME}{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_lookalikes() {
        let r = MediaRef::of(b"abc");
        assert_eq!(
            r.to_string(),
            "media+sha256://ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(MediaRef::parse(&r.to_string()), Some(r.clone()));
        assert_eq!(
            r.object_path().as_ref(),
            format!("sha256/ba/{}", r.hex()).as_str()
        );
        assert!(r.matches(b"abc") && !r.matches(b"abd"));
        assert_eq!(MediaRef::parse("media+sha256://ABC"), None);
        assert_eq!(MediaRef::parse(&r.to_string().to_uppercase()), None);
        assert_eq!(MediaRef::parse(r.hex()), None);
    }
}
