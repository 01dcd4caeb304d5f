//! Out of memory is an error, not an abort. Rust's default reaction to a failed allocation is
//! `abort()` (exit 134, a core, the output's staged files left behind); qdqc's allocator instead
//! prints one line, removes the files this run staged and exits 1. Every large buffer qdqc
//! allocates goes through here, so `ulimit -v` below what a model needs gives that line.

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Write;

pub struct ExitOnOom;

// SAFETY: every call is forwarded to the system allocator unchanged; a null result (failure)
// never returns to the caller.
unsafe impl GlobalAlloc for ExitOnOom {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        checked(unsafe { System.alloc(layout) }, layout.size())
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        checked(unsafe { System.alloc_zeroed(layout) }, layout.size())
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        checked(unsafe { System.realloc(ptr, layout, new_size) }, new_size)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

fn checked(ptr: *mut u8, size: usize) -> *mut u8 {
    if ptr.is_null() {
        out_of_memory(size);
    }
    ptr
}

#[cold]
fn out_of_memory(size: usize) -> ! {
    // Formatted on the stack: the heap just said no.
    let mut line = [0u8; 160];
    let mut cursor = std::io::Cursor::new(&mut line[..]);
    let _ = writeln!(cursor, "qdqc: error: out of memory: an allocation of {size} bytes failed (raise the memory limit)");
    let n = cursor.position() as usize;
    let _ = std::io::stderr().write_all(&line[..n]);
    qdqc::remove_pending_unless_busy();
    std::process::exit(1);
}
