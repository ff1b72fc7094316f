//! The file descriptors the store keeps open: RocksDB's table files.
//!
//! RocksDB keeps every table file it opened open, with its reader, unless told a number
//! (`max_open_files`). The column families keyed by run (messages, history nodes, snapshots,
//! model requests) have keys that only grow, so each file a flush writes is moved down whole
//! instead of merged, and their files only grow in number: about 1,800 table files after 10
//! minutes of agent load. Each was an open descriptor and a reader in glibc's heap. Under a
//! limit of 256 descriptors RocksDB could not open the write-ahead log it switched to after 30 s
//! of that load, and every commit after it failed. So the store keeps at most
//! [`table_files_open`] open (a file closed is opened again when read), and the process raises
//! its own limit to the hard one at start ([`raise_limit`]). See examples/README.md, "Index and
//! filter blocks of flushed files, and table files that only grow in number".

#[cfg(target_os = "linux")]
use std::ffi::c_int;

/// Table files kept open at most, whatever the limit on descriptors. In a 10-minute agent soak
/// that ended with 1,782 table files, throughput with 1,024 kept open was that of the build
/// keeping every file open (7,247 against 7,307 spans/s), and the heap held 5 MB less at idle.
pub const MAX_TABLE_FILES_OPEN: u64 = 1024;

/// Table files kept open at least, however low the limit.
pub const MIN_TABLE_FILES_OPEN: u64 = 32;

/// Table files the store keeps open with a `limit` on the process's descriptors (none: not
/// known): half of it (the other half for connections, logs and the rest), between
/// [`MIN_TABLE_FILES_OPEN`] and [`MAX_TABLE_FILES_OPEN`].
pub fn table_files_open(limit: Option<u64>) -> i32 {
    let open = limit
        .map_or(MAX_TABLE_FILES_OPEN, |limit| limit / 2)
        .clamp(MIN_TABLE_FILES_OPEN, MAX_TABLE_FILES_OPEN);
    i32::try_from(open).unwrap_or(i32::MAX)
}

/// `struct rlimit` on Linux (`rlim_t` is 64 bits wide on every Linux target Rust supports).
#[cfg(target_os = "linux")]
#[repr(C)]
#[derive(Default)]
struct Rlimit {
    current: u64,
    max: u64,
}

/// `RLIMIT_NOFILE` on Linux.
#[cfg(target_os = "linux")]
const RLIMIT_NOFILE: c_int = 7;

#[cfg(target_os = "linux")]
extern "C" {
    fn getrlimit(resource: c_int, limit: *mut Rlimit) -> c_int;
    fn setrlimit(resource: c_int, limit: *const Rlimit) -> c_int;
}

/// The process's limit on open descriptors now (its soft limit); `None` where it cannot be read
/// or is unlimited.
pub fn limit() -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        let mut limit = Rlimit::default();
        // SAFETY: getrlimit writes the struct it is given, which is live and laid out as
        // `struct rlimit`.
        let read = unsafe { getrlimit(RLIMIT_NOFILE, &mut limit) };
        (read == 0 && limit.current != u64::MAX).then_some(limit.current)
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

/// Raises the process's limit on open descriptors to its hard limit (what an unprivileged
/// process may), for the receivers' connections and the store's files; gives the limit now.
/// A refusal leaves the limit as it was.
pub fn raise_limit() -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        let mut limit = Rlimit::default();
        // SAFETY: as in `limit`.
        if unsafe { getrlimit(RLIMIT_NOFILE, &mut limit) } == 0 && limit.current < limit.max {
            let raised = Rlimit {
                current: limit.max,
                max: limit.max,
            };
            // SAFETY: setrlimit only reads the struct it is given; raising the soft limit up
            // to the hard one is always allowed.
            let _ = unsafe { setrlimit(RLIMIT_NOFILE, &raised) };
        }
    }
    limit()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_store_keeps_half_the_limit_open_within_bounds() {
        assert_eq!(table_files_open(Some(1024)), 512);
        assert_eq!(table_files_open(Some(20_000)), MAX_TABLE_FILES_OPEN as i32);
        assert_eq!(table_files_open(Some(100)), 50);
        assert_eq!(table_files_open(Some(40)), MIN_TABLE_FILES_OPEN as i32);
        assert_eq!(table_files_open(None), MAX_TABLE_FILES_OPEN as i32);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_limit_is_read_and_raising_it_never_lowers_it() {
        let before = limit().expect("a limit on descriptors");
        assert!(before > 0);
        let after = raise_limit().expect("a limit on descriptors");
        assert!(after >= before, "{after} < {before}");
        assert_eq!(limit(), Some(after));
    }
}
