//! What message hashes and node ids share: fixed-size binary values in memory, lowercase hex
//! text wherever they are shown or serialised (JSON records, API responses), and a cheap hasher
//! for the maps keyed by them.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

const HEX_DIGITS: &[u8; 16] = b"0123456789abcdef";

/// Writes the lowercase hex of `bytes` into `out` (which holds exactly twice as many bytes).
pub(crate) fn encode_hex(bytes: &[u8], out: &mut [u8]) {
    debug_assert_eq!(out.len(), bytes.len() * 2);
    for (b, pair) in bytes.iter().zip(out.chunks_exact_mut(2)) {
        pair[0] = HEX_DIGITS[usize::from(b >> 4)];
        pair[1] = HEX_DIGITS[usize::from(b & 0x0f)];
    }
}

/// Decodes hex text (either case) of exactly `N` bytes; `None` for any other text.
pub(crate) fn decode_hex<const N: usize>(text: &str) -> Option<[u8; N]> {
    let mut out = [0u8; N];
    hex::decode_to_slice(text, &mut out).ok()?;
    Some(out)
}

/// A hasher for keys that are already uniformly random bytes (truncated SHA-256 digests): it
/// keeps the first 8 bytes it is given as the hash instead of mixing them again. Only for such
/// keys: anything else hashed with it would cluster.
#[derive(Debug, Default, Clone, Copy)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Ids hash themselves with one `write_u64`; this fallback folds anything else in.
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.0 = self.0.rotate_left(5) ^ u64::from_le_bytes(word);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = self.0.rotate_left(5) ^ n;
    }
}

/// Builds [`IdHasher`]s, for maps keyed by message hashes or node ids.
pub type BuildIdHasher = BuildHasherDefault<IdHasher>;

/// A map keyed by message hashes or node ids, hashed with [`IdHasher`].
pub type IdMap<K, V> = HashMap<K, V, BuildIdHasher>;

/// A set of message hashes or node ids, hashed with [`IdHasher`].
pub type IdSet<K> = HashSet<K, BuildIdHasher>;

/// Implements, for a `struct $name(pub [u8; $bytes])`: hex `Display`/`Debug`/`FromStr`, serde as
/// a lowercase hex string (a string that is not hex of the right length fails to deserialise),
/// `Hash` as one `write_u64` of the first 8 bytes, and `hex_into` for callers that need the text
/// without allocating.
macro_rules! binary_id {
    ($name:ident, $bytes:expr, $what:literal) => {
        // `Hash` takes the first 8 bytes.
        const _: () = assert!($bytes >= 8);

        impl $name {
            /// Writes its lowercase hex text into `out` and returns it (no allocation).
            pub fn hex_into<'a>(&self, out: &'a mut [u8; 2 * $bytes]) -> &'a str {
                $crate::domain::binary_id::encode_hex(&self.0, out);
                // Hex digits are ASCII.
                std::str::from_utf8(out).unwrap_or_default()
            }

            /// Reads its binary form (`None` unless `bytes` has exactly the right length).
            pub fn from_slice(bytes: &[u8]) -> Option<Self> {
                bytes.try_into().ok().map(Self)
            }

            /// Its binary form.
            pub fn as_bytes(&self) -> &[u8; $bytes] {
                &self.0
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                let mut buf = [0u8; 2 * $bytes];
                f.write_str(self.hex_into(&mut buf))
            }
        }

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{}({})", stringify!($name), self)
            }
        }

        impl std::str::FromStr for $name {
            type Err = String;

            fn from_str(text: &str) -> Result<Self, String> {
                $crate::domain::binary_id::decode_hex::<{ $bytes }>(text)
                    .map(Self)
                    .ok_or_else(|| {
                        format!(
                            concat!("a ", $what, " is {} hex characters, not {:?}"),
                            2 * $bytes,
                            text
                        )
                    })
            }
        }

        impl std::hash::Hash for $name {
            fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
                let mut first = [0u8; 8];
                first.copy_from_slice(&self.0[..8]);
                state.write_u64(u64::from_le_bytes(first));
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                let mut buf = [0u8; 2 * $bytes];
                serializer.serialize_str(self.hex_into(&mut buf))
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                struct Visitor;

                impl serde::de::Visitor<'_> for Visitor {
                    type Value = $name;

                    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        write!(f, concat!("a ", $what, " as {} hex characters"), 2 * $bytes)
                    }

                    fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<$name, E> {
                        text.parse().map_err(E::custom)
                    }
                }

                deserializer.deserialize_str(Visitor)
            }
        }
    };
}

pub(crate) use binary_id;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{MessageHash, NodeId};
    use std::hash::BuildHasher;

    #[test]
    fn ids_show_as_hex_and_parse_back() {
        let mut bytes = [0u8; 16];
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = (i as u8) * 17;
        }
        let id = NodeId(bytes);
        assert_eq!(id.to_string(), "00112233445566778899aabbccddeeff");
        assert_eq!(
            format!("{id:?}"),
            "NodeId(00112233445566778899aabbccddeeff)"
        );
        assert_eq!("00112233445566778899AABBCCDDEEFF".parse::<NodeId>(), Ok(id));
        assert!("0011".parse::<NodeId>().is_err());
        assert!("not hex at all, but 32 chars ok?"
            .parse::<NodeId>()
            .is_err());
        assert_eq!(NodeId::from_slice(&bytes), Some(id));
        assert_eq!(NodeId::from_slice(&bytes[1..]), None);
    }

    #[test]
    fn the_id_hasher_keeps_the_first_eight_bytes() {
        let hash = MessageHash([1, 2, 3, 4, 5, 6, 7, 8, 9, 9, 9, 9, 9, 9, 9, 9]);
        let build = BuildIdHasher::default();
        assert_eq!(
            build.hash_one(hash),
            u64::from_le_bytes([1, 2, 3, 4, 5, 6, 7, 8])
        );
        // A reference hashes as its value, so maps of either agree.
        assert_eq!(build.hash_one::<&MessageHash>(&hash), build.hash_one(hash));
        let mut map: IdMap<MessageHash, u32> = IdMap::default();
        map.insert(hash, 1);
        let mut other = hash;
        other.0[15] = 0;
        map.insert(other, 2);
        assert_eq!((map[&hash], map[&other], map.len()), (1, 2, 2));
    }
}
