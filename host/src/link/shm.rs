//! Shared memory as memfds: anonymous, handed to processes as file descriptors, so there is no
//! name in /dev/shm to leak or guess, and the memory is gone when the last descriptor closes.
#![allow(unsafe_code)]

use std::ffi::c_void;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::fs::{MemfdFlags, SealFlags};
use rustix::mm::{MapFlags, ProtFlags};

/// A shared mapping of a whole memfd.
pub struct SharedMemory {
    fd: OwnedFd,
    ptr: *mut c_void,
    len: usize,
}

// SAFETY: the mapping is plain shared memory; all concurrent access to it goes through atomics
// or through slots owned under the ring protocol.
unsafe impl Send for SharedMemory {}
// SAFETY: as above.
unsafe impl Sync for SharedMemory {}

impl SharedMemory {
    /// A new zero-filled memfd of `len` bytes, mapped. Its size is sealed so no process can
    /// shrink it under another's mapping.
    pub fn create(name: &str, len: usize) -> io::Result<SharedMemory> {
        let fd = rustix::fs::memfd_create(name, MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)?;
        rustix::fs::ftruncate(&fd, len as u64)?;
        rustix::fs::fcntl_add_seals(&fd, SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL)?;
        SharedMemory::map(fd, len)
    }

    /// Map a memfd received from another process, all of it.
    pub fn open(fd: OwnedFd) -> io::Result<SharedMemory> {
        let len = rustix::fs::fstat(&fd)?.st_size as usize;
        SharedMemory::map(fd, len)
    }

    fn map(fd: OwnedFd, len: usize) -> io::Result<SharedMemory> {
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty shared memory"));
        }
        // SAFETY: a fresh shared mapping of a file we hold; nothing else in this process refers
        // to that address range.
        let ptr = unsafe {
            rustix::mm::mmap(std::ptr::null_mut(), len, ProtFlags::READ | ProtFlags::WRITE, MapFlags::SHARED, &fd, 0)?
        };
        Ok(SharedMemory { fd, ptr, len })
    }

    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr as *mut u8
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Make the whole pages of `range` in this mapping read-only: a write there faults in this
    /// process instead of changing what other processes see. (A ring's slots start and end on
    /// 4 KiB bounds; where the page is larger, the parts of a page at either end stay writable.)
    pub fn protect_read_only(&self, range: std::ops::Range<usize>) -> io::Result<()> {
        let page = rustix::param::page_size();
        let start = range.start.next_multiple_of(page);
        let end = range.end.min(self.len) / page * page;
        if start >= end {
            return Ok(());
        }
        // SAFETY: start..end lies inside our mapping, on page bounds; this process only reads
        // it from now on, through raw pointers no Rust reference holds.
        unsafe {
            rustix::mm::mprotect(self.ptr.add(start).cast(), end - start, rustix::mm::MprotectFlags::READ)?;
        }
        Ok(())
    }
}

impl AsFd for SharedMemory {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl Drop for SharedMemory {
    fn drop(&mut self) {
        // SAFETY: unmapping the range mapped in `map`; references into it borrow `self`, so
        // none outlive this.
        if let Err(e) = unsafe { rustix::mm::munmap(self.ptr, self.len) } {
            tracing::warn!("munmap of shared memory failed: {e}");
        }
    }
}
