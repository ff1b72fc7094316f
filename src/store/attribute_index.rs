//! The run-attribute index: one `RUN_INDEX` key per attribute on a run record
//! (`processors.stepline.run_attributes`), so `GET /v1/runs?attr.<key>=<value>` scans only the
//! runs that have that value.
//!
//! A key is `x \0 <key length, be32> <key> <value> \0 <position>`: the length makes the split
//! between key and value unambiguous whatever bytes they hold, and values never hold a NUL (the
//! interpreter leaves such values out), so one value's prefix never holds another's keys.

use crate::domain::Run;

/// The tag of the attribute index.
const TAG: u8 = b'x';

/// The prefix of the runs whose attribute `key` is `value`.
pub fn attribute_prefix(key: &str, value: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(key.len() + value.len() + 7);
    k.extend_from_slice(&[TAG, 0]);
    k.extend_from_slice(&u32::try_from(key.len()).unwrap_or(u32::MAX).to_be_bytes());
    k.extend_from_slice(key.as_bytes());
    k.extend_from_slice(value.as_bytes());
    k.push(0);
    k
}

/// The attribute index keys of `run`, at index `position`.
pub fn attribute_keys<'a>(run: &'a Run, position: &'a [u8]) -> impl Iterator<Item = Vec<u8>> + 'a {
    run.attributes.iter().map(move |(k, v)| {
        let mut key = attribute_prefix(k, v);
        key.extend_from_slice(position);
        key
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_split_key_and_value_unambiguously() {
        assert_ne!(attribute_prefix("ab", "c"), attribute_prefix("a", "bc"));
        assert!(!attribute_prefix("a", "bc").starts_with(&attribute_prefix("a", "b")));
    }
}
