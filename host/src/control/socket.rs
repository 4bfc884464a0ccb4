//! A SOCK_SEQPACKET Unix socket carrying one JSON message per datagram, with file
//! descriptors attached through SCM_RIGHTS.

use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags, SocketFlags, SocketType,
};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Largest message; setup messages are a few kilobytes.
const MAX_MESSAGE: usize = 1 << 16;
/// Most descriptors in one message.
const MAX_FDS: usize = 64;

#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    #[error("control socket: {0}")]
    Io(#[from] std::io::Error),
    #[error("control socket closed by the other end")]
    Closed,
    #[error("control socket: malformed message: {0}")]
    Malformed(String),
}

impl From<rustix::io::Errno> for SocketError {
    fn from(e: rustix::io::Errno) -> SocketError {
        SocketError::Io(e.into())
    }
}

/// One end of a control socket.
#[derive(Debug)]
pub struct ControlSocket {
    fd: OwnedFd,
}

impl ControlSocket {
    /// A connected pair (both close-on-exec; the host maps one into the child explicitly).
    pub fn pair() -> Result<(ControlSocket, ControlSocket), SocketError> {
        let (a, b) = rustix::net::socketpair(AddressFamily::UNIX, SocketType::SEQPACKET, SocketFlags::CLOEXEC, None)?;
        Ok((ControlSocket { fd: a }, ControlSocket { fd: b }))
    }

    pub fn from_fd(fd: OwnedFd) -> ControlSocket {
        ControlSocket { fd }
    }

    pub fn into_fd(self) -> OwnedFd {
        self.fd
    }

    /// Send `message` with `fds` attached.
    pub fn send<T: Serialize>(&self, message: &T, fds: &[BorrowedFd<'_>]) -> Result<(), SocketError> {
        let bytes = serde_json::to_vec(message).map_err(|e| SocketError::Malformed(e.to_string()))?;
        if bytes.len() > MAX_MESSAGE || fds.len() > MAX_FDS {
            return Err(SocketError::Malformed(format!("{} bytes and {} descriptors is too large", bytes.len(), fds.len())));
        }
        let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
        let mut ancillary = SendAncillaryBuffer::new(&mut space);
        if !fds.is_empty() && !ancillary.push(SendAncillaryMessage::ScmRights(fds)) {
            return Err(SocketError::Malformed("descriptors do not fit".into()));
        }
        rustix::net::sendmsg(&self.fd, &[IoSlice::new(&bytes)], &mut ancillary, SendFlags::NOSIGNAL)?;
        Ok(())
    }

    /// Receive one message and the descriptors that came with it. Blocks.
    pub fn recv<T: DeserializeOwned>(&self) -> Result<(T, Vec<OwnedFd>), SocketError> {
        self.recv_with(RecvFlags::CMSG_CLOEXEC)?.ok_or(SocketError::Closed)
    }

    /// Receive one message if one is waiting; `Ok(None)` if none is.
    pub fn try_recv<T: DeserializeOwned>(&self) -> Result<Option<(T, Vec<OwnedFd>)>, SocketError> {
        self.recv_with(RecvFlags::CMSG_CLOEXEC | RecvFlags::DONTWAIT)
    }

    fn recv_with<T: DeserializeOwned>(&self, flags: RecvFlags) -> Result<Option<(T, Vec<OwnedFd>)>, SocketError> {
        let mut bytes = vec![0u8; MAX_MESSAGE];
        let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
        let mut ancillary = RecvAncillaryBuffer::new(&mut space);
        let msg = loop {
            match rustix::net::recvmsg(&self.fd, &mut [IoSliceMut::new(&mut bytes)], &mut ancillary, flags) {
                Err(rustix::io::Errno::INTR) => continue,
                Err(rustix::io::Errno::AGAIN) => return Ok(None),
                other => break other?,
            }
        };
        let mut fds = Vec::new();
        for m in ancillary.drain() {
            if let RecvAncillaryMessage::ScmRights(received) = m {
                fds.extend(received);
            }
        }
        if msg.bytes == 0 {
            return Err(SocketError::Closed);
        }
        if msg.flags.contains(rustix::net::ReturnFlags::TRUNC) || msg.flags.contains(rustix::net::ReturnFlags::CTRUNC) {
            return Err(SocketError::Malformed("message truncated".into()));
        }
        let message = serde_json::from_slice(&bytes[..msg.bytes]).map_err(|e| SocketError::Malformed(e.to_string()))?;
        Ok(Some((message, fds)))
    }

    /// Stop both directions, so a peer blocked in `recv` wakes up with `Closed`.
    pub fn shutdown(&self) {
        let _ = rustix::net::shutdown(&self.fd, rustix::net::Shutdown::Both);
    }
}

impl AsFd for ControlSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}
