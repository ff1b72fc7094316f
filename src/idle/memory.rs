//! The process's memory as the OS and the two allocators see it, and the call that hands what
//! they hold free back to the OS. Rust's allocations go to mimalloc (the global allocator of
//! the library); RocksDB's, being C++, go to glibc's malloc.

use std::ffi::c_int;

/// The process's resident memory, in bytes (from `/proc/self/status` on Linux).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcessMemory {
    /// Resident set size now (`VmRSS`).
    pub resident: u64,
    /// The largest resident set size since the start (`VmHWM`).
    pub peak_resident: u64,
}

impl ProcessMemory {
    /// Reads the process's memory; `None` where `/proc/self/status` is not there or says
    /// neither.
    pub fn read() -> Option<Self> {
        std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|status| Self::parse(&status))
    }

    /// The `VmRSS` and `VmHWM` lines of a `/proc/<pid>/status` text (in kB there).
    pub fn parse(status: &str) -> Option<Self> {
        let kib = |field: &str| -> Option<u64> {
            let line = status.lines().find_map(|l| l.strip_prefix(field))?;
            let number = line.trim().strip_suffix("kB")?.trim();
            number.parse::<u64>().ok()?.checked_mul(1024)
        };
        Some(Self {
            resident: kib("VmRSS:")?,
            peak_resident: kib("VmHWM:")?,
        })
    }
}

/// What the allocators hold, in bytes (0 where a platform does not say).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AllocatorMemory {
    /// Memory mimalloc has committed (Rust's heap, with the free pages it keeps; what it has
    /// reset but not decommitted counts here while it is no longer resident).
    pub mimalloc_committed: u64,
    /// Memory glibc's malloc holds from the OS (RocksDB's heap: its arena and its mapped
    /// chunks).
    pub malloc_held: u64,
    /// The part of [`AllocatorMemory::malloc_held`] in use by live allocations.
    pub malloc_in_use: u64,
}

extern "C" {
    fn mi_collect(force: bool);
    #[allow(clippy::too_many_arguments)]
    fn mi_process_info(
        elapsed_msecs: *mut usize,
        user_msecs: *mut usize,
        system_msecs: *mut usize,
        current_rss: *mut usize,
        peak_rss: *mut usize,
        current_commit: *mut usize,
        peak_commit: *mut usize,
        page_faults: *mut usize,
    );
}

/// glibc's `struct mallinfo2` (glibc 2.33 and later).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[repr(C)]
#[derive(Default)]
struct MallInfo2 {
    arena: usize,
    ordblks: usize,
    smblks: usize,
    hblks: usize,
    hblkhd: usize,
    usmblks: usize,
    fsmblks: usize,
    uordblks: usize,
    fordblks: usize,
    keepcost: usize,
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
extern "C" {
    fn malloc_trim(pad: usize) -> c_int;
    fn mallinfo2() -> MallInfo2;
}

impl AllocatorMemory {
    /// Reads both allocators' statistics (each a few field reads; glibc's takes its arena's
    /// lock briefly).
    pub fn read() -> Self {
        let mut out = [0usize; 8];
        let [a, b, c, d, e, commit, f, g] = &mut out;
        // SAFETY: mi_process_info writes each out-pointer it is given; all point to live
        // usize slots.
        unsafe { mi_process_info(a, b, c, d, e, commit, f, g) };
        let mut memory = Self {
            mimalloc_committed: out[5] as u64,
            ..Self::default()
        };
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        {
            // SAFETY: mallinfo2 only reads malloc's statistics and returns them by value.
            let info = unsafe { mallinfo2() };
            memory.malloc_held = (info.arena as u64).saturating_add(info.hblkhd as u64);
            memory.malloc_in_use = (info.uordblks as u64).saturating_add(info.hblkhd as u64);
        }
        memory
    }
}

/// Hands the free memory both allocators hold back to the OS: glibc's `malloc_trim(0)` (free
/// pages anywhere in its heap, not only at its top, as freed RocksDB blocks leave them) and
/// mimalloc's forced collection (this thread's free pages and those of threads that ended, and
/// the purges it had delayed). Costs a page fault on each page used again later,
/// so it runs only when the process has gone quiet.
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free pages of malloc's own heap to the OS.
    unsafe {
        malloc_trim(0);
    }
    // SAFETY: mi_collect only frees what mimalloc holds unused.
    unsafe { mi_collect(true) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_memory_reads_the_resident_lines_of_proc_status() {
        let status =
            "Name:\tstepline\nVmPeak:\t 2000 kB\nVmHWM:\t    3072 kB\nVmRSS:\t    1024 kB\n";
        assert_eq!(
            ProcessMemory::parse(status),
            Some(ProcessMemory {
                resident: 1024 * 1024,
                peak_resident: 3072 * 1024,
            })
        );
        assert_eq!(ProcessMemory::parse("VmRSS:\t1 kB\n"), None, "no VmHWM");
        assert_eq!(
            ProcessMemory::parse("VmRSS:\tlots kB\nVmHWM:\t1 kB\n"),
            None
        );
        assert_eq!(
            ProcessMemory::parse("VmRSS:\t1\nVmHWM:\t1 kB\n"),
            None,
            "no unit"
        );
        let overflow = format!("VmRSS:\t{} kB\nVmHWM:\t1 kB\n", u64::MAX);
        assert_eq!(ProcessMemory::parse(&overflow), None);
    }

    #[test]
    fn the_allocators_say_what_they_hold_and_give_free_memory_back() {
        // 64 MiB in mimalloc, touched, then freed and collected.
        let before = AllocatorMemory::read();
        let big: Vec<Vec<u8>> = (0..64).map(|_| vec![1u8; 1 << 20]).collect();
        let holding = AllocatorMemory::read();
        assert!(
            holding.mimalloc_committed >= before.mimalloc_committed + (48 << 20),
            "{before:?} {holding:?}"
        );
        drop(big);
        // Given back or kept for reuse, as mimalloc decides; it must not fail either way.
        release_free_memory();
        let after = AllocatorMemory::read();
        assert!(after.mimalloc_committed > 0, "{after:?}");
        if cfg!(all(target_os = "linux", target_env = "gnu")) {
            assert!(after.malloc_held >= after.malloc_in_use, "{after:?}");
            assert!(after.malloc_held > 0, "{after:?}");
        }
    }
}
