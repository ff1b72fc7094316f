//! The process's memory as the OS and the two allocators see it, and the calls that hand what
//! they hold free back to the OS. Rust's allocations go to mimalloc (the global allocator of
//! the library); RocksDB's, being C++, go to glibc's malloc.
//!
//! mimalloc keeps free memory per thread: a thread's pages whose blocks were all freed (by it
//! or, later, by other threads) go back only when that thread collects. So the idle task asks
//! every long-lived thread to collect ([`ask_threads_to_collect`]): the runtime's workers do it
//! when they next park ([`collect_if_asked`], the runtime's park hook) and the writer while it
//! waits for work ([`blocking_recv_collecting`]).

use std::cell::Cell;
use std::ffi::c_int;
use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use tokio::sync::{mpsc, Notify};

/// The process's resident memory, in bytes (from `/proc/self/status` on Linux).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcessMemory {
    /// Resident set size now (`VmRSS`).
    pub resident: u64,
    /// The largest resident set size since the start (`VmHWM`).
    pub peak_resident: u64,
    /// The anonymous part of the resident set (`RssAnon`): both allocators' heaps and the
    /// threads' stacks (0 where the kernel does not say).
    pub resident_anon: u64,
    /// The file-backed part of the resident set (`RssFile`): the pages of the binary and the
    /// shared libraries that were touched, which the kernel can drop and read again (0 where
    /// the kernel does not say).
    pub resident_file: u64,
}

impl ProcessMemory {
    /// Reads the process's memory; `None` where `/proc/self/status` is not there or says
    /// neither.
    pub fn read() -> Option<Self> {
        std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|status| Self::parse(&status))
    }

    /// The `VmRSS`, `VmHWM`, `RssAnon` and `RssFile` lines of a `/proc/<pid>/status` text (in
    /// kB there); `None` without the first two.
    pub fn parse(status: &str) -> Option<Self> {
        let kib = |field: &str| -> Option<u64> {
            let line = status.lines().find_map(|l| l.strip_prefix(field))?;
            let number = line.trim().strip_suffix("kB")?.trim();
            number.parse::<u64>().ok()?.checked_mul(1024)
        };
        Some(Self {
            resident: kib("VmRSS:")?,
            peak_resident: kib("VmHWM:")?,
            resident_anon: kib("RssAnon:").unwrap_or(0),
            resident_file: kib("RssFile:").unwrap_or(0),
        })
    }
}

/// Resident bytes of the process in transparent huge pages (`AnonHugePages` of
/// `/proc/self/smaps_rollup`, which walks every mapping: for `/metrics`, not hot paths); `None`
/// where the kernel does not say.
pub fn anon_huge_page_bytes() -> Option<u64> {
    let rollup = std::fs::read_to_string("/proc/self/smaps_rollup").ok()?;
    let line = rollup
        .lines()
        .find_map(|l| l.strip_prefix("AnonHugePages:"))?;
    let number = line.trim().strip_suffix("kB")?.trim();
    number.parse::<u64>().ok()?.checked_mul(1024)
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

#[cfg(target_os = "linux")]
extern "C" {
    fn prctl(option: c_int, ...) -> c_int;
}

/// `prctl` option that turns transparent huge pages off for the whole process.
#[cfg(target_os = "linux")]
const PR_SET_THP_DISABLE: c_int = 41;
/// `prctl` option that says whether they are off.
#[cfg(target_os = "linux")]
const PR_GET_THP_DISABLE: c_int = 42;

/// Turns transparent huge pages off for the process (Linux), unless `MIMALLOC_ALLOW_THP` is set
/// (then mimalloc's own option decides). mimalloc asks for huge pages on its whole arena
/// (`madvise(MADV_HUGEPAGE)`): a first touch then makes 2 MiB resident at once, and after the
/// idle task gave free pages back, the kernel's `khugepaged` (a pass every 10 s) collapsed each
/// 2 MiB range that still had one page in use back into a huge page, the pages given back
/// resident again as zeros: RSS rose by 20-30 MB within a minute of going idle, with no thread
/// of the process running. To be called at the start of `main`, before the threads start.
/// Gives whether they are off.
pub fn no_transparent_huge_pages() -> bool {
    #[cfg(target_os = "linux")]
    {
        if std::env::var_os("MIMALLOC_ALLOW_THP").is_some() {
            return false;
        }
        // SAFETY: these prctl options only read or set the process's THP flag; the unused
        // arguments are passed as 0 as the kernel requires.
        unsafe {
            let _ = prctl(
                PR_SET_THP_DISABLE,
                1 as std::ffi::c_ulong,
                0 as std::ffi::c_ulong,
                0 as std::ffi::c_ulong,
                0 as std::ffi::c_ulong,
            );
            prctl(
                PR_GET_THP_DISABLE,
                0 as std::ffi::c_ulong,
                0 as std::ffi::c_ulong,
                0 as std::ffi::c_ulong,
                0 as std::ffi::c_ulong,
            ) == 1
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

/// Whether transparent huge pages are off for this process (`THP_enabled: 0` in
/// `/proc/self/status`; false where it does not say).
pub fn transparent_huge_pages_off() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("THP_enabled:"))
                .map(|v| v.trim() == "0")
        })
        .unwrap_or(false)
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

/// Bumped each time the idle task asks the threads to collect.
static COLLECT_EPOCH: AtomicU64 = AtomicU64::new(0);
/// Times a thread collected because it was asked, since the start.
static THREAD_COLLECTIONS: AtomicU64 = AtomicU64::new(0);
/// Wakes the threads that wait in [`blocking_recv_collecting`].
static COLLECT_ASKED: Notify = Notify::const_new();

thread_local! {
    /// The last [`COLLECT_EPOCH`] this thread collected for.
    static SEEN_EPOCH: Cell<u64> = const { Cell::new(0) };
}

/// Asks every thread that calls [`collect_if_asked`] (or waits in [`blocking_recv_collecting`]) to hand
/// its free memory back once, at its next chance.
pub fn ask_threads_to_collect() {
    COLLECT_EPOCH.fetch_add(1, Ordering::Release);
    COLLECT_ASKED.notify_waiters();
}

/// Times a thread handed its free memory back because [`ask_threads_to_collect`] asked it.
pub fn thread_collections() -> u64 {
    THREAD_COLLECTIONS.load(Ordering::Relaxed)
}

/// Hands this thread's free mimalloc memory back when [`ask_threads_to_collect`] asked since
/// this thread last did, and says whether it did; otherwise one atomic load and a
/// thread-local read (cheap enough for a runtime's park hook).
pub fn collect_if_asked() -> bool {
    let epoch = COLLECT_EPOCH.load(Ordering::Acquire);
    if SEEN_EPOCH.with(|seen| seen.replace(epoch)) == epoch {
        return false;
    }
    // What each thread gave back is logged at debug level only (two reads of /proc).
    let logged = tracing::enabled!(tracing::Level::DEBUG);
    let before = logged.then(ProcessMemory::read).flatten();
    // SAFETY: mi_collect only frees what mimalloc holds unused (this thread's free pages, and
    // the purges it had delayed).
    unsafe { mi_collect(true) };
    THREAD_COLLECTIONS.fetch_add(1, Ordering::Relaxed);
    if let (Some(before), Some(after)) = (before, logged.then(ProcessMemory::read).flatten()) {
        tracing::debug!(
            thread = std::thread::current().name().unwrap_or("unnamed"),
            released_bytes = before.resident.saturating_sub(after.resident),
            resident = after.resident,
            "idle: thread gave its free memory back"
        );
    }
    true
}

/// Waits on this thread for the next message of `rx` (`None` once every sender is gone), like
/// [`mpsc::Receiver::blocking_recv`], and hands this thread's free memory back whenever
/// [`ask_threads_to_collect`] asks meanwhile. Not for a runtime's threads (it blocks).
pub fn blocking_recv_collecting<T>(rx: &mut mpsc::Receiver<T>) -> Option<T> {
    match rx.try_recv() {
        Ok(message) => return Some(message),
        Err(mpsc::error::TryRecvError::Disconnected) => return None,
        Err(mpsc::error::TryRecvError::Empty) => {}
    }
    loop {
        let mut asked = pin!(COLLECT_ASKED.notified());
        // Registered before the epoch is read: an ask after the read wakes this wait.
        asked.as_mut().enable();
        let _ = collect_if_asked();
        let next = block_on(std::future::poll_fn(|cx| {
            if let Poll::Ready(message) = rx.poll_recv(cx) {
                return Poll::Ready(Some(message));
            }
            asked.as_mut().poll(cx).map(|()| None)
        }));
        if let Some(message) = next {
            return message;
        }
    }
}

/// Wakes the thread that [`block_on`] parked.
struct ThreadWaker(std::thread::Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Runs `future` to completion on this thread, parking it between polls.
fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    let waker = Waker::from(Arc::new(ThreadWaker(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
        std::thread::park();
    }
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
                resident_anon: 0,
                resident_file: 0,
            })
        );
        let split = format!("{status}RssAnon:\t  700 kB\nRssFile:\t  300 kB\nRssShmem:\t 24 kB\n");
        assert_eq!(
            ProcessMemory::parse(&split),
            Some(ProcessMemory {
                resident: 1024 * 1024,
                peak_resident: 3072 * 1024,
                resident_anon: 700 * 1024,
                resident_file: 300 * 1024,
            })
        );
        if cfg!(target_os = "linux") {
            let now = ProcessMemory::read().expect("/proc/self/status");
            assert!(now.resident_anon > 0 && now.resident_file > 0, "{now:?}");
            assert!(now.resident_anon + now.resident_file <= now.resident + (1 << 20));
        }
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
        // 64 MiB in mimalloc, touched, then freed and collected. Tests running alongside
        // allocate and free at the same time, so the process-wide figure can only be held to
        // what this test keeps live, not to a rise from before.
        let big: Vec<Vec<u8>> = (0..64).map(|_| vec![1u8; 1 << 20]).collect();
        let holding = AllocatorMemory::read();
        assert!(
            holding.mimalloc_committed >= 64 << 20,
            "64 MiB live in mimalloc: {holding:?}"
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

    #[test]
    fn transparent_huge_pages_can_be_turned_off_and_say_so() {
        if !cfg!(target_os = "linux") || std::env::var_os("MIMALLOC_ALLOW_THP").is_some() {
            return;
        }
        assert!(no_transparent_huge_pages());
        assert!(transparent_huge_pages_off());
        // Memory touched from now on comes in small pages: 32 MiB, and the resident huge
        // pages do not grow by it.
        let before = anon_huge_page_bytes().expect("smaps_rollup says AnonHugePages");
        let touched = vec![1u8; 32 << 20];
        let after = anon_huge_page_bytes().unwrap();
        assert!(after < before + (16 << 20), "{before} -> {after}");
        assert_eq!(touched.iter().map(|&b| b as usize).sum::<usize>(), 32 << 20);
    }

    #[test]
    fn a_thread_collects_once_for_each_ask() {
        let _serial = crate::idle::TEST_SERIAL.blocking_lock();
        std::thread::spawn(|| {
            ask_threads_to_collect();
            assert!(
                collect_if_asked(),
                "asked before this thread ever collected"
            );
            assert!(!collect_if_asked(), "once per ask");
            ask_threads_to_collect();
            ask_threads_to_collect();
            assert!(collect_if_asked(), "asked again");
            assert!(!collect_if_asked(), "two asks meanwhile, one collection");
        })
        .join()
        .unwrap();
        // Another thread has not collected for the last ask yet.
        std::thread::spawn(|| assert!(collect_if_asked()))
            .join()
            .unwrap();
    }

    #[test]
    fn a_waiting_receiver_gets_every_message_and_collects_when_asked() {
        let _serial = crate::idle::TEST_SERIAL.blocking_lock();
        let (tx, mut rx) = mpsc::channel::<u32>(4);
        let (report, reports) = std::sync::mpsc::channel();
        let waiter = std::thread::spawn(move || {
            // Up to date with the asks so far: the first wait collects nothing.
            let _ = collect_if_asked();
            while let Some(n) = blocking_recv_collecting(&mut rx) {
                // Whether an ask is still pending for this thread after the message.
                let pending = SEEN_EPOCH.with(Cell::get) != COLLECT_EPOCH.load(Ordering::Acquire);
                report.send((n, pending)).unwrap();
            }
            report.send((u32::MAX, false)).unwrap();
        });
        // Messages sent before and while it waits, in order.
        tx.blocking_send(1).unwrap();
        tx.blocking_send(2).unwrap();
        assert_eq!(reports.recv().unwrap(), (1, false));
        assert_eq!(reports.recv().unwrap(), (2, false));
        // Asked while it waits: it wakes and collects without a message.
        let before = thread_collections();
        ask_threads_to_collect();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while thread_collections() == before && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(
            thread_collections() > before,
            "the waiting thread collected"
        );
        // Any other thread that waits the same way may have counted too: give this one time.
        std::thread::sleep(std::time::Duration::from_millis(200));
        tx.blocking_send(3).unwrap();
        assert_eq!(
            reports.recv().unwrap(),
            (3, false),
            "it collected for the ask"
        );
        // Senders gone: it ends.
        drop(tx);
        assert_eq!(reports.recv().unwrap(), (u32::MAX, false));
        waiter.join().unwrap();
    }
}
