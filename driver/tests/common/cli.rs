//! The `vnpu` binary as the tests run it.

use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Runs `vnpu` with `args`, its stdout to /dev/null: its exit status (`None`
/// when a signal ended it), stderr and peak resident memory in KiB (wait4's ru_maxrss, of
/// this child alone: other tests' children do not count).
pub fn vnpu_measured(args: &[&str]) -> (Option<i32>, String, i64) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_vnpu"));
    cmd.args(args).stdout(Stdio::null());
    measured(cmd)
}

/// [`vnpu_measured`], also giving what it wrote to stdout.
pub fn vnpu_measured_out(args: &[&str]) -> (Option<i32>, String, String, i64) {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let path = std::env::temp_dir().join(format!(
        "vnpu-stdout-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let file = std::fs::File::create(&path).expect("stdout file");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_vnpu"));
    cmd.args(args).stdout(file);
    let (code, stderr, rss) = measured(cmd);
    let stdout = std::fs::read_to_string(&path).expect("read stdout");
    let _ = std::fs::remove_file(&path);
    (code, stdout, stderr, rss)
}

/// Runs `cmd` (its stderr piped here) as [`vnpu_measured`] does.
// Reaped by wait4 below, which Child does not know of.
#[allow(clippy::zombie_processes)]
pub fn measured(mut cmd: Command) -> (Option<i32>, String, i64) {
    let mut child = cmd.stderr(Stdio::piped()).spawn().expect("run vnpu");
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut stderr)
        .expect("read stderr");
    let pid = i32::try_from(child.id()).expect("pid");
    let mut status = 0;
    // SAFETY: all-zero is a valid rusage.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child (never waited for through `child`); both out
    // pointers are valid.
    let got = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(got, pid, "wait4");
    let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
    (code, stderr, usage.ru_maxrss)
}
