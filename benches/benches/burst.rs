//! Burst round trips, all in one criterion run: a 1-element ADD by burst in process and
//! across processes, by a synchronous execute over the service's socket and in process,
//! and a plain busy-poll shared-memory ping-pong between two processes (the physical
//! limit of any cross-process round trip). Goals (issue 25): cross-process burst ≤ 5 × the
//! ping-pong; socket execute ≥ 10 × the cross-process burst. The ping-pong's time depends
//! on where the host places the two vCPUs (44-430 ns seen on one VM), the burst's work
//! does not: compare the two from one run. `local_execute_threaded` is `local_execute` on
//! a device without the inline doorbell.
//!
//! The other process is this bench binary started again in a helper role (an environment
//! variable picks it): a service on a socket (the service and its device run there), or
//! the ping-pong's other end.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use criterion::Criterion;
use vnpu_driver::burst::controller::{BurstController, CHANNEL_LENGTH};
use vnpu_driver::burst::server::DEFAULT_SPIN;
use vnpu_driver::conformance::corpus::TestCase;
use vnpu_driver::conformance::{lookup, prepare_plain};
use vnpu_driver::device::{IDevice, IPreparedModel, VnpuDevice};
use vnpu_driver::hal::{ErrorStatus, MeasureTiming, OptionalTimePoint, OptionalTimeoutDuration};
use vnpu_driver::service::client::RemoteDevice;
use vnpu_driver::service::{server, transport};
use vnpu_emu::shm::SharedRegion;

const ROLE: &str = "VNPU_BENCH_ROLE";

fn case() -> TestCase {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../conformance");
    lookup(&[dir.join("V1_0.jsonl.gz")], "add").expect("the 1-element ADD case")
}

fn prepared(device: &dyn IDevice, case: &TestCase) -> Arc<dyn IPreparedModel> {
    let (_, status, prepared) = prepare_plain(device, &case.model);
    assert_eq!(status, ErrorStatus::None);
    prepared.expect("prepared")
}

/// Helper role: serve a device on the socket at `path`, saying so on stdout.
fn serve(path: &Path) {
    let device = VnpuDevice::new().expect("device");
    let listener = transport::listen(path).expect("listen");
    println!("ready");
    let options = server::ServeOptions::new(device.name());
    let _ = server::serve(listener, device, options);
}

/// Helper role: the ping-pong's other end on the shared page at descriptor 3: waits for
/// an odd value in word 0 and answers with the next even one, until word 1 is set.
fn pong() {
    // SAFETY: the parent put the shared page's memfd at descriptor 3 for this process.
    let fd = unsafe { OwnedFd::from_raw_fd(3) };
    let page = SharedRegion::map(fd, 0, 4096).expect("map");
    let word = page.atomic_u32(0).expect("word");
    let stop = page.atomic_u32(64).expect("stop word");
    while stop.load(Ordering::Acquire) == 0 {
        let v = word.load(Ordering::Acquire);
        if v % 2 == 1 {
            word.store(v.wrapping_add(1), Ordering::Release);
        }
        std::hint::spin_loop();
    }
}

/// Starts this binary in `role`, with `setup` run on the command first.
fn helper(role: &str, setup: impl FnOnce(&mut Command)) -> Child {
    let mut cmd = Command::new(std::env::current_exe().expect("own path"));
    cmd.env(ROLE, role).stdout(Stdio::piped());
    setup(&mut cmd);
    cmd.spawn().expect("start the helper process")
}

fn bench(c: &mut Criterion) {
    let case = case();
    let (request, _pool, _) = case.make_request().expect("request");
    let local = VnpuDevice::new().expect("device");
    let local_model = prepared(local.as_ref(), &case);
    // The same device without the inline doorbell: every command hops to the command
    // processor's and an engine's thread (what the plain path gains from it).
    let threaded = VnpuDevice::with_config(vnpu_emu::DeviceConfig {
        inline_small_commands: false,
        ..Default::default()
    })
    .expect("device");
    let threaded_model = prepared(threaded.as_ref(), &case);
    let local_burst = BurstController::new(
        local_model.as_ref(),
        CHANNEL_LENGTH,
        DEFAULT_SPIN,
        Duration::from_secs(30),
    )
    .expect("burst");

    let dir = std::env::temp_dir().join(format!("vnpu-bench-burst-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let socket = dir.join("vnpu.sock");
    let mut service = helper("serve", |c| {
        c.env("VNPU_BENCH_SOCKET", &socket);
    });
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(service.stdout.take().expect("stdout")),
        &mut line,
    )
    .expect("readiness");
    let remote = RemoteDevice::connect(&socket, Duration::from_secs(30)).expect("connect");
    let remote_model = prepared(&remote, &case);
    let remote_burst = BurstController::new(
        remote_model.as_ref(),
        CHANNEL_LENGTH,
        DEFAULT_SPIN,
        Duration::from_secs(30),
    )
    .expect("remote burst");

    let mut g = c.benchmark_group("burst");
    let by_burst = |b: &BurstController| {
        let (status, _, _) = b.execute(&request, MeasureTiming::NO);
        assert_eq!(status, ErrorStatus::None);
    };
    let sync = |m: &Arc<dyn IPreparedModel>| {
        let (status, _, _) = m.execute_synchronously_1_3(
            &request,
            MeasureTiming::NO,
            OptionalTimePoint::NONE,
            OptionalTimeoutDuration(None),
        );
        assert_eq!(status, ErrorStatus::None);
    };
    g.bench_function("burst_cross_process", |b| {
        b.iter(|| by_burst(&remote_burst))
    });
    g.bench_function("burst_in_process", |b| b.iter(|| by_burst(&local_burst)));
    g.bench_function("socket_execute", |b| b.iter(|| sync(&remote_model)));
    g.bench_function("local_execute", |b| b.iter(|| sync(&local_model)));
    g.bench_function("local_execute_threaded", |b| {
        b.iter(|| sync(&threaded_model))
    });
    drop((remote_burst, remote_model, remote));
    let _ = service.kill();
    let _ = service.wait();

    let page = SharedRegion::new("vnpu-pingpong", 4096).expect("page");
    let raw = page.fd().as_raw_fd();
    let mut other = helper("pong", |c| {
        use std::os::unix::process::CommandExt;
        // Puts the page's memfd at descriptor 3, without close-on-exec, for the child.
        // SAFETY: only dup2/fcntl (async-signal-safe) run between fork and exec.
        unsafe {
            c.pre_exec(move || {
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
    });
    let word = page.atomic_u32(0).expect("word");
    let mut v = 0u32;
    g.bench_function("pingpong_cross_process", |b| {
        b.iter(|| {
            v = v.wrapping_add(1) | 1;
            word.store(v, Ordering::Release);
            while word.load(Ordering::Acquire) != v.wrapping_add(1) {
                std::hint::spin_loop();
            }
        })
    });
    page.atomic_u32(64)
        .expect("stop word")
        .store(1, Ordering::Release);
    let _ = other.wait();
    g.finish();
    let _ = std::fs::remove_dir_all(&dir);
}

fn main() {
    match std::env::var(ROLE).as_deref() {
        Ok("serve") => {
            let path = std::env::var_os("VNPU_BENCH_SOCKET").expect("VNPU_BENCH_SOCKET");
            serve(Path::new(&path));
        }
        Ok("pong") => pong(),
        _ => {
            let mut c = Criterion::default().configure_from_args();
            bench(&mut c);
            c.final_summary();
        }
    }
}
