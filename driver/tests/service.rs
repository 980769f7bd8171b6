//! The driver as a service: each test starts a real `vnpu serve` child process on a temp
//! socket, waits for its readiness line (never a sleep) and talks to it as a client.

mod common;

use std::io::{BufRead, BufReader, IoSlice};
use std::os::fd::{AsFd, AsRawFd};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::socket::{self, ControlMessage, MsgFlags, UnixAddr};
use vnpu_driver::conformance::{
    prepare_plain, run_case_opts, ExecOptions, ExecPath, MemoryMode, Verdict,
};
use vnpu_driver::device::IDevice;
use vnpu_driver::hal::{DeviceStatus, ErrorStatus};
use vnpu_driver::service::client::RemoteDevice;
use vnpu_driver::service::protocol::{Call, Reply, Request, Response};
use vnpu_driver::service::transport::{self, Hello, Welcome, MAGIC, MAX_MESSAGE, PROTOCOL_VERSION};

/// A `vnpu serve` child on a socket in its own temp directory; killed when dropped.
struct Service {
    child: Child,
    dir: PathBuf,
    socket: PathBuf,
}

impl Service {
    fn start(tag: &str) -> Service {
        let dir = std::env::temp_dir().join(format!("vnpu-service-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("vnpu.sock");
        let mut child = Command::new(env!("CARGO_BIN_EXE_vnpu"))
            .arg("serve")
            .arg("--socket")
            .arg(&socket)
            .stdout(Stdio::piped())
            .spawn()
            .expect("start vnpu serve");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert!(
            line.starts_with("vnpu: serving ")
                && line.trim_end().ends_with(&*socket.to_string_lossy()),
            "readiness line: {line:?}"
        );
        Service { child, dir, socket }
    }

    fn connect(&self) -> RemoteDevice {
        RemoteDevice::connect(&self.socket, Duration::from_secs(10)).expect("connect")
    }

    fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The device queries give the same answers over the socket as in process, including
/// getSupportedOperations for every V1_0 corpus model.
#[test]
fn remote_queries_match_local() {
    let service = Service::start("queries");
    let remote = service.connect();
    let local = common::device();
    assert_eq!(remote.name(), local.name());
    assert_eq!(remote.get_capabilities_1_3(), local.get_capabilities_1_3());
    assert_eq!(remote.get_version_string(), local.get_version_string());
    assert_eq!(remote.get_type(), local.get_type());
    assert_eq!(remote.get_status(), DeviceStatus::Available);
    assert_eq!(
        remote.get_supported_extensions(),
        local.get_supported_extensions()
    );
    assert_eq!(
        remote.get_number_of_cache_files_needed(),
        local.get_number_of_cache_files_needed()
    );
    let cases = common::cases("V1_0.jsonl.gz");
    assert!(!cases.is_empty());
    for case in &cases {
        assert_eq!(
            remote.get_supported_operations_1_3(&case.model),
            local.get_supported_operations_1_3(&case.model),
            "{}",
            case.name
        );
    }
}

/// The V1_0 corpus gives the same verdicts through a `RemoteDevice` as in process, on the
/// synchronous execution path (the one remote so far), request pools passed as fds.
#[test]
fn remote_matches_local_sync() {
    let service = Service::start("verdicts");
    let remote = service.connect();
    let local = common::device();
    let exec = ExecOptions {
        path: ExecPath::Sync,
        memory: MemoryMode::Shared,
    };
    let mut passed = 0;
    for case in common::cases("V1_0.jsonl.gz") {
        let here = run_case_opts(local.as_ref(), &case, &prepare_plain, exec);
        let there = run_case_opts(&remote, &case, &prepare_plain, exec);
        assert_eq!(there.verdict, here.verdict, "{}", case.name);
        assert_eq!(there.outputs.len(), here.outputs.len(), "{}", case.name);
        passed += usize::from(matches!(here.verdict, Verdict::Pass));
    }
    assert!(passed > 0);
}

fn raw_client(service: &Service) -> std::os::fd::OwnedFd {
    let sock = transport::connect(&service.socket).unwrap();
    let tv = nix::sys::time::TimeVal::new(10, 0);
    socket::setsockopt(&sock, socket::sockopt::ReceiveTimeout, &tv).unwrap();
    sock
}

fn reply(sock: &std::os::fd::OwnedFd) -> Response {
    let frame = transport::recv(sock.as_fd()).expect("a reply");
    assert!(frame.fds.is_empty());
    transport::decode(&frame.bytes).expect("a well-formed reply")
}

/// Random and truncated messages, wrong versions, descriptors where none are expected and
/// oversized messages get errors (a refusal or a closed connection), never a crash; a
/// client connected all along is unaffected, and refused descriptors are closed.
#[test]
fn client_garbage() {
    let mut service = Service::start("garbage");
    let bystander = service.connect();
    let version = bystander.get_version_string();

    // Garbage instead of a hello: refused, connection closed.
    let sock = raw_client(&service);
    transport::send(sock.as_fd(), b"\xFF\xFE garbage", &[]).unwrap();
    let r = transport::recv(sock.as_fd()).unwrap();
    assert!(matches!(
        transport::decode::<Welcome>(&r.bytes).unwrap(),
        Welcome::Refused(_)
    ));
    assert!(matches!(
        transport::recv(sock.as_fd()),
        Err(transport::TransportError::Closed)
    ));

    // A wrong protocol version: refused.
    let sock = raw_client(&service);
    let hello = Hello {
        magic: MAGIC,
        version: PROTOCOL_VERSION + 7,
    };
    transport::send(sock.as_fd(), &transport::encode(&hello).unwrap(), &[]).unwrap();
    let r = transport::recv(sock.as_fd()).unwrap();
    assert!(matches!(
        transport::decode::<Welcome>(&r.bytes).unwrap(),
        Welcome::Refused(_)
    ));

    // After a good handshake: random, truncated, fd-carrying and oversized messages.
    let sock = raw_client(&service);
    transport::handshake_client(sock.as_fd()).unwrap();
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    for len in 1..200usize {
        let bytes: Vec<u8> = (0..len)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed as u8
            })
            .collect();
        transport::send(sock.as_fd(), &bytes, &[]).unwrap();
        // Random bytes may happen to decode as a valid request: any reply is fine, as
        // long as there is one.
        let _ = reply(&sock);
    }
    let good = transport::encode(&Request {
        id: 5,
        call: Call::GetStatus,
    })
    .unwrap();
    for cut in 1..good.len() {
        transport::send(sock.as_fd(), &good[..cut], &[]).unwrap();
        assert!(matches!(reply(&sock).reply, Reply::Refused(_)), "cut {cut}");
    }
    let mut trailing = good.clone();
    trailing.extend_from_slice(b"xx");
    transport::send(sock.as_fd(), &trailing, &[]).unwrap();
    assert!(matches!(reply(&sock).reply, Reply::Refused(_)));

    // Descriptors where none are expected: refused, and closed by the service.
    let (r, w) = nix::unistd::pipe().unwrap();
    transport::send(sock.as_fd(), &good, &[r.as_fd()]).unwrap();
    drop(r);
    let resp = reply(&sock);
    assert_eq!(resp.id, 5);
    assert!(matches!(resp.reply, Reply::Refused(_)));
    assert_eq!(nix::unistd::write(&w, b"x"), Err(nix::errno::Errno::EPIPE));

    // Oversized: refused (the kernel lets it through once the send buffer allows).
    socket::setsockopt(&sock, socket::sockopt::SndBuf, &(4 * MAX_MESSAGE)).unwrap();
    let big = vec![0u8; MAX_MESSAGE + 1000];
    socket::sendmsg::<UnixAddr>(
        sock.as_raw_fd(),
        &[IoSlice::new(&big)],
        &[] as &[ControlMessage],
        MsgFlags::empty(),
        None,
    )
    .unwrap();
    assert!(matches!(reply(&sock).reply, Reply::Refused(_)));

    // The same connection still answers a good request.
    transport::send(sock.as_fd(), &good, &[]).unwrap();
    assert_eq!(reply(&sock).reply, Reply::Status(DeviceStatus::Available));

    // A client vanishing mid-message costs nothing.
    drop(sock);
    assert!(service.alive());
    assert_eq!(bystander.get_version_string(), version);
    assert_eq!(bystander.get_status(), DeviceStatus::Available);
}

/// A service that dies or stops answering gives the client errors within a bound.
#[test]
fn service_killed() {
    let mut service = Service::start("killed");
    let remote = RemoteDevice::connect(&service.socket, Duration::from_secs(1)).unwrap();
    assert_eq!(remote.get_status(), DeviceStatus::Available);

    // Stopped (hung): each call fails at the timeout.
    let pid = libc::pid_t::try_from(service.child.id()).unwrap();
    // SAFETY: signals our own child, which is still alive (waited for only below).
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    // A signal is delivered asynchronously: wait until the child has really stopped
    // (WUNTRACED reports the stop without reaping it).
    let mut status = 0;
    assert_eq!(
        // SAFETY: waits on our own child; `status` is a valid out pointer.
        unsafe { libc::waitpid(pid, &mut status, libc::WUNTRACED) },
        pid
    );
    assert!(libc::WIFSTOPPED(status));
    let t = Instant::now();
    assert_eq!(remote.get_version_string().0, ErrorStatus::GeneralFailure);
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());

    // Killed: errors at once.
    service.child.kill().unwrap();
    service.child.wait().unwrap();
    let t = Instant::now();
    assert_eq!(remote.get_status(), DeviceStatus::Offline);
    assert_eq!(remote.get_capabilities_1_3().0, ErrorStatus::GeneralFailure);
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    assert!(RemoteDevice::connect(&service.socket, Duration::from_secs(1)).is_err());
}
