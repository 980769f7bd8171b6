//! Compiles `tests/c/client.c` with the `cc` crate's compiler discovery, and
//! runs it against the built `libvnpu_gralloc.so` (dlopen, AIMapper table,
//! version symbols, allocate → import → lock → write → unlock → metadata →
//! free through the C function table).

use std::path::{Path, PathBuf};
use std::process::Command;

const LIB: &str = "libvnpu_gralloc.so";

/// Finds the cdylib next to this test binary (`<target>/<profile>/deps`), or
/// in `<target>/<profile>`; builds it with cargo if neither exists. Works for
/// `CARGO_TARGET_DIR` and the default `target/` alike, since both are derived
/// from the test binary's own location.
fn cdylib() -> PathBuf {
    let exe = std::env::current_exe().expect("test exe path");
    let deps = exe.parent().expect("deps dir").to_path_buf();
    let profile_dir = deps.parent().expect("profile dir").to_path_buf();
    let candidates = [deps.join(LIB), profile_dir.join(LIB)];
    if let Some(p) = candidates.iter().find(|p| p.exists()) {
        return p.clone();
    }
    let target_dir = profile_dir.parent().expect("target dir");
    let mut cmd = Command::new(env!("CARGO"));
    cmd.args(["build", "-p", "vnpu-gralloc", "--lib", "--target-dir"])
        .arg(target_dir);
    if profile_dir.file_name().is_some_and(|n| n == "release") {
        cmd.arg("--release");
    }
    let status = cmd
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .expect("run cargo");
    assert!(status.success(), "cargo build of the cdylib failed");
    candidates
        .into_iter()
        .find(|p| p.exists())
        .expect("cdylib after build")
}

fn build_client(out_dir: &Path) -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let target = format!("{}-unknown-linux-gnu", std::env::consts::ARCH);
    let compiler = cc::Build::new()
        .target(&target)
        .host(&target)
        .opt_level(0)
        .cargo_metadata(false)
        .cargo_warnings(false)
        .get_compiler();
    let exe = out_dir.join("vnpu_mapper_client");
    let out = compiler
        .to_command()
        .arg("-std=c11")
        .arg("-Wall")
        .arg("-Wextra")
        .arg("-Werror")
        .arg("-I")
        .arg(manifest.join("include"))
        .arg(manifest.join("tests/c/client.c"))
        .arg("-o")
        .arg(&exe)
        .arg("-ldl")
        .output()
        .expect("run the C compiler");
    assert!(
        out.status.success(),
        "C client failed to compile:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

#[test]
fn c_client_runs_through_the_aimapper_table() {
    let lib = cdylib();
    let dir = std::env::temp_dir().join(format!("vnpu-gralloc-c-abi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = build_client(&dir);
    let out = Command::new(&exe)
        .arg(&lib)
        .output()
        .expect("run the C client");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "C client failed against {}:\nstdout: {}\nstderr: {}",
        lib.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("C ABI OK"));
}

#[test]
fn header_compiles_as_cxx_layout_check() {
    // The header's AIMapper layout must match the Rust table the library exports.
    assert_eq!(std::mem::size_of::<vnpu_gralloc::ffi::AIMapper>(), 128);
    assert_eq!(std::mem::offset_of!(vnpu_gralloc::ffi::AIMapper, v5), 8);
}
