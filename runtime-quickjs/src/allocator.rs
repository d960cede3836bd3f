//! The allocator of a QuickJS runtime: Rust's global allocator (rquickjs's `RustAllocator`),
//! counting what QuickJS holds and refusing an allocation past the heap limit itself, so that a
//! refusal is known for what it is. (With QuickJS's own limit, a built-in that runs out, such as
//! a global `match` building its result, may throw a bare `null` instead of an error, and the
//! temporary that filled the heap is freed before the runtime can tell.)
//!
//! The one module of this crate with `unsafe` code: rquickjs's `Allocator` trait is unsafe to
//! implement, and its methods take raw pointers. Every call is passed on to `RustAllocator`
//! unchanged, with the rules the trait states: a pointer handed to `dealloc`, `realloc` or
//! `usable_size` was returned by this allocator (so by `RustAllocator`), and a refused allocation
//! is a null pointer that leaves everything as it was.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use rquickjs::allocator::{Allocator, RustAllocator};

/// Rust's global allocator, held to a limit: [`Allocator`] for one QuickJS runtime.
pub(crate) struct LimitedAllocator {
    /// The bytes QuickJS holds now (usable sizes).
    held: usize,
    limit: usize,
    /// Set for good once an allocation is refused for the limit.
    refused: Arc<AtomicBool>,
}

impl LimitedAllocator {
    /// An allocator refusing past `limit` bytes, and the flag it sets when it does.
    pub(crate) fn new(limit: usize) -> (Self, Arc<AtomicBool>) {
        let refused = Arc::new(AtomicBool::new(false));
        let allocator = LimitedAllocator {
            held: 0,
            limit,
            refused: Arc::clone(&refused),
        };
        (allocator, refused)
    }

    /// Whether `more` bytes fit under the limit; records a refusal when they do not.
    fn admit(&mut self, more: usize) -> bool {
        let fits = self
            .held
            .checked_add(more)
            .is_some_and(|total| total <= self.limit);
        if !fits {
            self.refused.store(true, Ordering::Relaxed);
        }
        fits
    }

    /// Counts what `ptr` holds, if it is an allocation.
    fn count(&mut self, ptr: *mut u8) -> *mut u8 {
        if !ptr.is_null() {
            // SAFETY: `ptr` was just returned, not null, by `RustAllocator`.
            self.held += unsafe { RustAllocator::usable_size(ptr) };
        }
        ptr
    }
}

// SAFETY: every method passes its call on to `RustAllocator`, which upholds the trait's rules;
// this one only refuses (a null pointer, as the trait allows) before asking it, and counts.
unsafe impl Allocator for LimitedAllocator {
    fn alloc(&mut self, size: usize) -> *mut u8 {
        if !self.admit(size) {
            return std::ptr::null_mut();
        }
        let ptr = RustAllocator.alloc(size);
        self.count(ptr)
    }

    fn calloc(&mut self, count: usize, size: usize) -> *mut u8 {
        // `RustAllocator` panics on an overflowing size: refused here instead.
        let Some(total) = count.checked_mul(size) else {
            return std::ptr::null_mut();
        };
        if !self.admit(total) {
            return std::ptr::null_mut();
        }
        let ptr = RustAllocator.calloc(count, size);
        self.count(ptr)
    }

    unsafe fn dealloc(&mut self, ptr: *mut u8) {
        if ptr.is_null() {
            return;
        }
        // SAFETY: the caller hands back a pointer of this allocator, so of `RustAllocator`.
        unsafe {
            self.held = self.held.saturating_sub(RustAllocator::usable_size(ptr));
            RustAllocator.dealloc(ptr);
        }
    }

    unsafe fn realloc(&mut self, ptr: *mut u8, new_size: usize) -> *mut u8 {
        if ptr.is_null() {
            return self.alloc(new_size);
        }
        // SAFETY: the caller hands over a pointer of this allocator, so of `RustAllocator`; a
        // refused or failed reallocation leaves it as it was, as `realloc` does.
        unsafe {
            let old = RustAllocator::usable_size(ptr);
            if new_size > old && !self.admit(new_size - old) {
                return std::ptr::null_mut();
            }
            let moved = RustAllocator.realloc(ptr, new_size);
            if !moved.is_null() {
                self.held = self.held.saturating_sub(old) + RustAllocator::usable_size(moved);
            }
            moved
        }
    }

    unsafe fn usable_size(ptr: *mut u8) -> usize {
        // SAFETY: the caller hands over a pointer of this allocator, so of `RustAllocator`.
        unsafe { RustAllocator::usable_size(ptr) }
    }
}
