//! The process's allocator: mimalloc, and, built with the `count-allocations` feature, a count
//! of the bytes allocated and not yet freed (for benchmarks that measure what a request holds,
//! e.g. `examples/interp_bench`; the count costs an atomic add per call, so it is off by default).
//!
//! mimalloc is built without asking for transparent huge pages (`libmimalloc-sys`'s `no_thp`):
//! by default it advises the kernel to back its memory with 2 MiB pages, and the first touch of
//! such a page zeroes all of it at once. A continuation's next-step read that needed fresh memory
//! then spent 3.4 ms of its 6.2 ms zeroing a huge page, and the next-step p99 of some format went
//! past 5 ms in every run (examples/README.md, "Memory zeroed 2 MiB at a time").

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;

use libmimalloc_sys::{
    mi_free, mi_malloc, mi_malloc_aligned, mi_realloc, mi_realloc_aligned, mi_zalloc,
    mi_zalloc_aligned,
};
#[cfg(feature = "count-allocations")]
use std::sync::atomic::{AtomicUsize, Ordering};

/// mimalloc, counting live bytes when the `count-allocations` feature is on.
pub struct Heap;

/// The alignment every block of mimalloc's plain `mi_malloc` has when it is larger than a word:
/// its size classes are 8 bytes and then multiples of 16, and each page's first block is
/// 16-aligned (C's `max_align_t`).
const PLAIN_ALIGN: usize = 16;

/// True when mimalloc's plain allocation of `size` bytes is aligned to `align`: `align` is at
/// most [`PLAIN_ALIGN`] and no larger than the size (a block of 8 bytes or less is 8-aligned).
///
/// Nearly every Rust allocation is so. Asking `mi_malloc_aligned` for those (what the
/// `mimalloc` crate's allocator does for every call) costs more than the call: for a size that
/// is not a power of two, whenever the size class's current page has no free block at hand,
/// mimalloc v3 takes its over-allocating path, which serves the request from a larger size
/// class (a 48-byte request gets a 64-byte block) and marks the page as holding interior
/// pointers. That path was 2.4 % of the server's CPU under agent-span load.
#[inline]
fn plain(size: usize, align: usize) -> bool {
    align <= PLAIN_ALIGN && align <= size
}

#[cfg(feature = "count-allocations")]
static LIVE: AtomicUsize = AtomicUsize::new(0);

#[inline]
fn grew(_bytes: usize) {
    #[cfg(feature = "count-allocations")]
    LIVE.fetch_add(_bytes, Ordering::Relaxed);
}

#[inline]
fn shrank(_bytes: usize) {
    #[cfg(feature = "count-allocations")]
    LIVE.fetch_sub(_bytes, Ordering::Relaxed);
}

/// Bytes allocated and not yet freed, when built with the `count-allocations` feature.
pub fn live_bytes() -> Option<usize> {
    #[cfg(feature = "count-allocations")]
    return Some(LIVE.load(Ordering::Relaxed));
    #[cfg(not(feature = "count-allocations"))]
    None
}

// SAFETY: every call goes to mimalloc: to its plain calls only where their blocks have the
// layout's alignment ([`plain`]), else to its aligned calls; the count is bookkeeping. A block
// is reallocated by the same kind of call that allocated it (Rust reallocates with the layout
// it allocated with), and mimalloc frees either kind with `mi_free`.
unsafe impl GlobalAlloc for Heap {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        grew(layout.size());
        // SAFETY: the caller's contract, passed on; `plain` guarantees the alignment.
        unsafe {
            if plain(layout.size(), layout.align()) {
                mi_malloc(layout.size()).cast()
            } else {
                mi_malloc_aligned(layout.size(), layout.align()).cast()
            }
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        shrank(layout.size());
        // SAFETY: the caller's contract, passed on.
        unsafe { mi_free(ptr.cast::<c_void>()) }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        grew(layout.size());
        // SAFETY: the caller's contract, passed on; `plain` guarantees the alignment.
        unsafe {
            if plain(layout.size(), layout.align()) {
                mi_zalloc(layout.size()).cast()
            } else {
                mi_zalloc_aligned(layout.size(), layout.align()).cast()
            }
        }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        grew(new_size);
        shrank(layout.size());
        // SAFETY: the caller's contract, passed on; `plain` guarantees the alignment.
        unsafe {
            if plain(new_size, layout.align()) {
                mi_realloc(ptr.cast::<c_void>(), new_size).cast()
            } else {
                mi_realloc_aligned(ptr.cast::<c_void>(), new_size, layout.align()).cast()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every layout gets a block with its alignment, through the plain and the aligned calls,
    /// allocated, zeroed and reallocated (grown and shrunk across the two kinds), and its bytes
    /// are kept by a reallocation.
    #[test]
    fn every_block_has_its_layouts_alignment() {
        let heap = Heap;
        for align in [1usize, 2, 4, 8, 16, 32, 64, 4096] {
            for size in (1usize..=2100).step_by(7).chain([4096, 70_000]) {
                let size = size.next_multiple_of(align);
                let layout = Layout::from_size_align(size, align).expect("layout");
                // SAFETY: a non-zero size; each block is freed once, with its layout.
                unsafe {
                    let p = heap.alloc(layout);
                    assert!(
                        !p.is_null() && (p as usize).is_multiple_of(align),
                        "{size} {align}"
                    );
                    p.write_bytes(0xa5, size);
                    let grown = (size * 3).next_multiple_of(align);
                    let q = heap.realloc(p, layout, grown);
                    assert!(
                        !q.is_null() && (q as usize).is_multiple_of(align),
                        "{grown} {align}"
                    );
                    assert!((0..size).all(|i| *q.add(i) == 0xa5));
                    let grown_layout = Layout::from_size_align(grown, align).expect("layout");
                    let shrunk = align.max(8);
                    let r = heap.realloc(q, grown_layout, shrunk);
                    assert!(
                        !r.is_null() && (r as usize).is_multiple_of(align),
                        "{shrunk} {align}"
                    );
                    assert!((0..shrunk.min(size)).all(|i| *r.add(i) == 0xa5));
                    heap.dealloc(r, Layout::from_size_align(shrunk, align).expect("layout"));
                    let z = heap.alloc_zeroed(layout);
                    assert!(
                        !z.is_null() && (z as usize).is_multiple_of(align),
                        "{size} {align}"
                    );
                    assert!((0..size).all(|i| *z.add(i) == 0));
                    heap.dealloc(z, layout);
                }
            }
        }
    }

    /// With the kernel's transparent huge pages on request only (`madvise`), touching 64 MiB
    /// of fresh blocks leaves no huge page: mimalloc does not request them (`no_thp`). Under
    /// another setting (`always` gives them unasked, `never` never) there is nothing to check.
    #[test]
    fn fresh_memory_is_not_backed_by_huge_pages() {
        let mode = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled");
        if !mode.is_ok_and(|m| m.contains("[madvise]")) {
            eprintln!("transparent huge pages are not on request here: nothing to check");
            return;
        }
        let heap = Heap;
        let layout = Layout::from_size_align(4 << 20, 8).expect("layout");
        // SAFETY: a non-zero size; each block is written within it and freed once.
        let blocks: Vec<*mut u8> = (0..16)
            .map(|_| unsafe {
                let p = heap.alloc(layout);
                assert!(!p.is_null());
                p.write_bytes(1, layout.size());
                p
            })
            .collect();
        let rollup = std::fs::read_to_string("/proc/self/smaps_rollup").expect("smaps_rollup");
        for p in blocks {
            // SAFETY: allocated above with `layout`.
            unsafe { heap.dealloc(p, layout) };
        }
        let huge = rollup
            .lines()
            .find_map(|l| l.strip_prefix("AnonHugePages:"))
            .map(|v| v.trim().to_string());
        assert_eq!(huge.as_deref(), Some("0 kB"), "{rollup}");
    }

    #[test]
    fn plain_calls_serve_only_alignments_their_blocks_have() {
        assert!(plain(1, 1) && plain(8, 8) && plain(24, 8) && plain(48, 16));
        assert!(!plain(4, 8) && !plain(8, 16) && !plain(64, 32) && !plain(4096, 4096));
    }
}
