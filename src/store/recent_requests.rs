//! The continuation requests seen most recently, kept across restarts
//! (`continuation_recent_requests` in [`Cf::Meta`]) so that the load ahead at start renders the
//! answers orchestrators asked for before it. The record is a few short lines of printable
//! ASCII, one request each, newest first; the continuations write and read the lines'
//! words, the store only keeps them within bounds.

use super::column::Cf;
use super::core::Store;
use super::error::StoreError;
use super::kv::KvBatch;

/// Where the record is kept.
pub(super) const RECENT_REQUESTS_KEY: &[u8] = b"continuation_recent_requests";

/// Most lines a record holds.
pub const RECENT_REQUEST_LINES: usize = 8;

/// Most bytes of one line.
pub const RECENT_REQUEST_LINE_BYTES: usize = 64;

/// Whether `value` is a record the store would write: at most [`RECENT_REQUEST_LINES`] lines of
/// at most [`RECENT_REQUEST_LINE_BYTES`] printable ASCII bytes each, `\n` after each.
pub(super) fn check_record(value: &[u8]) -> Result<(), String> {
    if value.is_empty() {
        return Ok(());
    }
    let Some(body) = value.strip_suffix(b"\n") else {
        return Err("a line without its newline".to_string());
    };
    let lines: Vec<&[u8]> = body.split(|&b| b == b'\n').collect();
    if lines.len() > RECENT_REQUEST_LINES {
        return Err(format!(
            "{} lines, more than {RECENT_REQUEST_LINES}",
            lines.len()
        ));
    }
    lines.into_iter().try_for_each(check_line)
}

/// Whether `line` (without its newline) is one the store would write: 1 to
/// [`RECENT_REQUEST_LINE_BYTES`] bytes of printable ASCII.
fn check_line(line: &[u8]) -> Result<(), String> {
    if line.is_empty() || line.len() > RECENT_REQUEST_LINE_BYTES {
        return Err(format!("a line of {} bytes", line.len()));
    }
    if !line.iter().all(|b| (b' '..=b'~').contains(b)) {
        return Err("a line that is not printable ASCII".to_string());
    }
    Ok(())
}

impl Store {
    /// The recent continuation requests' lines as last kept, newest first; none when nothing
    /// was kept, or when what is there is not a record the store writes (it only means nothing
    /// is rendered ahead).
    pub fn recent_request_lines(&self) -> Result<Vec<String>, StoreError> {
        let Some(value) = self.kv.get(Cf::Meta, RECENT_REQUESTS_KEY)? else {
            return Ok(Vec::new());
        };
        if let Err(reason) = check_record(&value) {
            tracing::warn!(%reason, "the recent continuation requests are not readable; none is rendered ahead");
            return Ok(Vec::new());
        }
        Ok(String::from_utf8_lossy(&value)
            .lines()
            .map(str::to_string)
            .collect())
    }

    /// Keeps `lines` as the recent continuation requests (the first [`RECENT_REQUEST_LINES`]
    /// that are within bounds). Written without waiting for an fsync: a record lost in a crash
    /// only means nothing is rendered ahead at the next start.
    pub fn keep_recent_request_lines(&self, lines: &[String]) -> Result<(), StoreError> {
        let mut value = Vec::new();
        for line in lines
            .iter()
            .filter(|l| check_line(l.as_bytes()).is_ok())
            .take(RECENT_REQUEST_LINES)
        {
            value.extend_from_slice(line.as_bytes());
            value.push(b'\n');
        }
        let mut batch = KvBatch::default();
        batch.put(Cf::Meta, RECENT_REQUESTS_KEY, value);
        self.kv.write(batch, false).map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_lines_read_back_and_pass_the_readback_check() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), false).unwrap();
        assert!(store.recent_request_lines().unwrap().is_empty());
        let lines: Vec<String> = ["pydantic-ai latest 0 0 inline", "otel latest 1 1 reference"]
            .map(String::from)
            .to_vec();
        store.keep_recent_request_lines(&lines).unwrap();
        assert_eq!(store.recent_request_lines().unwrap(), lines);
        assert!(store.check_readable().unwrap().is_empty());
        drop(store);
        // Across a reopen.
        let store = Store::open(dir.path(), false).unwrap();
        assert_eq!(store.recent_request_lines().unwrap(), lines);
        // Lines out of bounds are not kept; the rest are, at most eight.
        let mut many: Vec<String> = vec!["x".repeat(65), "caf\u{e9}".into(), "a\nb".into()];
        many.extend((0..10).map(|i| format!("line {i}")));
        store.keep_recent_request_lines(&many).unwrap();
        let kept = store.recent_request_lines().unwrap();
        assert_eq!(
            kept,
            (0..8).map(|i| format!("line {i}")).collect::<Vec<_>>()
        );
        assert!(store.check_readable().unwrap().is_empty());
    }

    #[test]
    fn a_record_the_store_would_not_write_reads_as_none_and_fails_the_readback_check() {
        let nine_lines = "x\n".repeat(9).into_bytes();
        for bad in [
            &b"no newline"[..],
            b"\n",
            b"caf\xc3\xa9\n",
            b"a\n\nb\n",
            &nine_lines,
        ] {
            assert!(check_record(bad).is_err(), "{bad:?}");
            let store = Store::in_memory();
            let mut batch = KvBatch::default();
            batch.put(Cf::Meta, RECENT_REQUESTS_KEY, bad.to_vec());
            store.kv().write(batch, false).unwrap();
            assert!(store.recent_request_lines().unwrap().is_empty());
            assert_eq!(store.check_readable().unwrap().len(), 1, "{bad:?}");
        }
        assert!(check_record(b"").is_ok());
    }
}
