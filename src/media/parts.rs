//! Media in message parts: taking large inline blobs out of a message, putting them back, and
//! showing them as references.
//!
//! A part that carries base64 data (`{"type": "blob", "mime_type": …, "content": "<base64>"}`, or
//! Pydantic AI 1.x's `"type": "binary"`) becomes, once its data is in the object store, the same
//! part with `content` set to `media+sha256://<hex>` and `size` (decoded bytes) added. Restoring
//! puts the original base64 text back and removes `size`, so the restored part equals what the
//! producer sent: the standard base64 alphabet with canonical padding is a one-to-one encoding,
//! and parts that already have a `size` field are left inline.

use std::collections::HashMap;

use base64::Engine;
use bytes::Bytes;
use serde_json::{Map, Value};

use super::reference::MediaRef;

/// Part types whose `content` is base64 data: the OTel GenAI `blob` and Pydantic AI 1.x `binary`.
const INLINE_TYPES: [&str; 2] = ["blob", "binary"];

/// The field a stored reference part carries its decoded size in.
const SIZE: &str = "size";

/// A blob taken out of a message, to be written to the object store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blob {
    /// Its content address.
    pub reference: MediaRef,
    /// The decoded bytes.
    pub bytes: Bytes,
}

fn parts_mut(message: &mut Value) -> impl Iterator<Item = &mut Map<String, Value>> {
    message
        .get_mut("parts")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
        .filter_map(Value::as_object_mut)
}

fn parts(message: &Value) -> impl Iterator<Item = &Map<String, Value>> {
    message
        .get("parts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_object)
}

fn carries_inline_data(part: &Map<String, Value>) -> bool {
    part.get("type")
        .and_then(Value::as_str)
        .is_some_and(|t| INLINE_TYPES.contains(&t))
}

/// The decoded length of standard, padded base64 text, without decoding it; `None` when the
/// length cannot be that of such text.
fn decoded_len(text: &str) -> Option<usize> {
    if !text.len().is_multiple_of(4) {
        return None;
    }
    let padding = text.bytes().rev().take_while(|&b| b == b'=').count();
    (padding <= 2).then(|| text.len() / 4 * 3 - padding)
}

/// Whether [`offload`] would move something out of `message` (read only; it may still keep data
/// that is not valid base64).
pub fn may_offload(message: &Value, threshold: u64) -> bool {
    parts(message).any(|part| {
        carries_inline_data(part)
            && !part.contains_key(SIZE)
            && part
                .get("content")
                .and_then(Value::as_str)
                .and_then(decoded_len)
                .is_some_and(|n| n as u64 >= threshold)
    })
}

/// Moves every inline blob of at least `threshold` decoded bytes out of `message`, appending
/// it to `blobs`. Returns whether the message changed. Data that is not standard base64 stays.
pub fn offload(message: &mut Value, threshold: u64, blobs: &mut Vec<Blob>) -> bool {
    let mut changed = false;
    for part in parts_mut(message) {
        if !carries_inline_data(part) || part.contains_key(SIZE) {
            continue;
        }
        let Some(text) = part.get("content").and_then(Value::as_str) else {
            continue;
        };
        if decoded_len(text).is_none_or(|n| (n as u64) < threshold) {
            continue;
        }
        let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(text) else {
            continue;
        };
        let reference = MediaRef::of(&bytes);
        part.insert("content".into(), Value::String(reference.to_string()));
        part.insert(SIZE.into(), Value::from(bytes.len() as u64));
        blobs.push(Blob {
            reference,
            bytes: Bytes::from(bytes),
        });
        changed = true;
    }
    changed
}

/// The reference of a part whose data is in the object store.
fn reference_of(part: &Map<String, Value>) -> Option<MediaRef> {
    if !carries_inline_data(part) || !part.get(SIZE).is_some_and(Value::is_u64) {
        return None;
    }
    MediaRef::parse(part.get("content")?.as_str()?)
}

/// True when some part of `message` has the shape of a stored reference.
pub fn looks_stored(message: &Value) -> bool {
    parts(message).any(|part| reference_of(part).is_some())
}

/// Turns every part of an incoming `message` that has the shape of a stored reference into a
/// plain `uri` part carrying the text the sender gave (`content` becomes `uri`; the other
/// fields stay). Run on what senders send, before [`offload`]: only parts stepline itself moved
/// to the store keep the stored-reference shape, so knowing a blob's hash never gets its bytes
/// restored into someone else's history. Returns whether the message changed.
pub fn neutralise(message: &mut Value) -> bool {
    let mut changed = false;
    for part in parts_mut(message) {
        if reference_of(part).is_none() {
            continue;
        }
        let uri = part.remove("content").unwrap_or(Value::Null);
        part.insert("type".into(), Value::from("uri"));
        part.insert("uri".into(), uri);
        changed = true;
    }
    changed
}

/// The media references `message` holds.
pub fn references(message: &Value) -> impl Iterator<Item = MediaRef> + '_ {
    parts(message).filter_map(reference_of)
}

/// The media references `message` holds, with the decoded size each part records.
pub fn references_with_size(message: &Value) -> impl Iterator<Item = (MediaRef, u64)> + '_ {
    parts(message).filter_map(|part| {
        let size = part.get(SIZE).and_then(Value::as_u64)?;
        Some((reference_of(part)?, size))
    })
}

/// Puts the base64 data of each reference back (`data` maps references to base64 text).
/// References missing from `data` are left as they are.
pub fn inline(message: &mut Value, data: &HashMap<MediaRef, String>) {
    for part in parts_mut(message) {
        let Some(text) = reference_of(part).and_then(|r| data.get(&r)) else {
            continue;
        };
        part.insert("content".into(), Value::String(text.clone()));
        part.remove(SIZE);
    }
}

/// Shows each stored reference as an OTel GenAI `uri` part (`uri`, `mime_type`, `modality`,
/// `size`), the form every renderer treats as media given by reference.
pub fn as_uri(message: &mut Value) {
    for part in parts_mut(message) {
        let Some(reference) = reference_of(part) else {
            continue;
        };
        part.remove("content");
        part.insert("type".into(), Value::from("uri"));
        part.insert("uri".into(), Value::String(reference.to_string()));
        if let Some(mime) = part.remove("media_type") {
            part.entry("mime_type").or_insert(mime);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn image(bytes: &[u8]) -> Value {
        let data = base64::engine::general_purpose::STANDARD.encode(bytes);
        json!({"role": "user", "parts": [
            {"type": "text", "content": "what is this?"},
            {"type": "blob", "modality": "image", "mime_type": "image/png", "content": data},
        ]})
    }

    #[test]
    fn at_or_above_the_threshold_moves_and_restores_exactly() {
        let bytes: Vec<u8> = (0..1000u32).map(|i| (i * 7 % 251) as u8).collect();
        let original = image(&bytes);
        let mut message = original.clone();
        let mut blobs = Vec::new();
        assert!(offload(&mut message, 1000, &mut blobs));
        assert_eq!(blobs.len(), 1);
        assert_eq!(blobs[0].bytes.as_ref(), bytes.as_slice());
        let reference = blobs[0].reference.to_string();
        assert_eq!(message["parts"][1]["content"], json!(reference));
        assert_eq!(message["parts"][1]["size"], json!(1000));
        assert_eq!(message["parts"][0], original["parts"][0]);
        assert_eq!(
            references(&message).collect::<Vec<_>>(),
            vec![blobs[0].reference.clone()]
        );

        let mut shown = message.clone();
        as_uri(&mut shown);
        assert_eq!(
            shown["parts"][1],
            json!({"type": "uri", "modality": "image", "mime_type": "image/png", "uri": reference, "size": 1000})
        );

        let data = HashMap::from([(
            blobs[0].reference.clone(),
            base64::engine::general_purpose::STANDARD.encode(&bytes),
        )]);
        inline(&mut message, &data);
        assert_eq!(message, original);
    }

    #[test]
    fn below_the_threshold_or_not_base64_stays_inline() {
        let mut small = image(&[1u8; 999]);
        let before = small.clone();
        let mut blobs = Vec::new();
        assert!(!offload(&mut small, 1000, &mut blobs));
        assert_eq!(small, before);

        let mut odd = json!({"role": "user", "parts": [
            {"type": "blob", "content": "not base64!".repeat(400)},
            // Non-zero trailing bits: decodable by a lenient decoder, but re-encoding would differ.
            {"type": "blob", "content": format!("{}AB==", "A".repeat(3996))},
            {"type": "blob", "content": "QUFB".repeat(1000).replacen('Q', "\n", 1)},
            {"type": "blob", "content": "QUFB".repeat(1000), "size": 3},
            {"type": "uri", "uri": "QUFB".repeat(1000)},
            {"type": "text", "content": "QUFB".repeat(1000)},
        ]});
        let before = odd.clone();
        assert!(!offload(&mut odd, 10, &mut blobs));
        assert_eq!(odd, before);
        assert!(blobs.is_empty());
    }

    #[test]
    fn pydantic_ai_1_binary_parts_and_repeated_blobs() {
        let data = base64::engine::general_purpose::STANDARD.encode([9u8; 300]);
        let mut message = json!({"role": "user", "parts": [
            {"type": "binary", "media_type": "application/pdf", "content": data},
            {"type": "blob", "mime_type": "application/pdf", "content": data},
        ]});
        let mut blobs = Vec::new();
        assert!(offload(&mut message, 300, &mut blobs));
        assert_eq!(blobs.len(), 2);
        assert_eq!(blobs[0].reference, blobs[1].reference, "content-addressed");
        let mut shown = message.clone();
        as_uri(&mut shown);
        assert_eq!(shown["parts"][0]["mime_type"], "application/pdf");
        assert!(shown["parts"][0].get("media_type").is_none());
        assert_eq!(shown["parts"][0]["type"], "uri");
    }
}
