//! `media`: media part handling — `MediaRef::parse`, and on generated messages with inline
//! blobs (sizes around the threshold, valid and broken base64, client-written references):
//! `parts::may_offload` / `offload` / `references` / `inline` / `as_uri`, then the whole
//! `Media::offload` → `save` → `restore` path through an in-memory object store.
//!
//! Invariants: no panic; `may_offload` says whether `offload` changes a message; offload then
//! inline (or restore) gives back the message the producer sent; a reference parses back to
//! the same text.

use std::collections::HashMap;

use base64::Engine;
use serde_json::Value;

use crate::domain::MessageHash;
use crate::fuzzing::engine::{bucket, note, Target};
use crate::fuzzing::generate::messages;
use crate::fuzzing::Source;
use crate::interpreter::{FactKind, Interpreted, SharedMessages, SpanFact};
use crate::media::parts;
use crate::media::{Media, MediaRef};

use super::ingest::block_on;

/// The target.
pub const TARGET: Target = Target {
    name: "media",
    about: "media::reference and media::parts, Media offload/save/restore in memory",
    run,
    max_len: 16 * 1024,
    scale: crate::fuzzing::engine::repeat_bytes,
    probes: crate::fuzzing::engine::no_probes,
    seeds,
};

fn run(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode & 1 == 1 {
        let text = String::from_utf8_lossy(rest);
        if let Some(r) = MediaRef::parse(&text) {
            note("reference parsed");
            assert!(
                r.to_string() == text,
                "a parsed reference does not print back"
            );
            let _ = r.object_path();
            assert!(
                r.hex().len() == 64,
                "a reference's hex is not 64 characters"
            );
        }
        return;
    }
    let mut src = Source::with_budget(rest, 64 * 1024);
    let threshold = u64::from(src.byte() % 64);
    let list = match messages(&mut src) {
        Value::Array(items) => items,
        other => vec![other],
    };
    let mut all_blobs = Vec::new();
    for message in &list {
        let mut m = message.clone();
        let mut blobs = Vec::new();
        let may = parts::may_offload(&m, threshold);
        let changed = parts::offload(&mut m, threshold, &mut blobs);
        note(("offload", may, changed, bucket(blobs.len())));
        assert!(
            !changed || may,
            "offload changed a message may_offload said it would not"
        );
        let refs: Vec<MediaRef> = parts::references(&m).collect();
        for b in &blobs {
            assert!(
                b.reference.matches(&b.bytes),
                "a blob's reference is not its hash"
            );
            assert!(
                refs.contains(&b.reference),
                "an offloaded blob is not referenced"
            );
        }
        let data: HashMap<MediaRef, String> = blobs
            .iter()
            .map(|b| {
                (
                    b.reference.clone(),
                    base64::engine::general_purpose::STANDARD.encode(&b.bytes),
                )
            })
            .collect();
        let mut shown = m.clone();
        parts::as_uri(&mut shown);
        parts::inline(&mut m, &data);
        assert!(
            m == *message,
            "offload then inline changes the message: {message} -> {m}"
        );
        all_blobs.extend(blobs);
    }
    // The service's path: offload on interpreted messages, save, restore.
    let media = Media::in_memory(Some(threshold));
    let mut interpreted = vec![Interpreted {
        run_span_id: "0101010101010101".into(),
        fact: SpanFact::new(
            FactKind::ModelRequest,
            "07".repeat(16),
            "02".repeat(8),
            "chat".into(),
        ),
        messages: list
            .iter()
            .map(|m| (MessageHash::of(m), m.clone()))
            .collect(),
        shared: SharedMessages::default(),
    }];
    let blobs = media.offload(&mut interpreted);
    if let Err(e) = block_on(media.save(blobs)) {
        panic!("saving blobs to an in-memory store failed: {e}");
    }
    let mut restored: Vec<Value> = interpreted[0]
        .messages
        .iter()
        .map(|(_, m)| m.clone())
        .collect();
    for (hash, body) in &interpreted[0].messages {
        assert!(
            *hash == MessageHash::of(body),
            "an offloaded message's hash is not its body's"
        );
    }
    let client_refs = list.iter().any(|m| parts::references(m).next().is_some());
    // Parts a client made look like stored references come back as the plain `uri` parts the
    // offload turned them into; everything else comes back as the producer sent it.
    let mut expected = list.clone();
    for m in &mut expected {
        parts::neutralise(m);
    }
    match block_on(media.restore("run", &mut restored)) {
        Ok(()) => assert!(
            restored == expected,
            "offload, save and restore change the messages"
        ),
        Err(e) if client_refs => {
            panic!("a client-written media reference is resolved from the store: {e}")
        }
        Err(e) => panic!("restoring what was just saved failed: {e}"),
    }
}

fn seeds() -> Vec<Vec<u8>> {
    vec![
        [
            b"\x01".to_vec(),
            format!("media+sha256://{}", "ab".repeat(32)).into_bytes(),
        ]
        .concat(),
        b"\x01media+sha256://AB".to_vec(),
        vec![0, 4, 1, 0, 1, 5, 2, 6, 7],
        vec![0, 0, 1, 0, 1, 5, 5, 5, 5, 5, 5],
        vec![0, 10, 2, 1, 2, 5, 251, 0, 1, 0],
    ]
}
