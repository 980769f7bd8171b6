//! The driver as a service: each test starts a real `vnpu serve` child process on a temp
//! socket, waits for its readiness line (never a sleep) and talks to it as a client.

mod common;

use common::Mode;

use common::service::{eventually, Service};

use std::io::{BufRead, BufReader, IoSlice};
use std::os::fd::{AsFd, AsRawFd};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::socket::{self, ControlMessage, MsgFlags, UnixAddr};
use vnpu_driver::conformance::{
    outputs_match, prepare_plain, run_case_opts, ExecOptions, ExecPath, MemoryMode, Verdict,
};
use vnpu_driver::device::PrepareArgs;
use vnpu_driver::device::{ExecutionSlot, IDevice};
use vnpu_driver::hal::{
    DeviceStatus, ErrorStatus, MeasureTiming, OptionalTimePoint, OptionalTimeoutDuration,
};
use vnpu_driver::service::client::RemoteDevice;
use vnpu_driver::service::protocol::{Call, Reply, Request, Response, ServiceUsage};
use vnpu_driver::service::transport::{self, Hello, Welcome, MAGIC, MAX_MESSAGE, PROTOCOL_VERSION};

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

/// The V1_0 corpus gives the same verdicts through a `RemoteDevice` as in process: on
/// the asynchronous path (callbacks as messages), the synchronous and the fenced paths,
/// and with driver-managed buffers and hardware buffers as the request's memory.
#[test]
fn remote_matches_local() {
    let service = Service::start("verdicts");
    let remote = service.connect();
    let local = common::device();
    let cases = common::cases("V1_0.jsonl.gz");
    let paths = [
        (ExecPath::Async, MemoryMode::Shared),
        (ExecPath::Sync, MemoryMode::Shared),
        (ExecPath::Fenced, MemoryMode::Shared),
        (ExecPath::Async, MemoryMode::Device),
        (ExecPath::Sync, MemoryMode::Blob),
    ];
    for (path, memory) in paths {
        let exec = ExecOptions {
            path,
            memory,
            ..Default::default()
        };
        let mut passed = 0;
        for case in &cases {
            let here = run_case_opts(local.as_ref(), case, &prepare_plain, exec);
            let there = run_case_opts(&remote, case, &prepare_plain, exec);
            assert_eq!(
                there.verdict, here.verdict,
                "{} ({path:?}, {memory:?})",
                case.name
            );
            assert_eq!(there.outputs.len(), here.outputs.len(), "{}", case.name);
            passed += usize::from(matches!(here.verdict, Verdict::Pass));
        }
        assert!(passed > 200, "{passed} passed ({path:?}, {memory:?})");
    }
    // Everything the client made is released in the service once dropped. Releases are
    // posted (no reply), and a call's worker may still hold its model for a moment after
    // replying, so the count reaches 0 soon after, not at once.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut usage = remote.usage().unwrap();
    while (usage.device.prepared_models, usage.device.buffers) != (0, 0)
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(10));
        usage = remote.usage().unwrap();
    }
    assert_eq!(usage.device.prepared_models, 0, "{usage:?}");
    assert_eq!(usage.device.buffers, 0, "{usage:?}");
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
    let case = &common::supported_cases("V1_0.jsonl.gz")[0];
    let (_, status, prepared) = prepare_plain(&remote, &case.model);
    assert_eq!(status, ErrorStatus::None);
    let prepared = prepared.unwrap();
    let (request, _pool, _) = case.make_request().unwrap();

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
    // An asynchronous execution: the launch fails at the timeout, and its callback is
    // notified once, with the failure.
    let t = Instant::now();
    let slot = ExecutionSlot::new();
    let ret = prepared.execute_1_3(
        &request,
        MeasureTiming::NO,
        OptionalTimePoint::NONE,
        OptionalTimeoutDuration::default(),
        Some(slot.clone()),
    );
    assert_eq!(ret, ErrorStatus::GeneralFailure);
    let notified = slot.wait_for(Duration::from_secs(5)).map(|n| n.0);
    assert_eq!(notified, Some(ErrorStatus::GeneralFailure));
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

/// A client process killed while its executions run costs the service nothing: it keeps
/// serving others, and its descriptors, prepared models, buffers and device memory return
/// to the baseline.
#[test]
fn client_killed_mid_execution() {
    let mut service = Service::start("client-killed");
    let monitor = service.connect();
    let baseline_fds = service.open_fds();
    let baseline = monitor.usage().unwrap();
    assert_eq!(baseline.connections, 1);

    // The victim: a whole-corpus conformance run over the socket, with driver-managed
    // buffers so that it owns buffers as well as prepared models.
    let corpus = common::corpus_path("V1_0.jsonl.gz");
    let mut victim = Command::new(env!("CARGO_BIN_EXE_vnpu"))
        .args(["conformance", "--memory", "device", "--remote"])
        .arg(&service.socket)
        .arg(&corpus)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let busy = |u: &ServiceUsage| u.connections == 2 && u.device.prepared_models > 0;
    assert!(
        eventually(Duration::from_secs(60), || busy(&monitor.usage().unwrap())),
        "the victim never got going: {:?}",
        monitor.usage()
    );
    victim.kill().unwrap();
    victim.wait().unwrap();

    let settled = |u: &ServiceUsage| {
        u.connections == 1
            && u.device.prepared_models == baseline.device.prepared_models
            && u.device.buffers == baseline.device.buffers
            && u.device.dram_bytes == baseline.device.dram_bytes
            && u.device.iova_bytes == baseline.device.iova_bytes
    };
    assert!(
        eventually(Duration::from_secs(10), || settled(
            &monitor.usage().unwrap()
        )),
        "after the kill: {:?}, baseline {baseline:?}",
        monitor.usage()
    );
    assert!(
        eventually(Duration::from_secs(10), || service.open_fds()
            == baseline_fds),
        "descriptors: {} now, {baseline_fds} before",
        service.open_fds()
    );
    assert!(service.alive());

    // Still serving: a case runs correctly for the surviving client.
    let case = &common::cases("V1_0.jsonl.gz")[0];
    let report = run_case_opts(&monitor, case, &prepare_plain, ExecOptions::default());
    assert_eq!(report.verdict, Verdict::Pass, "{}", case.name);
}

/// 16 clients, each on its own connection, run 100 asynchronous executions each at the
/// same time; every result is checked against the corpus's reference.
#[test]
fn many_clients() {
    let service = Service::start("many");
    let cases = common::supported_cases("V1_0.jsonl.gz");
    let step = cases.len() / 16;
    let picked: Vec<_> = cases.into_iter().step_by(step.max(1)).take(16).collect();
    assert_eq!(picked.len(), 16);
    let socket = Arc::new(service.socket.clone());
    let clients: Vec<_> = picked
        .into_iter()
        .map(|case| {
            let socket = socket.clone();
            std::thread::spawn(move || {
                let remote = RemoteDevice::connect(&socket, Duration::from_secs(60)).unwrap();
                let (_, status, prepared) = prepare_plain(&remote, &case.model);
                assert_eq!(status, ErrorStatus::None, "{}", case.name);
                let prepared = prepared.unwrap();
                for i in 0..100 {
                    // A fresh request each time, so a stale output cannot pass.
                    let (request, pool, locations) = case.make_request().unwrap();
                    let (status, _, _) =
                        common::execute(&prepared, &request, Mode::Async, MeasureTiming::NO);
                    assert_eq!(status, ErrorStatus::None, "{} #{i}", case.name);
                    assert!(
                        outputs_match(&case, &pool, &locations),
                        "{} #{i}: wrong outputs",
                        case.name
                    );
                }
            })
        })
        .collect();
    for c in clients {
        c.join().unwrap();
    }
}

/// The peer policy: a service that admits only another user refuses us; admitting our
/// group lets us in.
#[test]
fn peer_credentials() {
    let me = nix::unistd::geteuid().as_raw();
    let other = me.wrapping_add(4242).to_string();
    let service = Service::start_with("peer-refused", &["--allow-uid", &other]);
    assert!(
        RemoteDevice::connect(&service.socket, Duration::from_secs(5)).is_err(),
        "a refused peer must not get through the handshake"
    );
    // The service carries on and admits whom the policy allows.
    let group = nix::unistd::getegid().as_raw().to_string();
    let service = Service::start_with(
        "peer-group",
        &["--allow-uid", &other, "--allow-gid", &group],
    );
    assert_eq!(service.connect().get_status(), DeviceStatus::Available);
}

/// A client that sends requests and never reads the replies: the service stops reading
/// it once its bounded outbox is full (the client's sends then block), its memory stays
/// bounded, and other clients are served meanwhile.
#[test]
fn slow_reader() {
    let service = Service::start("slow-reader");
    let bystander = service.connect();
    let baseline_kib = service.rss_kib();

    let sock = raw_client(&service);
    transport::handshake_client(sock.as_fd()).unwrap();
    let tv = nix::sys::time::TimeVal::new(1, 0);
    socket::setsockopt(&sock, socket::sockopt::SendTimeout, &tv).unwrap();
    let request = transport::encode(&Request {
        id: 1,
        call: Call::GetCapabilities,
    })
    .unwrap();
    let mut sent = 0usize;
    let blocked = loop {
        match transport::send(sock.as_fd(), &request, &[]) {
            Ok(()) => sent += 1,
            Err(transport::TransportError::Io(nix::errno::Errno::EAGAIN)) => break true,
            Err(e) => panic!("send: {e}"),
        }
        if sent == 1_000_000 {
            break false;
        }
    };
    assert!(
        blocked,
        "the service kept reading a client that never reads"
    );
    let grown_kib = service.rss_kib().saturating_sub(baseline_kib);
    assert!(
        grown_kib < 64 * 1024,
        "the service grew {grown_kib} KiB for {sent} unread replies"
    );
    assert_eq!(bystander.get_status(), DeviceStatus::Available);
    drop(sock);
    assert!(
        eventually(Duration::from_secs(15), || bystander
            .usage()
            .is_ok_and(|u| u.connections == 1)),
        "the slow client's connection outlived it"
    );
}

/// A model too large for one socket packet (MobileNet with every weight inline,
/// CONSTANT_COPY, several MiB) crosses in a memfd and gives the same result as in
/// process.
#[test]
fn large_model_crosses_whole() {
    use vnpu_driver::hal::{DataLocation, OperandLifeTime};
    let service = Service::start("large");
    let remote = service.connect();
    let mut case = common::cases("V1_0.jsonl.gz")
        .into_iter()
        .find(|c| c.name.starts_with("mobilenet_224_gender_basic_fixed"))
        .expect("the MobileNet case");
    let pools: Vec<Vec<u8>> = case
        .model
        .pools
        .iter()
        .map(|p| vnpu_driver::memory::read_pool(p).unwrap())
        .collect();
    let model = &mut case.model;
    for op in &mut model.main.operands {
        if op.lifetime == OperandLifeTime::CONSTANT_REFERENCE {
            let loc = op.location;
            let start = loc.offset as usize;
            let bytes = &pools[loc.pool_index as usize][start..start + loc.length as usize];
            op.location = DataLocation {
                pool_index: 0,
                offset: u32::try_from(model.operand_values.len()).unwrap(),
                length: loc.length,
            };
            model.operand_values.extend_from_slice(bytes);
            op.lifetime = OperandLifeTime::CONSTANT_COPY;
        }
    }
    model.pools.clear();
    assert!(
        model.operand_values.len() > transport::MAX_MESSAGE,
        "{} bytes inline",
        model.operand_values.len()
    );
    let local = common::device();
    let here = run_case_opts(
        local.as_ref(),
        &case,
        &prepare_plain,
        ExecOptions::default(),
    );
    let there = run_case_opts(&remote, &case, &prepare_plain, ExecOptions::default());
    assert_eq!(here.verdict, Verdict::Pass);
    assert_eq!(there.verdict, here.verdict);
}

/// Socket activation: a service manager's listening socket (descriptor 3, LISTEN_PID,
/// LISTEN_FDS) is served, readiness is announced on NOTIFY_SOCKET; and a socket left by a
/// service that died is replaced by the next one.
#[test]
fn socket_activation_and_stale_socket() {
    use std::os::unix::process::CommandExt;
    let dir = std::env::temp_dir().join(format!("vnpu-service-activation-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("vnpu.sock");
    let listener = transport::listen(&path).unwrap();
    let notify_path = dir.join("notify");
    let notify = socket::socket(
        socket::AddressFamily::Unix,
        socket::SockType::Datagram,
        socket::SockFlag::SOCK_CLOEXEC,
        None,
    )
    .unwrap();
    socket::bind(notify.as_raw_fd(), &UnixAddr::new(&notify_path).unwrap()).unwrap();

    let raw = listener.as_raw_fd();
    let mut cmd = Command::new("/bin/sh");
    cmd.args(["-c", "LISTEN_PID=$$ LISTEN_FDS=1 exec \"$0\" serve"])
        .arg(env!("CARGO_BIN_EXE_vnpu"))
        .env("NOTIFY_SOCKET", &notify_path)
        .stdout(Stdio::piped());
    // Puts the listener at descriptor 3 without close-on-exec, as a service manager does.
    // SAFETY: only dup2/fcntl (async-signal-safe) run between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            // Already descriptor 3 (dup2 would leave close-on-exec set): clear the flag.
            let placed = if raw == 3 {
                libc::fcntl(3, libc::F_SETFD, 0)
            } else {
                libc::dup2(raw, 3)
            };
            if placed < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap();
    drop(listener);
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(
        line.contains("inherited socket"),
        "readiness line: {line:?}"
    );
    let mut ready = [0u8; 64];
    let tv = nix::sys::time::TimeVal::new(10, 0);
    socket::setsockopt(&notify, socket::sockopt::ReceiveTimeout, &tv).unwrap();
    let n = nix::unistd::read(&notify, &mut ready).unwrap();
    assert_eq!(&ready[..n], b"READY=1");
    let remote = RemoteDevice::connect(&path, Duration::from_secs(10)).unwrap();
    assert_eq!(remote.get_status(), DeviceStatus::Available);
    drop(remote);
    child.kill().unwrap();
    child.wait().unwrap();

    // The activated service died; its socket file stays. `vnpu serve --socket` replaces
    // it (a live one would be refused: see the transport's tests).
    assert!(path.exists());
    let mut child = Command::new(env!("CARGO_BIN_EXE_vnpu"))
        .args(["serve", "--socket"])
        .arg(&path)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(
        line.starts_with("vnpu: serving "),
        "readiness line: {line:?}"
    );
    let remote = RemoteDevice::connect(&path, Duration::from_secs(10)).unwrap();
    assert_eq!(remote.get_status(), DeviceStatus::Available);
    child.kill().unwrap();
    child.wait().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Connections that connect and never send a hello (far more than the service's caps)
/// lock nobody out: a real client connects and is served at once, and every silent one is
/// closed within the documented hello deadline.
#[test]
fn idle_connections_do_not_lock_out() {
    let service = Service::start("idle");
    let deadline = vnpu_driver::service::admission::AdmissionLimits::default().hello_timeout;
    let silent: Vec<_> = (0..300).map(|_| raw_client(&service)).collect();
    for _ in 0..3 {
        let remote = RemoteDevice::connect(&service.socket, Duration::from_secs(10)).unwrap();
        assert_eq!(remote.get_status(), DeviceStatus::Available);
        // The silent ones are not counted (a client of a previous round may still be
        // on its way out).
        let connections = remote.usage().unwrap().connections;
        assert!((1..=3).contains(&connections), "{connections}");
    }
    // Each silent connection ends: closed to make room, or at the hello deadline.
    let t = Instant::now();
    for sock in &silent {
        let tv = nix::sys::time::TimeVal::new(1, 0);
        socket::setsockopt(sock, socket::sockopt::ReceiveTimeout, &tv).unwrap();
        assert!(
            eventually(deadline * 3, || matches!(
                transport::recv(sock.as_fd()),
                Err(transport::TransportError::Closed)
            )),
            "a silent connection stayed open"
        );
    }
    assert!(t.elapsed() < deadline * 3, "{:?}", t.elapsed());
    // A client that connected and went idle after its hello still gets its calls answered.
    let idle = service.connect();
    std::thread::sleep(deadline + Duration::from_millis(500));
    assert_eq!(idle.get_status(), DeviceStatus::Available);
}

/// The server side of [`client_closing_mid_reply_never_kills_server`], run in a child
/// process of this test binary with SIGPIPE at its default action (kill), as a process
/// embedding the service might have it: not a test of its own.
#[test]
#[ignore = "the server process of client_closing_mid_reply_never_kills_server"]
fn sigpipe_default_server_process() {
    let Some(path) = std::env::var_os("VNPU_TEST_SIGPIPE_SOCKET") else {
        return;
    };
    // SAFETY: restores the default disposition of one signal, before any thread of ours.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let listener = transport::listen(std::path::Path::new(&path)).unwrap();
    let device = vnpu_driver::device::VnpuDevice::new().unwrap();
    let options = vnpu_driver::service::server::ServeOptions::new(device.name().to_string());
    vnpu_driver::service::server::serve(listener, device, options).unwrap();
}

/// Clients that close their connection while the service writes to it (replies, the
/// notification of launched work) never kill the service, even in a
/// process where SIGPIPE kills: every write to a client is MSG_NOSIGNAL.
#[test]
fn client_closing_mid_reply_never_kills_server() {
    let dir = std::env::temp_dir().join(format!("vnpu-sigpipe-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("s");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "sigpipe_default_server_process",
            "--ignored",
            "--nocapture",
        ])
        .env("VNPU_TEST_SIGPIPE_SOCKET", &path)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        eventually(Duration::from_secs(20), || RemoteDevice::connect(
            &path,
            Duration::from_secs(10)
        )
        .is_ok()),
        "the server process did not come up"
    );
    let case = &common::supported_cases("V1_0.jsonl.gz")[0];
    let hello = transport::encode(&Hello {
        magic: MAGIC,
        version: PROTOCOL_VERSION,
    })
    .unwrap();
    for round in 0..40 {
        let sock = transport::connect(&path).unwrap();
        transport::send(sock.as_fd(), &hello, &[]).unwrap();
        // Replies of every kind, then gone before they are read.
        let calls = [
            Call::GetCapabilities,
            Call::GetSupportedExtensions,
            Call::GetVersionString,
            Call::Usage,
        ];
        for (id, call) in calls.into_iter().enumerate() {
            let bytes = transport::encode(&Request {
                id: id as u64 + 1,
                call,
            })
            .unwrap();
            transport::send(sock.as_fd(), &bytes, &[]).unwrap();
        }
        if round % 4 == 1 {
            // More replies than the socket holds: the service blocks writing one, and the
            // client closes under it.
            let bytes = transport::encode(&Request {
                id: 99,
                call: Call::GetCapabilities,
            })
            .unwrap();
            for _ in 0..400 {
                if transport::send(sock.as_fd(), &bytes, &[]).is_err() {
                    break;
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if round % 2 == 0 {
            // Work whose notification comes after the client left.
            let remote = RemoteDevice::connect(&path, Duration::from_secs(10)).unwrap();
            let slot = vnpu_driver::device::PreparedModelSlot::new();
            // Every fourth time, with stream sockets whose peer is gone as its cache files
            // (read-write, as cache files must be): a save must never write there (that
            // would raise SIGPIPE).
            let (a, b) = socket::socketpair(
                socket::AddressFamily::Unix,
                socket::SockType::Stream,
                None,
                socket::SockFlag::SOCK_CLOEXEC,
            )
            .unwrap();
            drop(b);
            let a = Arc::new(a);
            let cache = if round % 4 == 0 {
                vec![vnpu_driver::hal::NativeHandle {
                    fds: vec![a],
                    ints: vec![],
                }]
            } else {
                vec![]
            };
            let _ = remote.prepare_model_1_3(PrepareArgs {
                model_cache: &cache,
                data_cache: &cache,
                token: &[round as u8; 32],
                ..PrepareArgs::new(&case.model, Some(slot.clone()))
            });
            if round % 4 == 0 {
                // This one is waited for: the save happens before its notification.
                let _ = slot.wait();
            }
            drop(remote);
        }
        drop(sock);
    }
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        child.try_wait().unwrap().is_none(),
        "the server died: {:?}",
        child.try_wait()
    );
    let remote = RemoteDevice::connect(&path, Duration::from_secs(10)).unwrap();
    assert_eq!(remote.get_status(), DeviceStatus::Available);
    child.kill().unwrap();
    child.wait().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A service that stops answering (SIGSTOP) is declared unresponsive after the first
/// timed-out call and a failed liveness check: every call outstanding then fails at once,
/// later ones without waiting, instead of each waiting its own timeout.
#[test]
fn hung_service_fails_outstanding_calls() {
    use vnpu_driver::service::client::LIVENESS_BOUND;
    let service = Service::start("hung");
    let timeout = Duration::from_secs(1);
    let remote = Arc::new(RemoteDevice::connect(&service.socket, timeout).unwrap());
    let case = &common::supported_cases("V1_0.jsonl.gz")[0];
    let (_, status, prepared) = prepare_plain(remote.as_ref(), &case.model);
    assert_eq!(status, ErrorStatus::None);
    let prepared = prepared.unwrap();
    assert!(remote.lost().is_none());

    let pid = libc::pid_t::try_from(service.child.id()).unwrap();
    // SAFETY: signals our own child, alive until `service` is dropped.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    let mut status = 0;
    assert_eq!(
        // SAFETY: waits on our own child for its stop only (WUNTRACED); `status` is valid.
        unsafe { libc::waitpid(pid, &mut status, libc::WUNTRACED) },
        pid
    );
    assert!(libc::WIFSTOPPED(status));

    // Four callers with ten calls each: without the liveness check each call would wait
    // its own timeout (10 s per caller).
    const CALLS: usize = 10;
    let t = Instant::now();
    let callers: Vec<_> = (0..4)
        .map(|k| {
            let prepared = prepared.clone();
            let remote = remote.clone();
            let (request, pool, _) = case.make_request().unwrap();
            std::thread::spawn(move || {
                let _pool = pool;
                (0..CALLS)
                    .map(|_| {
                        if k % 2 == 0 {
                            common::execute(&prepared, &request, Mode::Async, MeasureTiming::NO).0
                        } else {
                            remote.get_version_string().0
                        }
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    for c in callers {
        let statuses = c.join().unwrap();
        assert!(
            statuses.iter().all(|&s| s == ErrorStatus::GeneralFailure),
            "{statuses:?}"
        );
    }
    let bound = timeout + LIVENESS_BOUND + Duration::from_secs(3);
    assert!(t.elapsed() < bound, "{:?} (bound {bound:?})", t.elapsed());
    let why = remote.lost().expect("the service is declared lost");
    assert!(why.contains("unresponsive"), "{why}");
    // Later calls fail without waiting.
    let t = Instant::now();
    assert_eq!(remote.get_status(), DeviceStatus::Offline);
    assert!(t.elapsed() < timeout, "{:?}", t.elapsed());
    // SAFETY: as above; let it run again so that dropping `service` can kill and reap it.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
}

/// Prepares `model` on a raw connection (the handshake done) and returns its id there.
fn prepare_raw(sock: &std::os::fd::OwnedFd, model: &vnpu_driver::hal::Model) -> u64 {
    use vnpu_driver::hal::{ExecutionPreference, HalVersion, Priority};
    use vnpu_driver::service::protocol::{Notification, WireCache};
    assert!(model.pools.is_empty(), "a model with its values inline");
    let call = Call::PrepareModel {
        level: HalVersion::V1_3,
        model: Box::new(model.clone()),
        pools: Vec::new(),
        preference: ExecutionPreference::FAST_SINGLE_ANSWER,
        priority: Priority::MEDIUM,
        deadline: OptionalTimePoint::NONE,
        cache: WireCache {
            model_cache: Vec::new(),
            data_cache: Vec::new(),
            token: [0; vnpu_driver::hal::BYTE_SIZE_OF_CACHE_TOKEN],
        },
    };
    let bytes = transport::encode(&Request { id: 1, call }).unwrap();
    transport::send(sock.as_fd(), &bytes, &[]).unwrap();
    // The reply and the notification, in either order.
    let mut model_id = None;
    for _ in 0..2 {
        match reply(sock).reply {
            Reply::Launched(s) => assert_eq!(s, ErrorStatus::None),
            Reply::Notified(Notification::Prepared(ErrorStatus::None, Some(id))) => {
                model_id = Some(id)
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    model_id.expect("a prepared model")
}

/// Memories registered for executions on a connection, from a client that breaks the
/// rules: naming an id never registered, registering out of range, or naming a
/// forgotten one is refused (the connection carries on); a registered memory runs like
/// the memory itself, named by id on later executions without its descriptor.
#[test]
fn registered_memories_are_checked() {
    use vnpu_driver::service::protocol::{
        WireHandle, WireMemory, WirePool, WireRequest, REGISTERED_POOLS,
    };
    let service = Service::start("registered");
    let sock = raw_client(&service);
    transport::handshake_client(sock.as_fd()).unwrap();
    let case = vnpu_driver::conformance::lookup(&[common::corpus_path("V1_0.jsonl.gz")], "add")
        .expect("the ADD case");
    let model = prepare_raw(&sock, &case.model);
    let (request, pool, _) = case.make_request().unwrap();
    let wire_memory = || WireMemory {
        name: pool.name.clone(),
        size: pool.size,
        handle: WireHandle {
            fd_count: 1,
            ints: pool.handle.ints.clone(),
        },
    };
    let mut next = 10;
    let mut execute = |pools: Vec<WirePool>, forget: Vec<i32>| {
        let with_fd = pools.iter().any(|p| matches!(p, WirePool::Register(..)));
        let exec = WireRequest {
            model,
            request: Box::new(vnpu_driver::hal::Request {
                pools: Vec::new(),
                ..request.clone()
            }),
            pools,
            measure: MeasureTiming::NO,
            deadline: OptionalTimePoint::NONE,
            loop_timeout: OptionalTimeoutDuration::default(),
            forget,
        };
        next += 1;
        let bytes = transport::encode(&Request {
            id: next,
            call: Call::ExecuteSynchronously(exec),
        })
        .unwrap();
        let fds: Vec<_> = match with_fd {
            true => vec![pool.handle.fds[0].as_fd()],
            false => vec![],
        };
        transport::send(sock.as_fd(), &bytes, &fds).unwrap();
        let r = reply(&sock);
        assert_eq!(r.id, next);
        r.reply
    };
    let refused = |r: &Reply| matches!(r, Reply::Refused(_));
    let executed = |r: &Reply| matches!(r, Reply::Executed(ErrorStatus::None, ..));
    // Never registered.
    assert!(refused(&execute(vec![WirePool::Registered(0)], vec![])));
    // Out of range.
    for k in [-1, REGISTERED_POOLS, i32::MAX] {
        let r = execute(vec![WirePool::Register(k, wire_memory())], vec![]);
        assert!(refused(&r), "id {k}: {r:?}");
        assert!(refused(&execute(vec![WirePool::Registered(k)], vec![])));
    }
    // Registered, then named by id (again and again).
    let first = execute(vec![WirePool::Register(3, wire_memory())], vec![]);
    assert!(executed(&first), "{first:?}");
    for _ in 0..3 {
        assert_eq!(execute(vec![WirePool::Registered(3)], vec![]), first);
    }
    // Forgotten: refused from then on, even in the same message.
    let r = execute(vec![WirePool::Registered(3)], vec![3]);
    assert!(refused(&r), "{r:?}");
    assert!(refused(&execute(vec![WirePool::Registered(3)], vec![])));
    // Forgetting what is not registered is harmless; registering again works.
    let r = execute(vec![WirePool::Register(3, wire_memory())], vec![7, -5]);
    assert_eq!(r, first);
    // The connection still answers.
    let bytes = transport::encode(&Request {
        id: 99,
        call: Call::GetStatus,
    })
    .unwrap();
    transport::send(sock.as_fd(), &bytes, &[]).unwrap();
    assert_eq!(reply(&sock).reply, Reply::Status(DeviceStatus::Available));
}

/// A `RemoteDevice`'s synchronous executions register their memories: repeated
/// executions leave the service's descriptors as they were, and a memory the client drops
/// is let go of by the service at the client's next execution.
#[test]
fn registered_memories_are_forgotten_when_dropped() {
    let service = Service::start("forgotten");
    let remote = service.connect();
    let case = vnpu_driver::conformance::lookup(&[common::corpus_path("V1_0.jsonl.gz")], "add")
        .expect("the ADD case");
    let (_, status, prepared) = prepare_plain(&remote, &case.model);
    assert_eq!(status, ErrorStatus::None);
    let prepared = prepared.unwrap();
    let run = |request: &vnpu_driver::hal::Request| {
        let (s, _, _) = prepared.execute_synchronously_1_3(
            request,
            MeasureTiming::NO,
            OptionalTimePoint::NONE,
            OptionalTimeoutDuration(None),
        );
        assert_eq!(s, ErrorStatus::None);
    };
    let (request, pool, _) = case.make_request().unwrap();
    let before = service.open_fds();
    run(&request);
    let held = service.open_fds();
    // Its own descriptor, and the device's mapping of it.
    assert!(
        held > before,
        "the service keeps the memory ({before} -> {held})"
    );
    for _ in 0..20 {
        run(&request);
    }
    assert_eq!(service.open_fds(), held, "no descriptor per execution");
    // Dropped by the client: the next execution (over another memory) forgets it.
    drop((request, pool));
    let (again, _pool, _) = case.make_request().unwrap();
    run(&again);
    assert_eq!(
        service.open_fds(),
        held,
        "the old memory's descriptor is closed"
    );
}
