//! The process's memory allocator: dlmalloc behind a spin lock.
//!
//! `dlmalloc`'s own global allocator serialises every call through a `pthread` mutex and
//! checks each lock and unlock: on the static musl build that is two calls into the C
//! library per allocation, about 7% of the CPU time of a launch's policy resolution in a
//! profile (BENCHMARKS.md). Sandy's allocations come almost all from one thread at a
//! time (the supervisor's main thread; the observer's and relays' threads allocate
//! little), so an uncontended lock is the case to make cheap: one atomic exchange to take
//! it, one store to give it back. A thread that finds it taken spins briefly, then
//! yields its CPU to the holder (on a machine with few CPUs the holder may be waiting
//! for one).
//!
//! Fork: a child forked while another thread holds the lock would find it held for
//! ever. Sandy forks its bootstrap before it starts any thread, and the children it
//! starts later (`std::process::Command`) allocate nothing between their fork and their
//! `execve`, as with the mutex this replaces.

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicBool, Ordering};

/// The allocator: `#[global_allocator] static A: sandy_linux::sys::alloc::SpinDlmalloc`.
pub struct SpinDlmalloc;

/// Whether a thread is inside the heap.
static LOCKED: AtomicBool = AtomicBool::new(false);

/// The heap, only ever used with [`LOCKED`] held.
static mut HEAP: dlmalloc::Dlmalloc = dlmalloc::Dlmalloc::new();

/// Spins this many times on a taken lock before yielding the CPU.
const SPINS: u32 = 64;

/// Holds [`LOCKED`] while alive.
struct Held;

impl Held {
    #[inline]
    fn take() -> Held {
        let mut spins = 0u32;
        while LOCKED
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            while LOCKED.load(Ordering::Relaxed) {
                if spins < SPINS {
                    spins += 1;
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
        }
        Held
    }
}

impl Drop for Held {
    #[inline]
    fn drop(&mut self) {
        LOCKED.store(false, Ordering::Release);
    }
}

/// The heap, for a holder of the lock.
#[inline]
fn heap(_held: &Held) -> *mut dlmalloc::Dlmalloc {
    std::ptr::addr_of_mut!(HEAP)
}

// SAFETY: every method reaches HEAP only while holding LOCKED (taken with Acquire,
// released with Release), so no two threads use the heap at once and each sees the
// previous holder's writes; the calls forward GlobalAlloc's contract (sizes, alignments
// and pointers of earlier allocations) unchanged to dlmalloc, whose methods have the
// same requirements.
unsafe impl GlobalAlloc for SpinDlmalloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let held = Held::take();
        // SAFETY: the lock is held (see the impl's comment); layout is GlobalAlloc's.
        unsafe { (*heap(&held)).malloc(layout.size(), layout.align()) }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let held = Held::take();
        // SAFETY: as above; ptr came from this allocator with this layout.
        unsafe { (*heap(&held)).free(ptr, layout.size(), layout.align()) }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let held = Held::take();
        // SAFETY: as above.
        unsafe { (*heap(&held)).calloc(layout.size(), layout.align()) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let held = Held::take();
        // SAFETY: as above; ptr came from this allocator with this layout, and new_size
        // is non-zero and within isize::MAX once rounded (GlobalAlloc's contract).
        unsafe { (*heap(&held)).realloc(ptr, layout.size(), layout.align(), new_size) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Threads allocating and freeing at once through the allocator (not installed as
    /// the global one here): every block keeps what its thread wrote.
    #[test]
    fn concurrent_allocations_keep_their_contents() {
        let threads: Vec<_> = (0..4u8)
            .map(|t| {
                std::thread::spawn(move || {
                    let a = SpinDlmalloc;
                    for round in 0..2000usize {
                        let size = 1 + (round * 7 + usize::from(t)) % 300;
                        let layout = Layout::from_size_align(size, 8).unwrap();
                        // SAFETY: a non-zero layout; the block is written within its size,
                        // reallocated and freed with the layouts it was made with.
                        unsafe {
                            let p = a.alloc(layout);
                            assert!(!p.is_null());
                            std::ptr::write_bytes(p, t, size);
                            let q = a.realloc(p, layout, size * 2);
                            assert!(!q.is_null());
                            let s = std::slice::from_raw_parts(q, size);
                            assert!(s.iter().all(|&b| b == t));
                            a.dealloc(q, Layout::from_size_align(size * 2, 8).unwrap());
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert!(!LOCKED.load(Ordering::Relaxed));
    }
}
