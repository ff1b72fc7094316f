//! The process's allocator: mimalloc, and, built with the `count-allocations` feature, a count
//! of the bytes allocated and not yet freed (for benchmarks that measure what a request holds,
//! e.g. `examples/interp_bench`; the count costs an atomic add per call, so it is off by default).

use std::alloc::{GlobalAlloc, Layout};
#[cfg(feature = "count-allocations")]
use std::sync::atomic::{AtomicUsize, Ordering};

/// mimalloc, counting live bytes when the `count-allocations` feature is on.
pub struct Heap;

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

// SAFETY: every call goes to mimalloc with its arguments unchanged; the count is bookkeeping.
unsafe impl GlobalAlloc for Heap {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        grew(layout.size());
        // SAFETY: the caller's contract, passed on.
        unsafe { mimalloc::MiMalloc.alloc(layout) }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        shrank(layout.size());
        // SAFETY: the caller's contract, passed on.
        unsafe { mimalloc::MiMalloc.dealloc(ptr, layout) }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        grew(layout.size());
        // SAFETY: the caller's contract, passed on.
        unsafe { mimalloc::MiMalloc.alloc_zeroed(layout) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        grew(new_size);
        shrank(layout.size());
        // SAFETY: the caller's contract, passed on.
        unsafe { mimalloc::MiMalloc.realloc(ptr, layout, new_size) }
    }
}
