//! [`ScratchDir`]: a directory under the system temp dir, removed when dropped (the fuzz
//! targets' stores live in one each; `tempfile` is only a dev-dependency of the crate).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// The start of the names of the scratch directories of process `pid`.
pub(crate) fn prefix(pid: u32) -> String {
    format!("stepline-fuzz-store-{pid}-")
}

/// A fresh directory, deleted with everything in it on drop.
pub struct ScratchDir(PathBuf);

static NEXT: AtomicU64 = AtomicU64::new(0);

impl ScratchDir {
    /// Creates a new empty directory.
    pub fn new() -> std::io::Result<Self> {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("{}{n}", prefix(std::process::id())));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path)?;
        Ok(Self(path))
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
