//! Cross-process sharing over a Unix socket (SCM_RIGHTS), and forged handles.

use std::io::{IoSlice, IoSliceMut};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use nix::sys::socket::{
    recvmsg, sendmsg, socketpair, AddressFamily, ControlMessage, ControlMessageOwned, MsgFlags,
    SockFlag, SockType,
};
use vnpu_gralloc::handle::{idx, NUM_INTS};
use vnpu_gralloc::metadata::{dataspace, vendor, Smpte2086, Writer};
use vnpu_gralloc::{
    pixel_format as pf, usage, AIMapperError, Allocator, BufferDescriptorInfo, Mapper,
    MetadataType, NativeHandle, RawHandle, Rect, StandardMetadata as M, StandardMetadataType as T,
};

const CHILD_ENV: &str = "VNPU_GRALLOC_TEST_CHILD_FD";
const W: i32 = 64;
const H: i32 = 32;
const RW: u64 = usage::CPU_READ_OFTEN | usage::CPU_WRITE_OFTEN;

fn pattern(y: usize, x: usize) -> u8 {
    (y * 31 + x * 7 + 3) as u8
}

fn hdr() -> Smpte2086 {
    Smpte2086::from_array([
        0.68, 0.32, 0.265, 0.69, 0.15, 0.06, 0.3127, 0.329, 1000.0, 0.005,
    ])
}

fn send_handle(sock: RawFd, h: &NativeHandle) {
    let bytes: Vec<u8> = h.ints().iter().flat_map(|i| i.to_le_bytes()).collect();
    let fds = h.fds();
    let cmsg = [ControlMessage::ScmRights(fds)];
    sendmsg::<()>(
        sock,
        &[IoSlice::new(&bytes)],
        &cmsg,
        MsgFlags::empty(),
        None,
    )
    .expect("sendmsg");
}

fn recv_handle(sock: RawFd) -> NativeHandle {
    let mut buf = [0u8; 4 * 1024];
    let mut cmsg_buf = nix::cmsg_space!([RawFd; 8]);
    let (n, fds) = {
        let mut iov = [IoSliceMut::new(&mut buf)];
        let msg = recvmsg::<()>(
            sock,
            &mut iov,
            Some(&mut cmsg_buf),
            MsgFlags::MSG_CMSG_CLOEXEC,
        )
        .expect("recvmsg");
        let mut fds = Vec::new();
        for c in msg.cmsgs().expect("cmsgs") {
            if let ControlMessageOwned::ScmRights(r) = c {
                // SAFETY: fds received with SCM_RIGHTS are new and ours.
                fds.extend(r.into_iter().map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }));
            }
        }
        (msg.bytes, fds)
    };
    let ints: Vec<i32> = buf[..n]
        .chunks_exact(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    NativeHandle::new(fds, &ints).expect("handle")
}

/// Entry point of the child process (a no-op when run as a normal test).
#[test]
fn child_entry() {
    let Ok(fd) = std::env::var(CHILD_ENV) else {
        return;
    };
    let sock: RawFd = fd.parse().unwrap();
    let raw = recv_handle(sock);
    let m = Mapper::new();
    let h = m.import_buffer(raw.as_raw()).expect("child import");
    let info = m.buffer_info(h).unwrap();
    let p = m
        .lock(h, usage::CPU_WRITE_OFTEN, Rect::default(), None)
        .unwrap();
    let stride = info.stride as usize * 4;
    for y in 0..H as usize {
        for x in 0..W as usize * 4 {
            // SAFETY: inside the locked buffer (stride * H bytes).
            unsafe { p.add(y * stride + x).write_volatile(pattern(y, x)) };
        }
    }
    m.unlock(h).unwrap();
    m.set_standard(h, &M::Dataspace(dataspace::BT2020_PQ))
        .unwrap();
    m.set_standard(h, &M::Smpte2086(Some(hdr()))).unwrap();
    let mut w = Writer::default();
    w.header(vendor::NAME, vendor::USER_DATA);
    w.string(b"hello from the child");
    m.set_metadata(
        h,
        MetadataType {
            name: vendor::NAME,
            value: vendor::USER_DATA,
        },
        &w.buf,
    )
    .unwrap();
    m.free_buffer(h).unwrap();
    nix::unistd::write(
        // SAFETY: the socket fd stays open for the process lifetime.
        unsafe { std::os::fd::BorrowedFd::borrow_raw(sock) },
        &[1u8],
    )
    .unwrap();
}

#[test]
fn child_writes_pixels_and_metadata_parent_sees_both() {
    let alloc = Allocator::new();
    let r = alloc
        .allocate(
            &BufferDescriptorInfo::new(W, H, pf::RGBA_8888, RW).with_name("xproc"),
            1,
        )
        .unwrap();
    let raw = &r.buffers[0];
    let m = Mapper::new();
    // Imported (and mapped) before the child writes: the mapping is shared.
    let h = m.import_buffer(raw.as_raw()).unwrap();

    let (parent, child) = socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .unwrap();
    // Let the child inherit its end.
    // SAFETY: clearing FD_CLOEXEC on an fd we own.
    assert_eq!(
        // SAFETY: arguments are valid for the call, as set up above.
        unsafe { libc::fcntl(child.as_raw_fd(), libc::F_SETFD, 0) },
        0
    );
    let mut proc = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, child.as_raw_fd().to_string())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    drop(child);
    send_handle(parent.as_raw_fd(), raw);
    let mut ack = [0u8; 1];
    let n = nix::unistd::read(&parent, &mut ack).unwrap();
    assert_eq!((n, ack[0]), (1, 1), "child did not acknowledge");
    assert!(proc.wait().unwrap().success());

    let p = m
        .lock(h, usage::CPU_READ_OFTEN, Rect::default(), None)
        .unwrap();
    let stride = r.stride as usize * 4;
    for y in 0..H as usize {
        for x in 0..W as usize * 4 {
            // SAFETY: inside the locked buffer.
            assert_eq!(
                // SAFETY: arguments are valid for the call, as set up above.
                unsafe { p.add(y * stride + x).read_volatile() },
                pattern(y, x)
            );
        }
    }
    m.unlock(h).unwrap();
    assert_eq!(
        m.get_standard(h, T::Dataspace).unwrap(),
        M::Dataspace(dataspace::BT2020_PQ)
    );
    assert_eq!(
        m.get_standard(h, T::Smpte2086).unwrap(),
        M::Smpte2086(Some(hdr()))
    );
    let mut out = vec![0u8; 256];
    let n = m
        .get_metadata(
            h,
            MetadataType {
                name: vendor::NAME,
                value: vendor::USER_DATA,
            },
            &mut out,
        )
        .unwrap();
    assert!(out[..n].ends_with(b"hello from the child"));
    // A fresh import in the parent sees the same metadata.
    let h2 = m.import_buffer(raw.as_raw()).unwrap();
    assert_eq!(
        m.get_standard(h2, T::Dataspace).unwrap(),
        M::Dataspace(dataspace::BT2020_PQ)
    );
    m.free_buffer(h2).unwrap();
    m.free_buffer(h).unwrap();
}

fn memfd(size: u64, seals: i32) -> OwnedFd {
    let name = c"forged";
    // SAFETY: valid name; result checked.
    let fd =
        unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    assert!(fd >= 0);
    // SAFETY: fresh fd.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: plain syscalls on our fd.
    unsafe {
        assert_eq!(libc::ftruncate(fd.as_raw_fd(), size as i64), 0);
        if seals != 0 {
            assert_eq!(libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals), 0);
        }
    }
    fd
}

fn expect_bad(m: &Mapper, raw: RawHandle<'_>, what: &str) {
    match m.import_buffer(raw) {
        Err(e) => assert_eq!(e.kind(), AIMapperError::BadBuffer, "{what}: {e}"),
        Ok(h) => {
            m.free_buffer(h).unwrap();
            panic!("{what}: forged handle was imported");
        }
    }
}

#[test]
fn forged_handles() {
    let m = Mapper::new();
    let alloc = Allocator::new();
    let desc = BufferDescriptorInfo::new(W, H, pf::RGBA_8888, RW).with_name("victim");
    let good = alloc.allocate(&desc, 1).unwrap().buffers.remove(0);
    let other = alloc.allocate(&desc, 1).unwrap().buffers.remove(0);
    let yv12 = alloc
        .allocate(&BufferDescriptorInfo::new(W, H, pf::YV12, RW), 1)
        .unwrap()
        .buffers
        .remove(0);
    // The genuine handles import.
    for g in [&good, &yv12] {
        let h = m.import_buffer(g.as_raw()).unwrap();
        m.free_buffer(h).unwrap();
    }

    // Every int corrupted in turn, several ways.
    for base in [&good, &yv12] {
        for i in 0..NUM_INTS {
            for delta in [1i32, -1, 0x10, 1 << 20, i32::MIN] {
                let mut f = base.try_clone().unwrap();
                f.ints_mut()[i] = f.ints()[i].wrapping_add(delta);
                expect_bad(&m, f.as_raw(), &format!("int {i} {delta:+}"));
            }
        }
    }
    // Specific plausible forgeries: a larger plane count, bigger size, other id.
    let mut f = good.try_clone().unwrap();
    f.ints_mut()[idx::NUM_PLANES] = 3;
    expect_bad(&m, f.as_raw(), "num planes");
    let mut f = good.try_clone().unwrap();
    f.ints_mut()[idx::HEIGHT] = 4096;
    expect_bad(&m, f.as_raw(), "height larger than the memfd");

    // Header: version and counts.
    let ints = good.ints();
    let fds = good.fds();
    expect_bad(
        &m,
        RawHandle {
            version: 11,
            fds,
            ints,
        },
        "native_handle version",
    );
    expect_bad(
        &m,
        RawHandle {
            version: 12,
            fds: &fds[..1],
            ints,
        },
        "one fd short",
    );
    expect_bad(
        &m,
        RawHandle {
            version: 12,
            fds,
            ints: &ints[..NUM_INTS - 1],
        },
        "one int short",
    );
    let mut more = ints.to_vec();
    more.push(0);
    expect_bad(
        &m,
        RawHandle {
            version: 12,
            fds,
            ints: &more,
        },
        "one int more",
    );
    let three = [fds[0], fds[1], fds[1]];
    expect_bad(
        &m,
        RawHandle {
            version: 12,
            fds: &three,
            ints,
        },
        "one fd more",
    );
    // Ints posing as fds (numFds larger, numInts smaller).
    let posing = [fds[0], fds[1], ints[0]];
    expect_bad(
        &m,
        RawHandle {
            version: 12,
            fds: &posing,
            ints: &ints[1..],
        },
        "int posing as fd",
    );

    // fd swaps.
    let path = std::env::temp_dir().join(format!("vnpu-gralloc-forge-{}", std::process::id()));
    let tmp = std::fs::File::create(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    tmp.set_len(1 << 20).unwrap();
    let (pipe_r, _pipe_w) = nix::unistd::pipe().unwrap();
    let cases: Vec<(usize, OwnedFd, &str)> = vec![
        (
            0,
            OwnedFd::from(tmp.try_clone().unwrap()),
            "pixel fd is a regular file",
        ),
        (1, OwnedFd::from(tmp), "metadata fd is a regular file"),
        (0, pipe_r, "pixel fd is a pipe"),
        (
            0,
            memfd(4096, libc::F_SEAL_SHRINK | libc::F_SEAL_GROW),
            "smaller sealed memfd",
        ),
        (0, memfd(1 << 20, 0), "unsealed memfd"),
        (
            0,
            memfd(1 << 20, libc::F_SEAL_GROW),
            "memfd that may shrink",
        ),
        (
            0,
            memfd(1 << 20, libc::F_SEAL_SHRINK | libc::F_SEAL_GROW),
            "sealed memfd of another content",
        ),
        (
            1,
            memfd(1 << 20, libc::F_SEAL_SHRINK | libc::F_SEAL_GROW),
            "blank metadata memfd",
        ),
        (
            0,
            other.fds()[0].try_clone_fd(),
            "pixel memfd of another buffer",
        ),
        (
            1,
            other.fds()[1].try_clone_fd(),
            "metadata memfd of another buffer",
        ),
        (0, good.fds()[1].try_clone_fd(), "metadata fd as pixel fd"),
        (1, good.fds()[0].try_clone_fd(), "pixel fd as metadata fd"),
    ];
    for (slot, fd, what) in cases {
        let mut f = good.try_clone().unwrap();
        assert!(f.replace_fd(slot, fd));
        expect_bad(&m, f.as_raw(), what);
    }
    // Negative and closed fds.
    let neg = [-1, fds[1]];
    expect_bad(
        &m,
        RawHandle {
            version: 12,
            fds: &neg,
            ints,
        },
        "negative fd",
    );
    let closed = [999_999, fds[1]];
    expect_bad(
        &m,
        RawHandle {
            version: 12,
            fds: &closed,
            ints,
        },
        "closed fd",
    );
    // The genuine handle still works after all that.
    let h = m.import_buffer(good.as_raw()).unwrap();
    m.lock(h, RW, Rect::default(), None).unwrap();
    m.unlock(h).unwrap();
    m.free_buffer(h).unwrap();
}

trait CloneFd {
    fn try_clone_fd(&self) -> OwnedFd;
}

impl CloneFd for RawFd {
    fn try_clone_fd(&self) -> OwnedFd {
        // SAFETY: the fd belongs to a live handle in the test.
        unsafe { std::os::fd::BorrowedFd::borrow_raw(*self) }
            .try_clone_to_owned()
            .unwrap()
    }
}
