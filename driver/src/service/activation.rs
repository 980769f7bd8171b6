//! Systemd-style start-up: a listening socket inherited from a service manager (socket
//! activation: `LISTEN_PID`, `LISTEN_FDS`, descriptors from 3) and the readiness
//! notification (`NOTIFY_SOCKET`), so `vnpu serve` can be started on demand and
//! scripts know when it listens without sleeping.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use nix::sys::socket::{self, sockopt, MsgFlags, SockFlag, SockType, UnixAddr};

/// The first descriptor a service manager passes.
const SD_LISTEN_FDS_START: i32 = 3;

/// Why an inherited socket cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ActivationError {
    /// The environment names a descriptor count other than one.
    #[error("LISTEN_FDS={0}: vnpu serve takes exactly one socket")]
    FdCount(String),
    /// The inherited descriptor is not a listening `SOCK_SEQPACKET` socket.
    #[error("inherited descriptor 3 is not a listening SOCK_SEQPACKET socket")]
    NotAListener,
}

/// The listening socket the service manager passed to this process, if it passed one
/// (`LISTEN_PID` is this process). The variables are removed either way, so a child
/// never mistakes them for its own.
pub fn inherited_listener() -> Result<Option<OwnedFd>, ActivationError> {
    let pid = std::env::var("LISTEN_PID").ok();
    let fds = std::env::var("LISTEN_FDS").ok();
    // SAFETY: called at start-up, before this process starts any other thread that could
    // read the environment concurrently.
    unsafe {
        std::env::remove_var("LISTEN_PID");
        std::env::remove_var("LISTEN_FDS");
        std::env::remove_var("LISTEN_FDNAMES");
    }
    let ours = pid.and_then(|p| p.parse::<u32>().ok()) == Some(std::process::id());
    let Some(fds) = fds.filter(|_| ours) else {
        return Ok(None);
    };
    if fds != "1" {
        return Err(ActivationError::FdCount(fds));
    }
    // The protocol hands this process descriptor 3; check it before owning it.
    let raw = SD_LISTEN_FDS_START;
    // SAFETY: F_GETFD only queries the descriptor table; any integer is harmless.
    if unsafe { libc::fcntl(raw, libc::F_GETFD) } < 0 {
        return Err(ActivationError::NotAListener);
    }
    // The socket-activation protocol (LISTEN_PID names this process) hands it over.
    // SAFETY: descriptor 3 is open (checked above), ours, and used by nothing else here.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let seqpacket = socket::getsockopt(&fd, sockopt::SockType).ok() == Some(SockType::SeqPacket);
    let listening = socket::getsockopt(&fd, sockopt::AcceptConn).unwrap_or(false);
    if !seqpacket || !listening {
        return Err(ActivationError::NotAListener);
    }
    // Not to be inherited by anything this process starts.
    nix::fcntl::fcntl(
        &fd,
        nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
    )
    .map_err(|_| ActivationError::NotAListener)?;
    Ok(Some(fd))
}

/// Tells the service manager the service is ready (`READY=1` to `NOTIFY_SOCKET`), if
/// one asked; best effort.
pub fn notify_ready() {
    let Ok(path) = std::env::var("NOTIFY_SOCKET") else {
        return;
    };
    let addr = match path.strip_prefix('@') {
        Some(name) => UnixAddr::new_abstract(name.as_bytes()),
        None => UnixAddr::new(path.as_str()),
    };
    let Ok(addr) = addr else {
        return;
    };
    let Ok(sock) = socket::socket(
        socket::AddressFamily::Unix,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        None,
    ) else {
        return;
    };
    let _ = socket::sendto(sock.as_raw_fd(), b"READY=1", &addr, MsgFlags::empty());
}
