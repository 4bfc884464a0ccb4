//! [`Mode::TamperInputAt`](crate::faulty::Mode::TamperInputAt): hostile code in a consuming
//! stage tries to change the input frame it holds, which its link's other consumers read too.
//! It tries what any code in the process can: (a) map the memory the frame lies in again,
//! writable (`mmap(PROT_WRITE, MAP_SHARED)`), through every descriptor of this process open on
//! it, and through each of those opened again for writing by /proc/self/fd; (b) make its own
//! mapping of the frame writable (`mprotect`). Whatever succeeds writes the frame's first row
//! inverted. Returns one line per attempt, saying what it got.
//!
//! The unsafe code here is the attack under test: no plugin should contain any of it.
#![allow(unsafe_code)]

use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::MetadataExt;

use gpuipc_plugin_api::InputFrame;
use rustix::io::Errno;
use rustix::mm::{MapFlags, MprotectFlags, ProtFlags};

/// The mapping that holds an address, from /proc/self/maps.
struct Backing {
    start: usize,
    /// Offset of `start` in the file.
    offset: u64,
    dev: u64,
    inode: u64,
    path: String,
}

pub fn tamper(input: &InputFrame<'_>) -> Vec<String> {
    let row = input.plane(0).expect("a cpu frame").row(0);
    let addr = row.as_ptr() as usize;
    let inverted: Vec<u8> = row.iter().map(|b| !b).collect();
    let Some(backing) = backing_of(addr) else {
        return vec![format!("no mapping in /proc/self/maps holds the input at {addr:#x}")];
    };
    let mut report = Vec::new();
    let fds = descriptors_of(&backing);
    if fds.is_empty() {
        report.push(format!(
            "mmap(PROT_WRITE) of the input's memory: no descriptor of {} is open in this process",
            backing.path
        ));
    }
    for (fd, file) in &fds {
        let at = backing.offset + (addr - backing.start) as u64;
        report.push(format!(
            "mmap(PROT_WRITE) of fd {fd} ({}): {}",
            backing.path,
            outcome(map_and_write(file.as_fd(), at, &inverted))
        ));
        let reopened = std::fs::OpenOptions::new().read(true).write(true).open(format!("/proc/self/fd/{fd}"));
        let got = match reopened {
            Ok(file) => match map_and_write(file.as_fd(), at, &inverted) {
                Ok(()) => "opened, and mmap(PROT_WRITE) of it succeeded: wrote the frame".to_owned(),
                Err(e) => format!("opened, but mmap(PROT_WRITE) of it was {}", refusal(e)),
            },
            Err(e) => format!(
                "refused ({})",
                e.raw_os_error().map_or_else(|| e.to_string(), |n| name(Errno::from_raw_os_error(n)))
            ),
        };
        report.push(format!("open(/proc/self/fd/{fd}, O_RDWR): {got}"));
    }
    report.push(format!(
        "mprotect(PROT_READ|PROT_WRITE) of the input's page: {}",
        outcome(protect_and_write(addr, &inverted))
    ));
    report
}

fn outcome(result: Result<(), Errno>) -> String {
    match result {
        Ok(()) => "succeeded: wrote the frame".to_owned(),
        Err(e) => refusal(e),
    }
}

fn refusal(e: Errno) -> String {
    format!("refused ({})", name(e))
}

fn name(e: Errno) -> String {
    match e {
        Errno::ACCESS => "EACCES".to_owned(),
        Errno::PERM => "EPERM".to_owned(),
        other => format!("errno {}", other.raw_os_error()),
    }
}

fn backing_of(addr: usize) -> Option<Backing> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines().find_map(|line| {
        // start-end perms offset major:minor inode path
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (start, end) = fields.first()?.split_once('-')?;
        let (start, end) = (usize::from_str_radix(start, 16).ok()?, usize::from_str_radix(end, 16).ok()?);
        if !(start..end).contains(&addr) {
            return None;
        }
        let (major, minor) = fields.get(3)?.split_once(':')?;
        Some(Backing {
            start,
            offset: u64::from_str_radix(fields.get(2)?, 16).ok()?,
            dev: rustix::fs::makedev(u32::from_str_radix(major, 16).ok()?, u32::from_str_radix(minor, 16).ok()?),
            inode: fields.get(4)?.parse().ok()?,
            path: fields.get(5..).map(|p| p.join(" ")).unwrap_or_default(),
        })
    })
}

/// Every descriptor of this process open on the file `backing` maps, with a copy of each.
fn descriptors_of(backing: &Backing) -> Vec<(u32, std::fs::File)> {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else { return Vec::new() };
    dir.flatten()
        .filter_map(|e| {
            let fd: u32 = e.file_name().to_str()?.parse().ok()?;
            let meta = std::fs::metadata(e.path()).ok()?;
            if (meta.dev(), meta.ino()) != (backing.dev, backing.inode) {
                return None;
            }
            // A copy that stays open while we try it (read_dir's own descriptor comes and goes).
            let copy = rustix::io::fcntl_dupfd_cloexec(borrow_listed(fd)?, 0).ok()?;
            Some((fd, std::fs::File::from(copy)))
        })
        .collect()
}

/// Descriptor `fd` of this process, borrowed.
fn borrow_listed(fd: u32) -> Option<BorrowedFd<'static>> {
    let fd = i32::try_from(fd).ok()?;
    // SAFETY: none needed beyond this: `fd` was listed in /proc/self/fd a moment ago, and the
    // borrow is used at once to duplicate it (a descriptor closed meanwhile fails with EBADF).
    Some(unsafe { BorrowedFd::borrow_raw(fd) })
}

/// Map the whole file `fd` shared and writable, write `bytes` at `at`.
fn map_and_write(fd: BorrowedFd<'_>, at: u64, bytes: &[u8]) -> Result<(), Errno> {
    let len = rustix::fs::fstat(fd)?.st_size as usize;
    if at as usize + bytes.len() > len {
        return Err(Errno::RANGE);
    }
    // SAFETY: the attack: a new shared mapping of memory other processes read.
    let ptr = unsafe {
        rustix::mm::mmap(std::ptr::null_mut(), len, ProtFlags::READ | ProtFlags::WRITE, MapFlags::SHARED, fd, 0)?
    };
    // SAFETY: the attack: `at..at + bytes.len()` is inside the mapping (checked above).
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), (ptr as *mut u8).add(at as usize), bytes.len());
        rustix::mm::munmap(ptr, len)?;
    }
    Ok(())
}

/// Make the pages holding `addr..addr + bytes.len()` writable in this process's own mapping,
/// and write `bytes` there.
fn protect_and_write(addr: usize, bytes: &[u8]) -> Result<(), Errno> {
    let page = rustix::param::page_size();
    let start = addr / page * page;
    let len = (addr + bytes.len()).next_multiple_of(page) - start;
    // SAFETY: the attack: the pages of the input frame, which this stage was given to read.
    unsafe {
        rustix::mm::mprotect(start as *mut _, len, MprotectFlags::READ | MprotectFlags::WRITE)?;
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), addr as *mut u8, bytes.len());
    }
    Ok(())
}
