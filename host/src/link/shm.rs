//! Shared memory as memfds: anonymous, handed to processes as file descriptors, so there is no
//! name in /dev/shm to leak or guess, and the memory is gone when the last descriptor closes.
//!
//! Memory another process must not write reaches it through [`SharedMemory::read_only_fd`], a
//! descriptor open for reading only, which that process maps with [`Mapping::read_only`] and
//! does not keep: the mapping cannot be made writable (`mprotect` is refused, EACCES), and the
//! process holds no descriptor to map again or to reopen for writing through /proc/self/fd.
#![allow(unsafe_code)]

use std::ffi::c_void;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use rustix::fs::{MemfdFlags, SealFlags};
use rustix::mm::{MapFlags, ProtFlags};

/// A shared mapping, unmapped when dropped. It holds no descriptor of the memory.
pub struct Mapping {
    ptr: *mut c_void,
    len: usize,
}

// SAFETY: the mapping is plain shared memory; all concurrent access to it goes through atomics
// or through slots owned under the ring protocol.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Map all of the memfd `fd` for reading only, and close `fd`. `fd` must be open for
    /// reading only ([`SharedMemory::read_only_fd`]; refused otherwise): then the kernel lets
    /// no one make this mapping writable, and with `fd` closed this process keeps no way to
    /// the memory but the mapping.
    pub fn read_only(fd: OwnedFd) -> io::Result<Mapping> {
        if rustix::fs::fcntl_getfl(&fd)? & rustix::fs::OFlags::RWMODE != rustix::fs::OFlags::RDONLY {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "the descriptor is open for writing, not for reading only",
            ));
        }
        let len = rustix::fs::fstat(&fd)?.st_size as usize;
        Mapping::shared(fd.as_fd(), len, ProtFlags::READ)
    }

    fn shared(fd: BorrowedFd<'_>, len: usize, prot: ProtFlags) -> io::Result<Mapping> {
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty shared memory"));
        }
        // SAFETY: a fresh shared mapping of a file we hold; nothing else in this process refers
        // to that address range.
        let ptr = unsafe { rustix::mm::mmap(std::ptr::null_mut(), len, prot, MapFlags::SHARED, fd, 0)? };
        Ok(Mapping { ptr, len })
    }

    /// The first byte. A mapping made by [`Mapping::read_only`] faults on any write through it.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr as *mut u8
    }

    pub fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmapping the range mapped in `shared`; references into it borrow `self`, so
        // none outlive this.
        if let Err(e) = unsafe { rustix::mm::munmap(self.ptr, self.len) } {
            tracing::warn!("munmap of shared memory failed: {e}");
        }
    }
}

/// A memfd and a read-write shared mapping of all of it.
pub struct SharedMemory {
    fd: OwnedFd,
    map: Mapping,
}

impl SharedMemory {
    /// A new zero-filled memfd of `len` bytes, mapped. Its size is sealed so no process can
    /// shrink it under another's mapping.
    pub fn create(name: &str, len: usize) -> io::Result<SharedMemory> {
        let fd = rustix::fs::memfd_create(name, MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)?;
        rustix::fs::ftruncate(&fd, len as u64)?;
        rustix::fs::fcntl_add_seals(&fd, SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL)?;
        SharedMemory::map(fd, len)
    }

    /// Map a memfd received from another process, all of it, read-write.
    pub fn open(fd: OwnedFd) -> io::Result<SharedMemory> {
        let len = rustix::fs::fstat(&fd)?.st_size as usize;
        SharedMemory::map(fd, len)
    }

    fn map(fd: OwnedFd, len: usize) -> io::Result<SharedMemory> {
        let map = Mapping::shared(fd.as_fd(), len, ProtFlags::READ | ProtFlags::WRITE)?;
        Ok(SharedMemory { fd, map })
    }

    /// A new descriptor of this memory, open for reading only: a new open of the memfd through
    /// /proc/self/fd (a descriptor of its own, not a copy of ours), which `mmap` with
    /// `PROT_WRITE` and `MAP_SHARED` refuses (EACCES), and so does `mprotect` to writable of a
    /// shared mapping made through it. Whoever holds it can still open it again for writing
    /// through its own /proc/self/fd (the memfd belongs to this user): a process that must
    /// not write the memory maps it with [`Mapping::read_only`], which closes it.
    pub fn read_only_fd(&self) -> io::Result<OwnedFd> {
        let path = format!("/proc/self/fd/{}", self.fd.as_raw_fd());
        let fd: OwnedFd = std::fs::File::open(&path)
            .map_err(|e| {
                io::Error::new(e.kind(), format!("cannot open {path} again for reading (is /proc mounted?): {e}"))
            })?
            .into();
        // The same memory, not whatever else /proc/self/fd may be made to show.
        let (ours, theirs) = (rustix::fs::fstat(&self.fd)?, rustix::fs::fstat(&fd)?);
        if (ours.st_dev, ours.st_ino) != (theirs.st_dev, theirs.st_ino) {
            return Err(io::Error::other(format!("{path} opened another file than the memfd")));
        }
        Ok(fd)
    }

    pub fn as_ptr(&self) -> *mut u8 {
        self.map.as_ptr()
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }
}

impl AsFd for SharedMemory {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use rustix::io::Errno;
    use rustix::mm::MprotectFlags;

    use super::*;

    /// How many descriptors of this process are open on the file `fd` is open on.
    fn descriptors_of(fd: BorrowedFd<'_>) -> usize {
        let file = rustix::fs::fstat(fd).unwrap();
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .flatten()
            .filter(|e| std::fs::metadata(e.path()).is_ok_and(|m| (m.dev(), m.ino()) == (file.st_dev, file.st_ino)))
            .count()
    }

    #[test]
    fn a_read_only_descriptor_maps_only_for_reading_and_for_good() {
        let memory = SharedMemory::create("gpuipc-test-shm", 8192).unwrap();
        let read_only = memory.read_only_fd().unwrap();
        // SAFETY: (test) a fresh mapping, if the kernel made one; it is not used.
        let writable = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                8192,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED,
                &read_only,
                0,
            )
        };
        assert_eq!(
            writable.err(),
            Some(Errno::ACCESS),
            "mmap(PROT_WRITE, MAP_SHARED) of a descriptor open for reading"
        );
        let mapping = Mapping::read_only(read_only).unwrap();
        // SAFETY: (test) the whole of `mapping`, on page bounds; nothing writes it if it fails.
        let made_writable =
            unsafe { rustix::mm::mprotect(mapping.as_ptr().cast(), 8192, MprotectFlags::READ | MprotectFlags::WRITE) };
        assert_eq!(made_writable.err(), Some(Errno::ACCESS), "mprotect(PROT_WRITE) of the read-only mapping");
        // What the writer writes, the reader reads.
        // SAFETY: (test) both mappings are 8192 bytes of the same memory; only this thread uses them.
        unsafe {
            memory.as_ptr().add(4100).write(7);
            assert_eq!(mapping.as_ptr().add(4100).read(), 7);
        }
    }

    #[test]
    fn a_read_only_mapping_keeps_no_descriptor_and_takes_no_writable_one() {
        let memory = SharedMemory::create("gpuipc-test-shm", 4096).unwrap();
        let read_only = memory.read_only_fd().unwrap();
        assert_eq!(descriptors_of(memory.as_fd()), 2);
        // Held, the descriptor could be opened again for writing through /proc/self/fd (the
        // memfd is this user's): the mapping closes it.
        let mapping = Mapping::read_only(read_only).unwrap();
        assert_eq!(descriptors_of(memory.as_fd()), 1, "only the writer's own");
        assert_eq!(mapping.len(), 4096);
        let writable = memory.as_fd().try_clone_to_owned().unwrap();
        let err = Mapping::read_only(writable).err().unwrap();
        assert_eq!(err.kind(), io::ErrorKind::PermissionDenied, "{err}");
    }
}
