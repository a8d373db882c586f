//! The guest's global allocator: a bump arena in front of the system allocator.
//!
//! The host instantiates a plugin afresh for every call and throws the instance away after
//! it, so a call's allocations never need to be reused by a later call. The first
//! [`ARENA_BYTES`] of them are therefore served by bumping a pointer through a static
//! (zero-initialised, so `.bss`) buffer: no free lists, and, because the buffer is part of
//! the module's initial memory, no `memory.grow` (each of which costs the host an
//! `mprotect`, and the fresh instance starts at the initial size again). Freeing or
//! growing the newest block works in place; other frees inside the arena are no-ops.
//! Requests that don't fit go to Rust's default wasm allocator (`dlmalloc`), so a call
//! that allocates a lot still runs, with at most [`ARENA_BYTES`] set aside.
//!
//! Built only for `wasm32` without threads (a plugin is single-threaded); native builds of
//! the sdk (tests, the native benchmark) keep the system allocator. A plugin that wants
//! another allocator turns off the sdk's default feature `call-arena`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::UnsafeCell;

/// Bytes served from the arena before falling back to the system allocator.
pub const ARENA_BYTES: usize = 256 << 10;

#[repr(C, align(16))]
struct Buffer([u8; ARENA_BYTES]);

/// The allocator installed as `#[global_allocator]` by the sdk.
pub struct CallArena {
    buffer: UnsafeCell<Buffer>,
    /// Offset of the first free byte in `buffer`.
    next: UnsafeCell<usize>,
}

// SAFETY: the guest has one thread (wasm32 without the `atomics` feature), so the cells
// are never accessed concurrently.
unsafe impl Sync for CallArena {}

impl CallArena {
    const fn new() -> Self {
        Self {
            buffer: UnsafeCell::new(Buffer([0; ARENA_BYTES])),
            next: UnsafeCell::new(0),
        }
    }

    fn base(&self) -> usize {
        self.buffer.get() as usize
    }

    /// The offset of `ptr` in the buffer, if it points into it.
    fn offset_of(&self, ptr: *mut u8) -> Option<usize> {
        let off = (ptr as usize).checked_sub(self.base())?;
        (off < ARENA_BYTES).then_some(off)
    }

    /// A block of `layout` from the arena, or `None` when it doesn't fit.
    ///
    /// # Safety
    /// No other reference to `next` may be alive (single-threaded guest, no reentrancy).
    unsafe fn bump(&self, layout: Layout) -> Option<*mut u8> {
        // SAFETY: see the function's contract.
        let next = unsafe { &mut *self.next.get() };
        let base = self.base();
        let start = (base + *next).checked_next_multiple_of(layout.align())? - base;
        let end = start.checked_add(layout.size())?;
        if end > ARENA_BYTES {
            return None;
        }
        *next = end;
        Some(self.buffer.get().cast::<u8>().wrapping_add(start))
    }
}

// SAFETY: blocks handed out never overlap (the bump offset only moves back over the newest
// block, when it is freed or resized), are aligned as asked, and stay valid until freed;
// pointers outside the buffer are the system allocator's and go back to it.
unsafe impl GlobalAlloc for CallArena {
    #[inline(never)]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: single-threaded, and `bump` holds no reference past its return.
        match unsafe { self.bump(layout) } {
            Some(p) => p,
            // SAFETY: forwarded with the caller's guarantees.
            None => unsafe { System.alloc(layout) },
        }
    }

    #[inline(never)]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        match self.offset_of(ptr) {
            Some(off) => {
                // SAFETY: single-threaded; no other reference to `next` is alive.
                let next = unsafe { &mut *self.next.get() };
                if off + layout.size() == *next {
                    *next = off;
                }
            }
            // SAFETY: `ptr` came from `System.alloc` with this layout.
            None => unsafe { System.dealloc(ptr, layout) },
        }
    }

    #[inline(never)]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let Some(off) = self.offset_of(ptr) else {
            // SAFETY: `ptr` came from `System.alloc` with this layout.
            return unsafe { System.realloc(ptr, layout, new_size) };
        };
        {
            // SAFETY: single-threaded; this reference ends with the block.
            let next = unsafe { &mut *self.next.get() };
            if off + layout.size() == *next {
                // The newest block: grow or shrink it in place when it still fits.
                if let Some(end) = off.checked_add(new_size).filter(|e| *e <= ARENA_BYTES) {
                    *next = end;
                    return ptr;
                }
            } else if new_size <= layout.size() {
                return ptr;
            }
        }
        // SAFETY: `GlobalAlloc::realloc`'s contract makes this layout valid.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        // SAFETY: forwarded with the caller's guarantees.
        let new = unsafe { self.alloc(new_layout) };
        if !new.is_null() {
            // SAFETY: both blocks are valid for the copied length and don't overlap.
            unsafe {
                std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
        }
        new
    }
}

#[global_allocator]
static ALLOCATOR: CallArena = CallArena::new();
