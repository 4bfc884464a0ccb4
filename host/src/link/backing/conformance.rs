//! One suite for every backing: a producer thread and a consumer thread (standing in for two
//! stages) pass frames through a ring, each end going through its backing exactly as the frame
//! loop does (prepare, write, finish, publish; take, frame, read, done, release). Every byte of
//! every frame carries its sequence number, so a torn, stale or lost frame is caught. The host
//! pair runs everywhere; the pairs with a cuda end run on a machine with a GPU (`gpu_*`,
//! skipped elsewhere, as every GPU test of the project).

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use gpuipc_plugin_api::abi::{DOMAIN_CPU, RawFrame};
use gpuipc_plugin_api::{FrameFormat, FrameLayout, PixelFormat};

use super::host::Host;
use super::staged::Staged;
use super::{ReadEnd, WriteEnd};
use crate::gpu::Gpu;
use crate::link::header::POLICY_BLOCK;
use crate::link::wakes::Waiter;
use crate::link::{Consumer, FrameAccess, Producer, RingMap, RingParams};

const FRAMES: u64 = 200;

fn ring(host_data: bool) -> RingMap {
    // An odd size, so a frame is not a whole number of anything.
    let format = FrameFormat::new(PixelFormat::Rgb8, 37, 23);
    let layout = FrameLayout::for_format(format).unwrap();
    let params = RingParams { format, layout, depth: 3, policies: vec![POLICY_BLOCK], host_data };
    RingMap::create("gpuipc-test-backing", &params).unwrap()
}

fn reopen(map: &RingMap) -> RingMap {
    map.reopen(FrameAccess::Write)
}

/// A consumer's mapping: slot data read-only, as a stage maps its inputs.
fn reopen_to_read(map: &RingMap) -> RingMap {
    map.reopen(FrameAccess::Read)
}

fn pattern(seq: u64, len: usize) -> Vec<u8> {
    (0..len).map(|i| (seq as usize * 7 + i * 13 + 1) as u8).collect()
}

/// How a test end puts bytes into a frame and reads them back: in place in host memory, or
/// through the stage's stream on a GPU.
#[derive(Clone)]
enum Access {
    Host,
    Gpu(Arc<Gpu>),
}

impl Access {
    fn write(&self, frame: &RawFrame, bytes: &[u8]) {
        match self {
            Access::Host => {
                assert_eq!(frame.domain, DOMAIN_CPU);
                #[allow(unsafe_code)]
                // SAFETY: (test) the producer owns the slot the frame points at.
                unsafe {
                    std::ptr::copy_nonoverlapping(bytes.as_ptr(), frame.addr as *mut u8, bytes.len())
                };
            }
            Access::Gpu(gpu) => gpu.upload(frame.addr, bytes).unwrap(),
        }
    }

    fn read(&self, frame: &RawFrame, len: usize) -> Vec<u8> {
        match self {
            Access::Host => {
                #[allow(unsafe_code)]
                // SAFETY: (test) the consumer's claim keeps the producer out of the slot.
                unsafe { std::slice::from_raw_parts(frame.addr as *const u8, len) }.to_vec()
            }
            Access::Gpu(gpu) => {
                let mut out = vec![0; len];
                gpu.download(frame.addr, &mut out).unwrap();
                out
            }
        }
    }
}

fn deadline() -> Option<Instant> {
    Some(Instant::now() + Duration::from_secs(60))
}

/// The producer's side: `FRAMES` frames, each through `end` as the frame loop does it.
fn produce(ring: RingMap, end: &dyn WriteEnd, access: &Access) {
    let bytes = ring.layout().total_bytes as usize;
    let mut producer = Producer::new(ring, Waiter::new(5));
    for seq in 0..FRAMES {
        let slot = producer.acquire(deadline()).unwrap();
        end.prepare(slot.index()).unwrap();
        let frame = end.frame(producer.ring(), slot.index(), seq, seq);
        access.write(&frame, &pattern(seq, bytes));
        end.finish(producer.ring(), slot.index()).unwrap();
        producer.publish(slot, seq, seq);
    }
    producer.close();
}

/// The consumer's side: every frame until the end of the stream, checked whole; returns the
/// sequence numbers in the order they came.
fn consume(ring: RingMap, end: &dyn ReadEnd, access: &Access) -> Vec<u64> {
    let bytes = ring.layout().total_bytes as usize;
    let mut consumer = Consumer::new(ring, 0, Waiter::new(5)).unwrap();
    let mut got = Vec::new();
    while let Some(slot) = consumer.acquire(0, deadline()).unwrap() {
        let frame = end.frame(consumer.ring(), &slot, None).unwrap();
        assert_eq!(frame.seq, slot.meta().seq);
        assert_eq!(access.read(&frame, bytes), pattern(frame.seq, bytes), "frame {} arrived torn or stale", frame.seq);
        end.done(slot.index()).unwrap();
        got.push(frame.seq);
    }
    got
}

/// Pass `FRAMES` frames from `write` to `read` over `map`, each end on its own thread; every
/// frame arrives whole, in order.
fn exchange(
    map: &RingMap,
    write: impl FnOnce(&RingMap) -> (Box<dyn WriteEnd>, Access) + Send,
    read: impl FnOnce(&RingMap) -> (Box<dyn ReadEnd>, Access) + Send,
) {
    thread::scope(|scope| {
        let consumer = scope.spawn(|| {
            let ring = reopen_to_read(map);
            let (end, access) = read(&ring);
            consume(ring, end.as_ref(), &access)
        });
        let ring = reopen(map);
        let (end, access) = write(&ring);
        produce(ring, end.as_ref(), &access);
        assert_eq!(consumer.join().unwrap(), (0..FRAMES).collect::<Vec<_>>());
    });
}

#[test]
fn host_to_host() {
    let map = ring(true);
    exchange(&map, |_| (Box::new(Host), Access::Host), |_| (Box::new(Host), Access::Host));
}

#[test]
fn gpu_staged_producer_to_host_consumer() {
    let Some(gpu) = gpuipc_cuda::testing::gpu_for_test() else { return };
    let map = ring(true);
    exchange(
        &map,
        |ring| (Box::new(Staged::writer(&gpu, ring).unwrap()), Access::Gpu(gpu.clone())),
        |_| (Box::new(Host), Access::Host),
    );
}

#[test]
fn gpu_host_producer_to_staged_consumer() {
    let Some(gpu) = gpuipc_cuda::testing::gpu_for_test() else { return };
    let map = ring(true);
    exchange(
        &map,
        |_| (Box::new(Host), Access::Host),
        |ring| (Box::new(Staged::reader(&gpu, ring).unwrap()), Access::Gpu(gpu.clone())),
    );
}

/// The consumer of [`gpu_device_producer_to_device_consumer`] in a process of its own (a GPU
/// ring's objects are shared between processes, and an IPC event cannot be opened by the
/// process that made it): the ring's control block on fd 3 (a GPU ring has no data memfd), the
/// control socket on fd 4.
const DEVICE_CHILD_ENV: &str = "GPUIPC_TEST_DEVICE_CONSUMER";

#[test]
fn gpu_device_producer_to_device_consumer() {
    device_exchange("read");
}

/// The same, the consumer copying each frame into memory of its own first (as one on another
/// GPU does; here the copy stays on one GPU, which the ordering does not know).
#[test]
fn gpu_device_producer_to_copying_device_consumer() {
    device_exchange("copy");
}

/// The same, the producer writing each frame into memory of its own and pushing it into the
/// slot (as one whose ring lives on its consumers' GPU does; here the push stays on one GPU).
#[test]
fn gpu_pushing_device_producer_to_device_consumer() {
    device_exchange("push");
}

/// The producer here, the consumer in a child process that reads the frames in place
/// (`read`) or copies them in first (`copy`), or the producer pushing them (`push`).
fn device_exchange(how: &str) {
    use std::os::fd::AsFd;
    use std::process::Command;

    use command_fds::{CommandFdExt, FdMapping};

    use crate::config::Transport;
    use crate::control::{ControlSocket, FromStage, Import, ToStage};
    use crate::link::backing::device::handshake::{SlotsAt, complete, export_output};

    let Some(gpu) = gpuipc_cuda::testing::gpu_for_test() else { return };
    let map = ring(false);
    // The producer's socket, with this test as the host's broker on the other end, and the
    // consumer process's socket.
    let (producer_socket, broker) = ControlSocket::pair().unwrap();
    let (to_child, child_socket) = ControlSocket::pair().unwrap();
    let mut command = Command::new(std::env::current_exe().unwrap());
    command.args(["--exact", "link::backing::conformance::device_consumer_child", "--ignored", "--nocapture"]);
    command.env(DEVICE_CHILD_ENV, how);
    command
        .fd_mappings(vec![
            FdMapping { parent_fd: map.fds_for(FrameAccess::Read)[0].try_clone_to_owned().unwrap(), child_fd: 3 },
            FdMapping { parent_fd: child_socket.into_fd(), child_fd: 4 },
        ])
        .unwrap();
    let mut child = command.spawn().unwrap();

    let at = SlotsAt { transport: Transport::Auto, home: gpu.ordinal() };
    let half = export_output(&gpu, &producer_socket, 0, &map, 0..map.depth(), at, 0).unwrap();
    let (exported, fds) = broker.recv::<FromStage>().unwrap();
    let FromStage::Exported(producer) = exported else { panic!("expected the producer's export") };
    let borrowed: Vec<_> = fds.iter().map(|f| f.as_fd()).collect();
    let to_consumer = Import { link: 0, producers: vec![*producer], consumers: Vec::new(), epoch: None };
    to_child.send(&ToStage::Import(Box::new(to_consumer)), &borrowed).unwrap();
    let (exported, _) = to_child.recv::<FromStage>().unwrap();
    let FromStage::Exported(consumer) = exported else { panic!("expected the consumer's export") };
    let to_producer = Import { link: 0, producers: Vec::new(), consumers: vec![*consumer], epoch: None };
    broker.send(&ToStage::Import(Box::new(to_producer)), &[]).unwrap();
    let (_, write) = complete(&gpu, &producer_socket, vec![half]).unwrap();
    let mut write = write.expect("the producer's end");
    if how == "push" {
        // Two streams, taking the slots' pushes in turn.
        write.copy_out(&map, 2).unwrap();
    }

    produce(reopen(&map), &write, &Access::Gpu(gpu.clone()));
    let status = child.wait().unwrap();
    assert!(status.success(), "the consumer process failed: {status}");
}

#[test]
#[ignore = "run by gpu_device_producer_to_device_consumer in a process of its own"]
fn device_consumer_child() {
    use std::os::fd::{FromRawFd, OwnedFd};

    use crate::control::ControlSocket;
    use crate::link::backing::device::handshake::{complete, export_input};

    let Some(how) = std::env::var_os(DEVICE_CHILD_ENV) else { return };
    let gpu = gpuipc_cuda::testing::gpu_for_test().expect("the parent found a GPU");
    #[allow(unsafe_code)]
    // SAFETY: (test) the parent mapped the ring to fd 3 and the socket to fd 4 for this.
    let (ring_fd, socket_fd) = unsafe { (OwnedFd::from_raw_fd(3), OwnedFd::from_raw_fd(4)) };
    let map = RingMap::open(crate::link::ring::RingFds { control: ring_fd, data: None }, FrameAccess::Read).unwrap();
    let socket = ControlSocket::from_fd(socket_fd);
    let half = export_input(&gpu, &socket, 0, 0, map.depth()).unwrap();
    let (mut reads, _) = complete(&gpu, &socket, vec![half]).unwrap();
    let (_, mut read) = reads.pop().expect("the consumer's end");
    if how == "copy" {
        // Two streams, taking the slots' copies in turn.
        read.copy_in(&map, 2).unwrap();
    }
    let got = consume(map, &read, &Access::Gpu(gpu.clone()));
    assert_eq!(got, (0..FRAMES).collect::<Vec<_>>());
    println!("device consumer: {} frames, all whole and in order", got.len());
}
