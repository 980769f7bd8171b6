//! The service's transport: one Unix-domain `SOCK_SEQPACKET` connection (the kernel keeps
//! message boundaries), file descriptors passed with `SCM_RIGHTS`, and every message a
//! postcard-encoded serde value.
//!
//! Every message starts with a one-byte frame tag: [`INLINE`] (the body follows in the
//! same packet, at most [`MAX_MESSAGE`] bytes) or [`IN_MEMFD`] (a body too long for one
//! packet, up to [`MAX_LARGE_MESSAGE`], travels in a memfd passed as the message's last
//! descriptor, its length beside the tag): a model with many inline constants crosses
//! whole, never truncated.
//!
//! Everything received is hostile until validated: a packet is at most [`MAX_MESSAGE`]
//! bytes and [`MAX_FDS`] descriptors (a longer one is refused, never partly used); the
//! descriptors a message carries are wrapped in [`OwnedFd`] the moment they arrive
//! (`MSG_CMSG_CLOEXEC`, so they never leak into a child), so every error path closes them;
//! a body must decode completely, with no trailing bytes.

use std::io::{IoSlice, IoSliceMut};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use nix::errno::Errno;
use nix::sys::socket::{
    self, AddressFamily, Backlog, ControlMessage, MsgFlags, SockFlag, SockType, UnixAddr,
};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// The largest packet, in bytes. A `SOCK_SEQPACKET` message must fit the socket's send
/// buffer (about 208 KiB by default), so a longer body travels in a memfd instead.
pub const MAX_MESSAGE: usize = 128 * 1024;
/// The largest message body (carried in a memfd when over [`MAX_MESSAGE`] - 1 bytes).
pub const MAX_LARGE_MESSAGE: usize = 64 << 20;
/// Frame tag: the body follows in the packet.
pub const INLINE: u8 = 0;
/// Frame tag: the body's length (u64, little-endian) follows; the body is in the memfd
/// that is the packet's last descriptor.
pub const IN_MEMFD: u8 = 1;
/// The most file descriptors one message may carry.
pub const MAX_FDS: usize = 64;
/// Linux's limit on descriptors in one message (`SCM_MAX_FD`): a control buffer this large
/// is never truncated, so every descriptor that arrives is seen and owned.
const SCM_MAX_FD: usize = 253;

/// Why a message could not be sent or received.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// The socket call failed.
    #[error("socket: {0}")]
    Io(#[from] Errno),
    /// A packet longer than [`MAX_MESSAGE`] (received: truncated by the kernel), or a
    /// body longer than [`MAX_LARGE_MESSAGE`].
    #[error("message too long")]
    Oversized,
    /// More descriptors than [`MAX_FDS`] (received: the control data was truncated).
    #[error("more than {MAX_FDS} file descriptors")]
    TooManyFds,
    /// A body that is not a valid message.
    #[error("malformed message: {0}")]
    Malformed(String),
    /// A message carried a different number of descriptors than it declares.
    #[error("message declares {declared} file descriptors, carries {carried}")]
    FdCount {
        /// How many the body refers to.
        declared: usize,
        /// How many arrived.
        carried: usize,
    },
    /// The peer closed the connection.
    #[error("connection closed")]
    Closed,
    /// The handshake failed: not our protocol, or a version the other side refused.
    #[error("handshake: {0}")]
    Handshake(String),
}

/// The wire protocol's version; a peer speaking another is refused at the handshake.
pub const PROTOCOL_VERSION: u32 = 3;
/// The first bytes of a client's hello.
pub const MAGIC: [u8; 4] = *b"VNPS";

/// A client's first message.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
pub struct Hello {
    /// [`MAGIC`].
    pub magic: [u8; 4],
    /// The client's [`PROTOCOL_VERSION`].
    pub version: u32,
}

/// The service's answer to a [`Hello`].
#[derive(Debug, PartialEq, Serialize, Deserialize)]
pub enum Welcome {
    /// Accepted: the service's protocol version and the device it hosts.
    Accepted {
        /// The service's [`PROTOCOL_VERSION`].
        version: u32,
        /// The hosted device's name.
        device: String,
    },
    /// Refused, and why (the service closes the connection after sending it).
    Refused(String),
}

/// The client side of the handshake: returns the device's name.
pub fn handshake_client(sock: BorrowedFd<'_>) -> Result<String, TransportError> {
    let hello = Hello {
        magic: MAGIC,
        version: PROTOCOL_VERSION,
    };
    send(sock, &encode(&hello)?, &[])?;
    let frame = recv(sock)?;
    if !frame.fds.is_empty() {
        return Err(TransportError::FdCount {
            declared: 0,
            carried: frame.fds.len(),
        });
    }
    match decode::<Welcome>(&frame.bytes)? {
        Welcome::Accepted { version, device } if version == PROTOCOL_VERSION => Ok(device),
        Welcome::Accepted { version, .. } => Err(TransportError::Handshake(format!(
            "service speaks version {version}, this client {PROTOCOL_VERSION}"
        ))),
        Welcome::Refused(why) => Err(TransportError::Handshake(why)),
    }
}

/// The service side of the handshake: reads the client's [`Hello`] and accepts it or
/// refuses it (telling the client why before the error is returned).
pub fn handshake_server(sock: BorrowedFd<'_>, device: &str) -> Result<(), TransportError> {
    handshake_server_with(sock, device, || Ok(()))
}

/// [`handshake_server`], where a well-formed hello is accepted only if `admit` agrees
/// (its `Err` is the refusal's reason).
pub fn handshake_server_with(
    sock: BorrowedFd<'_>,
    device: &str,
    admit: impl FnOnce() -> Result<(), String>,
) -> Result<(), TransportError> {
    let frame = recv(sock)?;
    let refusal = if !frame.fds.is_empty() {
        Some("descriptors in the hello".to_string())
    } else {
        match decode::<Hello>(&frame.bytes) {
            Ok(h) if h.magic != MAGIC => Some("not a vnpu client".to_string()),
            Ok(h) if h.version != PROTOCOL_VERSION => Some(format!(
                "client speaks version {}, this service {PROTOCOL_VERSION}",
                h.version
            )),
            Ok(_) => admit().err(),
            Err(e) => Some(e.to_string()),
        }
    };
    match refusal {
        None => send(
            sock,
            &encode(&Welcome::Accepted {
                version: PROTOCOL_VERSION,
                device: device.to_string(),
            })?,
            &[],
        ),
        Some(why) => {
            // Best effort: the client may already be gone.
            let _ = send(sock, &encode(&Welcome::Refused(why.clone()))?, &[]);
            Err(TransportError::Handshake(why))
        }
    }
}

/// One received message: its body and the descriptors that came with it (owned: dropped,
/// they are closed).
#[derive(Debug)]
pub struct Frame {
    /// The encoded body.
    pub bytes: Vec<u8>,
    /// The descriptors, in the order they were sent.
    pub fds: Vec<OwnedFd>,
}

/// Encodes `msg`, refusing a body over [`MAX_LARGE_MESSAGE`].
pub fn encode<T: Serialize>(msg: &T) -> Result<Vec<u8>, TransportError> {
    let bytes = postcard::to_stdvec(msg).map_err(|e| TransportError::Malformed(e.to_string()))?;
    if bytes.len() > MAX_LARGE_MESSAGE {
        return Err(TransportError::Oversized);
    }
    Ok(bytes)
}

/// Decodes a whole body: a body that does not decode, or has bytes left over, is malformed.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, TransportError> {
    if bytes.len() > MAX_LARGE_MESSAGE {
        return Err(TransportError::Oversized);
    }
    let (value, rest) =
        postcard::take_from_bytes(bytes).map_err(|e| TransportError::Malformed(e.to_string()))?;
    if !rest.is_empty() {
        return Err(TransportError::Malformed(format!(
            "{} trailing bytes",
            rest.len()
        )));
    }
    Ok(value)
}

/// Sends one message with its descriptors (which stay owned by the caller): in one
/// packet when it fits, else its body in a memfd.
pub fn send(
    sock: BorrowedFd<'_>,
    bytes: &[u8],
    fds: &[BorrowedFd<'_>],
) -> Result<(), TransportError> {
    if bytes.len() > MAX_LARGE_MESSAGE {
        return Err(TransportError::Oversized);
    }
    if fds.len() > MAX_FDS {
        return Err(TransportError::TooManyFds);
    }
    if bytes.len() < MAX_MESSAGE {
        let tag = [INLINE];
        return send_packet(sock, &[IoSlice::new(&tag), IoSlice::new(bytes)], fds);
    }
    if fds.len() == MAX_FDS {
        return Err(TransportError::TooManyFds);
    }
    let body = body_memfd(bytes)?;
    let mut head = [0u8; 9];
    head[0] = IN_MEMFD;
    head[1..].copy_from_slice(&(bytes.len() as u64).to_le_bytes());
    let mut all = fds.to_vec();
    all.push(body.as_fd());
    send_packet(sock, &[IoSlice::new(&head)], &all)
}

/// A memfd holding `bytes`, sealed against every change (the receiver copies it out).
fn body_memfd(bytes: &[u8]) -> Result<OwnedFd, TransportError> {
    use nix::fcntl::{fcntl, FcntlArg, SealFlag};
    use nix::sys::memfd::{memfd_create, MFdFlags};
    let fd = memfd_create(
        "vnpu-message",
        MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING,
    )?;
    let mut written = 0;
    while written < bytes.len() {
        written += nix::sys::uio::pwrite(&fd, &bytes[written..], written as i64)?;
    }
    fcntl(
        &fd,
        FcntlArg::F_ADD_SEALS(
            SealFlag::F_SEAL_SHRINK
                | SealFlag::F_SEAL_GROW
                | SealFlag::F_SEAL_WRITE
                | SealFlag::F_SEAL_SEAL,
        ),
    )?;
    Ok(fd)
}

/// One packet with its descriptors.
fn send_packet(
    sock: BorrowedFd<'_>,
    iov: &[IoSlice<'_>],
    fds: &[BorrowedFd<'_>],
) -> Result<(), TransportError> {
    let raw: Vec<RawFd> = fds.iter().map(|f| f.as_raw_fd()).collect();
    let cmsgs = [ControlMessage::ScmRights(&raw)];
    let cmsgs: &[ControlMessage] = if raw.is_empty() { &[] } else { &cmsgs };
    loop {
        match socket::sendmsg::<UnixAddr>(
            sock.as_raw_fd(),
            iov,
            cmsgs,
            MsgFlags::MSG_NOSIGNAL,
            None,
        ) {
            Ok(_) => return Ok(()),
            Err(Errno::EINTR) => continue,
            Err(Errno::EPIPE | Errno::ECONNRESET) => return Err(TransportError::Closed),
            Err(e) => return Err(e.into()),
        }
    }
}

/// Receives one message. Descriptors are owned from the moment they arrive, so a message
/// refused for its length or its descriptor count closes them all.
pub fn recv(sock: BorrowedFd<'_>) -> Result<Frame, TransportError> {
    thread_local! {
        /// One receive buffer per thread, reused: a fresh 128 KiB buffer per message
        /// would cost an mmap, page faults and an munmap each time.
        static BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    BUF.with(|buf| {
        let mut buf = buf.borrow_mut();
        // One byte more than the bound, so an oversized message shows as truncated.
        buf.resize(MAX_MESSAGE + 1, 0);
        recv_into(sock, &mut buf)
    })
}

/// [`recv`] through `bytes` (at least [`MAX_MESSAGE`] + 1 long).
fn recv_into(sock: BorrowedFd<'_>, bytes: &mut [u8]) -> Result<Frame, TransportError> {
    // Room for every descriptor the kernel can pass, so an excess is seen (and closed)
    // here: a truncated control buffer would leave installed descriptors unreachable.
    let mut cmsg = nix::cmsg_space!([RawFd; SCM_MAX_FD]);
    let (len, flags, fds) = loop {
        let mut iov = [IoSliceMut::new(bytes)];
        match socket::recvmsg::<UnixAddr>(
            sock.as_raw_fd(),
            &mut iov,
            Some(&mut cmsg),
            MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Ok(msg) => {
                let mut fds = Vec::new();
                if let Ok(cmsgs) = msg.cmsgs() {
                    for c in cmsgs {
                        if let socket::ControlMessageOwned::ScmRights(raw) = c {
                            for fd in raw {
                                // SAFETY: the kernel just installed `fd` in this process
                                // for this message (SCM_RIGHTS); nothing else owns it.
                                fds.push(unsafe { OwnedFd::from_raw_fd(fd) });
                            }
                        }
                    }
                }
                break (msg.bytes, msg.flags, fds);
            }
            Err(Errno::EINTR) => continue,
            Err(Errno::ECONNRESET) => return Err(TransportError::Closed),
            Err(e) => return Err(e.into()),
        }
    };
    if flags.contains(MsgFlags::MSG_CTRUNC) || fds.len() > MAX_FDS {
        return Err(TransportError::TooManyFds);
    }
    if flags.contains(MsgFlags::MSG_TRUNC) || len > MAX_MESSAGE {
        return Err(TransportError::Oversized);
    }
    if len == 0 && fds.is_empty() {
        // A zero-length read on SOCK_SEQPACKET is the peer's orderly shutdown (no message
        // of ours is empty).
        return Err(TransportError::Closed);
    }
    unframe(&bytes[..len], fds)
}

/// The body of a received packet: inline, or read out of its memfd (which must hold
/// exactly the declared length, at most [`MAX_LARGE_MESSAGE`]).
fn unframe(packet: &[u8], mut fds: Vec<OwnedFd>) -> Result<Frame, TransportError> {
    let malformed = |why: &str| TransportError::Malformed(format!("frame: {why}"));
    match packet.split_first() {
        Some((&INLINE, body)) => Ok(Frame {
            bytes: body.to_vec(),
            fds,
        }),
        Some((&IN_MEMFD, len)) => {
            let len: [u8; 8] = len.try_into().map_err(|_| malformed("bad length"))?;
            let len = u64::from_le_bytes(len);
            if len > MAX_LARGE_MESSAGE as u64 {
                return Err(TransportError::Oversized);
            }
            let body = fds.pop().ok_or_else(|| malformed("no body descriptor"))?;
            let size = nix::sys::stat::fstat(&body)?.st_size;
            if u64::try_from(size).ok() != Some(len) {
                return Err(malformed("body length differs from the declared one"));
            }
            let mut bytes = vec![0u8; len as usize];
            let mut read = 0;
            while read < bytes.len() {
                match nix::sys::uio::pread(&body, &mut bytes[read..], read as i64)? {
                    0 => return Err(malformed("body shorter than declared")),
                    n => read += n,
                }
            }
            Ok(Frame { bytes, fds })
        }
        _ => Err(malformed("unknown tag")),
    }
}

/// A socket timeout (`SO_RCVTIMEO`/`SO_SNDTIMEO`) of `d`; zero means none.
pub fn timeval(d: std::time::Duration) -> nix::sys::time::TimeVal {
    nix::sys::time::TimeVal::new(
        i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        i64::from(d.subsec_micros()),
    )
}

/// Shuts a connection down both ways: the peer sees the end, and a thread blocked
/// receiving on it wakes. Best effort (the peer may be gone already).
pub fn shutdown(sock: BorrowedFd<'_>) {
    let _ = socket::shutdown(sock.as_raw_fd(), socket::Shutdown::Both);
}

/// A connected pair (for tests and in-process use).
pub fn pair() -> Result<(OwnedFd, OwnedFd), TransportError> {
    Ok(socket::socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )?)
}

/// A new Unix `SOCK_SEQPACKET` socket (close-on-exec).
fn seqpacket() -> Result<OwnedFd, TransportError> {
    Ok(socket::socket(
        AddressFamily::Unix,
        SockType::SeqPacket,
        SockFlag::SOCK_CLOEXEC,
        None,
    )?)
}

/// Creates a listening socket at `path` with mode 0660 (set before `listen`, so no
/// client can connect under looser permissions). A stale socket left at `path` by a
/// service that died is replaced; a socket someone still serves on (`EADDRINUSE`) or any
/// other file there is an error.
pub fn listen(path: &Path) -> Result<OwnedFd, TransportError> {
    let sock = seqpacket()?;
    let addr = UnixAddr::new(path)?;
    match socket::bind(sock.as_raw_fd(), &addr) {
        Err(Errno::EADDRINUSE) if is_stale_socket(path) => {
            std::fs::remove_file(path)
                .map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)))?;
            socket::bind(sock.as_raw_fd(), &addr)?;
        }
        r => r?,
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660))
        .map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)))?;
    socket::listen(&sock, Backlog::new(64).unwrap_or(Backlog::MAXCONN))?;
    Ok(sock)
}

/// Whether `path` is a socket nobody listens on (a connection is refused).
fn is_stale_socket(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    let is_socket = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket());
    is_socket && matches!(connect(path), Err(TransportError::Io(Errno::ECONNREFUSED)))
}

/// Accepts one connection (close-on-exec).
pub fn accept(listener: BorrowedFd<'_>) -> Result<OwnedFd, TransportError> {
    loop {
        match socket::accept4(listener.as_raw_fd(), SockFlag::SOCK_CLOEXEC) {
            // SAFETY: accept4 returned a new descriptor that nothing else owns.
            Ok(fd) => return Ok(unsafe { OwnedFd::from_raw_fd(fd) }),
            Err(Errno::EINTR | Errno::ECONNABORTED) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Connects to a service socket (close-on-exec).
pub fn connect(path: &Path) -> Result<OwnedFd, TransportError> {
    let sock = seqpacket()?;
    socket::connect(sock.as_raw_fd(), &UnixAddr::new(path)?)?;
    Ok(sock)
}

/// Who may connect: the users of `allowed_uids` (none given: the service's own user),
/// and members of `allowed_gids` (the peer's primary gid, as `SO_PEERCRED` reports it).
#[derive(Clone, Debug, Default)]
pub struct PeerPolicy {
    /// Users who may connect; empty means the service's own user.
    pub allowed_uids: Vec<u32>,
    /// Groups whose members may connect, whatever their user.
    pub allowed_gids: Vec<u32>,
}

/// A peer the policy refused.
#[derive(Debug, thiserror::Error)]
#[error("peer uid {uid} gid {gid} (pid {pid}) not allowed")]
pub struct PeerRefused {
    /// The peer's uid.
    pub uid: u32,
    /// The peer's gid.
    pub gid: u32,
    /// The peer's pid.
    pub pid: i32,
}

impl PeerPolicy {
    /// Checks the peer of a connected socket with `SO_PEERCRED`; its uid when allowed.
    pub fn check(&self, conn: &impl AsFd) -> Result<u32, PeerRefused> {
        let cred = socket::getsockopt(conn, socket::sockopt::PeerCredentials).map_err(|_| {
            PeerRefused {
                uid: u32::MAX,
                gid: u32::MAX,
                pid: -1,
            }
        })?;
        let (uid, gid) = (cred.uid(), cred.gid());
        let user_allowed = if self.allowed_uids.is_empty() {
            uid == nix::unistd::geteuid().as_raw()
        } else {
            self.allowed_uids.contains(&uid)
        };
        if user_allowed || self.allowed_gids.contains(&gid) {
            Ok(uid)
        } else {
            Err(PeerRefused {
                uid,
                gid,
                pid: cred.pid(),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    enum Msg {
        Ping(u64),
        Text(String, Vec<u32>),
    }

    #[test]
    fn round_trip_with_fds() {
        let (a, b) = pair().unwrap();
        let msg = Msg::Text("vnpu".into(), vec![1, 2, 3]);
        let (r, w) = nix::unistd::pipe().unwrap();
        send(a.as_fd(), &encode(&msg).unwrap(), &[r.as_fd(), w.as_fd()]).unwrap();
        let frame = recv(b.as_fd()).unwrap();
        assert_eq!(decode::<Msg>(&frame.bytes).unwrap(), msg);
        assert_eq!(frame.fds.len(), 2);
        let flags = nix::fcntl::fcntl(&frame.fds[0], nix::fcntl::FcntlArg::F_GETFD).unwrap();
        assert!(
            flags & libc::FD_CLOEXEC != 0,
            "received fds are close-on-exec"
        );
        // The received write end works.
        nix::unistd::write(&frame.fds[1], b"x").unwrap();
        let mut buf = [0u8; 1];
        nix::unistd::read(&r, &mut buf).unwrap();
        assert_eq!(&buf, b"x");
    }

    #[test]
    fn truncated_and_garbage_bodies_rejected() {
        let bytes = encode(&Msg::Text("hello".into(), vec![7; 10])).unwrap();
        for cut in 0..bytes.len() {
            assert!(decode::<Msg>(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut trailing = bytes.clone();
        trailing.push(0);
        assert!(matches!(
            decode::<Msg>(&trailing),
            Err(TransportError::Malformed(_))
        ));
        assert!(decode::<Msg>(&[0xFF; 16]).is_err());
        // A length prefix claiming far more than the body holds.
        assert!(decode::<Msg>(&[1, 0xFF, 0xFF, 0xFF, 0xFF, 0x0F]).is_err());
    }

    #[test]
    fn oversized_message_rejected_and_its_fds_closed() {
        let (a, b) = pair().unwrap();
        // Raise the send buffer so the kernel accepts the oversized packet and the
        // receiver is the one to refuse it.
        socket::setsockopt(&a, socket::sockopt::SndBuf, &(4 * MAX_MESSAGE)).unwrap();
        let huge = vec![0u8; MAX_LARGE_MESSAGE + 1];
        assert!(matches!(
            send(a.as_fd(), &huge, &[]),
            Err(TransportError::Oversized)
        ));
        let big = vec![0u8; MAX_MESSAGE + 100];
        assert!(matches!(
            refused_and_closed(&a, &b, &big, 1),
            TransportError::Oversized
        ));
    }

    /// A body too long for one packet crosses in a memfd, whole, with the message's own
    /// descriptors beside it.
    #[test]
    fn large_message_travels_in_a_memfd() {
        let (a, b) = pair().unwrap();
        let msg = Msg::Text("big".into(), (0..200_000).collect());
        let bytes = encode(&msg).unwrap();
        assert!(bytes.len() > MAX_MESSAGE);
        let (r, _w) = nix::unistd::pipe().unwrap();
        let sender = std::thread::spawn(move || send(a.as_fd(), &bytes, &[r.as_fd()]));
        let frame = recv(b.as_fd()).unwrap();
        sender.join().unwrap().unwrap();
        assert_eq!(decode::<Msg>(&frame.bytes).unwrap(), msg);
        assert_eq!(frame.fds.len(), 1, "the body's memfd is not handed on");
    }

    /// A memfd frame that lies about its length, or has no descriptor, is refused and
    /// every descriptor it carried is closed.
    #[test]
    fn lying_memfd_frames_refused() {
        let (a, b) = pair().unwrap();
        let mut head = [0u8; 9];
        head[0] = IN_MEMFD;
        head[1..].copy_from_slice(&100u64.to_le_bytes());
        // No descriptor at all.
        send_packet(a.as_fd(), &[IoSlice::new(&head)], &[]).unwrap();
        assert!(matches!(recv(b.as_fd()), Err(TransportError::Malformed(_))));
        // A body of another length (the pipe's read end also rides along).
        let body = body_memfd(&[7u8; 10]).unwrap();
        let (r, w) = nix::unistd::pipe().unwrap();
        send_packet(
            a.as_fd(),
            &[IoSlice::new(&head)],
            &[r.as_fd(), body.as_fd()],
        )
        .unwrap();
        drop(r);
        assert!(matches!(recv(b.as_fd()), Err(TransportError::Malformed(_))));
        assert_only_read_end_closed(&w);
        // A declared length past the bound.
        head[1..].copy_from_slice(&u64::MAX.to_le_bytes());
        send_packet(a.as_fd(), &[IoSlice::new(&head)], &[body.as_fd()]).unwrap();
        assert!(matches!(recv(b.as_fd()), Err(TransportError::Oversized)));
        // An unknown tag.
        send_packet(a.as_fd(), &[IoSlice::new(&[9u8, 1, 2])], &[]).unwrap();
        assert!(matches!(recv(b.as_fd()), Err(TransportError::Malformed(_))));
    }

    #[test]
    fn too_many_fds_rejected_and_closed() {
        let (a, b) = pair().unwrap();
        assert!(matches!(
            refused_and_closed(&a, &b, b"x", MAX_FDS + 1),
            TransportError::TooManyFds
        ));
    }

    /// Sends `bytes` with `copies` of a pipe's read end past [`send`]'s checks, and
    /// returns the error `recv` gives; asserts that every copy received was closed.
    fn refused_and_closed(a: &OwnedFd, b: &OwnedFd, bytes: &[u8], copies: usize) -> TransportError {
        let (r, w) = nix::unistd::pipe().unwrap();
        let raw = vec![r.as_raw_fd(); copies];
        socket::sendmsg::<UnixAddr>(
            a.as_raw_fd(),
            &[IoSlice::new(bytes)],
            &[ControlMessage::ScmRights(&raw)],
            MsgFlags::empty(),
            None,
        )
        .unwrap();
        drop(r);
        let err = recv(b.as_fd()).unwrap_err();
        assert_only_read_end_closed(&w);
        err
    }

    #[test]
    fn handshake_accepts_our_version_and_refuses_others() {
        let (a, b) = pair().unwrap();
        let server = std::thread::spawn(move || handshake_server(b.as_fd(), "vnpu-0"));
        assert_eq!(handshake_client(a.as_fd()).unwrap(), "vnpu-0");
        server.join().unwrap().unwrap();

        let (a, b) = pair().unwrap();
        let old = Hello {
            magic: MAGIC,
            version: PROTOCOL_VERSION + 1,
        };
        send(a.as_fd(), &encode(&old).unwrap(), &[]).unwrap();
        assert!(matches!(
            handshake_server(b.as_fd(), "vnpu-0"),
            Err(TransportError::Handshake(_))
        ));
        let reply = recv(a.as_fd()).unwrap();
        assert!(matches!(
            decode::<Welcome>(&reply.bytes).unwrap(),
            Welcome::Refused(_)
        ));
    }

    #[test]
    fn closed_peer_is_reported() {
        let (a, b) = pair().unwrap();
        drop(a);
        assert!(matches!(recv(b.as_fd()), Err(TransportError::Closed)));
    }

    #[test]
    fn listener_mode_and_peer_policy() {
        let dir = std::env::temp_dir().join(format!("vnpu-transport-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("s");
        let _ = std::fs::remove_file(&path);
        let l = listen(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o660);
        // Someone serves there: a second service is refused.
        assert!(matches!(
            listen(&path),
            Err(TransportError::Io(Errno::EADDRINUSE))
        ));
        let c = connect(&path).unwrap();
        let s = accept(l.as_fd()).unwrap();
        assert!(PeerPolicy::default().check(&s).is_ok());
        let me = nix::unistd::geteuid().as_raw();
        let group = nix::unistd::getegid().as_raw();
        let others = PeerPolicy {
            allowed_uids: vec![me.wrapping_add(1)],
            allowed_gids: vec![],
        };
        assert!(others.check(&s).is_err());
        let by_group = PeerPolicy {
            allowed_uids: vec![me.wrapping_add(1)],
            allowed_gids: vec![group],
        };
        assert!(by_group.check(&s).is_ok());
        drop(c);
        // The service died and left its socket: the next one replaces it.
        drop(l);
        let l = listen(&path).unwrap();
        assert!(connect(&path).is_ok());
        drop(l);
        // Any other file is left alone.
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, b"not a socket").unwrap();
        assert!(listen(&path).is_err());
        assert_eq!(std::fs::read(&path).unwrap(), b"not a socket");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Every copy of the pipe's read end was received and closed: a write gets EPIPE.
    fn assert_only_read_end_closed(w: &OwnedFd) {
        assert_eq!(nix::unistd::write(w, b"x"), Err(Errno::EPIPE));
    }
}
