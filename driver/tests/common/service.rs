//! A `vnpu serve` child process for the tests that cross the process boundary.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use vnpu_driver::service::client::RemoteDevice;

/// A `vnpu serve` child on a socket in its own temp directory; killed when dropped.
pub struct Service {
    /// The `vnpu serve` process.
    pub child: Child,
    dir: PathBuf,
    /// Its socket.
    pub socket: PathBuf,
}

impl Service {
    /// Starts `vnpu serve` on a fresh socket and waits for its readiness line.
    pub fn start(tag: &str) -> Service {
        Self::start_with(tag, &[])
    }

    /// A service started with extra `vnpu serve` arguments.
    pub fn start_with(tag: &str, args: &[&str]) -> Service {
        let dir = std::env::temp_dir().join(format!("vnpu-service-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("vnpu.sock");
        let mut child = Command::new(env!("CARGO_BIN_EXE_vnpu"))
            .arg("serve")
            .arg("--socket")
            .arg(&socket)
            .args(args)
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

    /// A client of it.
    pub fn connect(&self) -> RemoteDevice {
        RemoteDevice::connect(&self.socket, Duration::from_secs(10)).expect("connect")
    }

    /// Whether it still runs.
    pub fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// Descriptors the service holds open now.
    pub fn open_fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.child.id()))
            .unwrap()
            .count()
    }

    /// The service's resident memory, in KiB.
    pub fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap()
    }
}

/// Polls `probe` until it holds, for at most `bound` (the service releases a client's
/// objects on its own threads, a little after the client is gone).
pub fn eventually(bound: Duration, mut probe: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < bound {
        if probe() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    probe()
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
