//! A SOCK_SEQPACKET Unix socket carrying one JSON message per datagram, with file
//! descriptors attached through SCM_RIGHTS. A message larger than a datagram may be (a stage
//! setup with large params) travels in a memfd attached last, the datagram saying so.

use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer, SendAncillaryMessage,
    SendFlags, SocketFlags, SocketType,
};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Largest message sent inline; a larger one goes in a memfd. Well below what the kernel
/// accepts in one datagram (about the socket's send buffer).
const MAX_MESSAGE: usize = 1 << 15;
/// Largest message in a memfd: far beyond any setup, short of exhausting memory.
const MAX_IN_MEMFD: usize = 64 << 20;
/// The datagram of a message that travels in a memfd: never valid JSON.
const IN_MEMFD: &[u8] = b"@memfd";
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

    /// Another handle on the same end (close-on-exec): each message is one datagram, so two
    /// threads may send on it without mixing their messages.
    pub fn try_clone(&self) -> std::io::Result<ControlSocket> {
        Ok(ControlSocket { fd: self.fd.try_clone()? })
    }

    /// Send `message` with `fds` attached.
    pub fn send<T: Serialize>(&self, message: &T, fds: &[BorrowedFd<'_>]) -> Result<(), SocketError> {
        let bytes = serde_json::to_vec(message).map_err(|e| SocketError::Malformed(e.to_string()))?;
        if fds.len() >= MAX_FDS {
            return Err(SocketError::Malformed(format!("{} descriptors is too many", fds.len())));
        }
        if bytes.len() <= MAX_MESSAGE {
            return self.send_datagram(&bytes, fds);
        }
        let memfd = rustix::fs::memfd_create("gpuipc-message", rustix::fs::MemfdFlags::CLOEXEC)?;
        let file = std::fs::File::from(memfd);
        std::os::unix::fs::FileExt::write_all_at(&file, &bytes, 0)?;
        let mut with_memfd = fds.to_vec();
        with_memfd.push(file.as_fd());
        self.send_datagram(IN_MEMFD, &with_memfd)
    }

    fn send_datagram(&self, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> Result<(), SocketError> {
        let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
        let mut ancillary = SendAncillaryBuffer::new(&mut space);
        if !fds.is_empty() && !ancillary.push(SendAncillaryMessage::ScmRights(fds)) {
            return Err(SocketError::Malformed("descriptors do not fit".into()));
        }
        rustix::net::sendmsg(&self.fd, &[IoSlice::new(bytes)], &mut ancillary, SendFlags::NOSIGNAL)?;
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
                // The peer closed its end with messages of ours unread (a stage that exited
                // before it read an update). The kernel reports that once, before the peer's
                // own last messages, which are still queued: read on.
                Err(rustix::io::Errno::CONNRESET) => continue,
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
        let mut datagram = &bytes[..msg.bytes];
        let in_memfd;
        if datagram == IN_MEMFD {
            let memfd =
                fds.pop().ok_or_else(|| SocketError::Malformed("a message in a memfd without the memfd".into()))?;
            let file = std::fs::File::from(memfd);
            let len = file.metadata()?.len() as usize;
            if len > MAX_IN_MEMFD {
                return Err(SocketError::Malformed(format!("a message of {len} bytes; at most {MAX_IN_MEMFD}")));
            }
            let mut buffer = vec![0u8; len];
            std::os::unix::fs::FileExt::read_exact_at(&file, &mut buffer, 0)?;
            in_memfd = buffer;
            datagram = &in_memfd;
        }
        let message = serde_json::from_slice(datagram).map_err(|e| SocketError::Malformed(e.to_string()))?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_words_of_a_peer_that_left_messages_unread_still_arrive() {
        let (host, stage) = ControlSocket::pair().unwrap();
        host.send(&"an update the stage never reads", &[]).unwrap();
        stage.send(&"finished", &[]).unwrap();
        drop(stage);
        // Without reading on past the reset, the host lost "finished" (seen on a GPU: a stage
        // judged to have exited without finishing its stream, and restarted).
        let (got, _): (String, Vec<OwnedFd>) = host.try_recv().unwrap().expect("the stage's last message");
        assert_eq!(got, "finished");
        assert!(matches!(host.try_recv::<String>(), Err(SocketError::Closed)));
    }

    #[test]
    fn a_message_of_any_size_arrives_whole_with_its_descriptors() {
        let (a, b) = ControlSocket::pair().unwrap();
        let (extra, _) = ControlSocket::pair().unwrap();
        for len in [10, MAX_MESSAGE - 2, MAX_MESSAGE + 1, 1 << 20] {
            let text: String = (0..len).map(|i| char::from(b'a' + (i % 26) as u8)).collect();
            a.send(&text, &[extra.as_fd()]).unwrap();
            let (got, fds): (String, Vec<OwnedFd>) = b.recv().unwrap();
            assert_eq!(got.len(), len);
            assert!(got == text, "a message of {len} bytes arrived changed");
            assert_eq!(fds.len(), 1, "the descriptor sent beside a {len}-byte message");
        }
    }
}
