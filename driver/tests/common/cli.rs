//! The `vnpu` binary as the tests run it.

use std::io::Read;
use std::process::{Command, Stdio};

/// Runs `vnpu` with `args`, its stdout to /dev/null: its exit status (`None`
/// when a signal ended it), stderr and peak resident memory in KiB (wait4's ru_maxrss, of
/// this child alone: other tests' children do not count).
pub fn vnpu_measured(args: &[&str]) -> (Option<i32>, String, i64) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_vnpu"));
    cmd.args(args).stdout(Stdio::null());
    measured(cmd)
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
