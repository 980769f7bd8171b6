//! `vnpu`: the command-line face of the driver. Every command is a thin layer over the
//! library; the output formats here are a contract other tools script against.

use std::io::{IsTerminal, Write};
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, OnceLock};

use clap::{Parser, Subcommand};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use vnpu_driver::conformance::corpus::{count_cases, parse_case, TestCase};
use vnpu_driver::conformance::report::{read_report_file, summarize, write_report_file, Status};
use vnpu_driver::conformance::suite::{run_suite_until, SuiteOptions};
use vnpu_driver::conformance::table;
use vnpu_driver::conformance::{
    default_corpus, lookup, prepare_at, run_case, run_case_with, ExecOptions, ExecPath, Interface,
    MemoryMode, Preparation, Verdict,
};
use vnpu_driver::device::{IDevice, VnpuDevice};
use vnpu_driver::hal::{ErrorStatus, HalVersion, Model, OperationType};
use vnpu_driver::service::client::{self, RemoteDevice};
use vnpu_driver::service::{server, transport};
use vnpu_emu::regs;

/// The first error writing to stdout (a closed pipe, a full disk): once there is one, the
/// command ends with exit status 2 and says so on stderr, whatever else it did.
static STDOUT_ERROR: OnceLock<std::io::Error> = OnceLock::new();

/// Writes to stdout, keeping the first error in [`STDOUT_ERROR`] instead of panicking as
/// `print!` does.
fn emit(args: std::fmt::Arguments<'_>, newline: bool) {
    let mut out = std::io::stdout().lock();
    let written = out.write_fmt(args).and_then(|()| {
        if newline {
            out.write_all(b"\n")
        } else {
            Ok(())
        }
    });
    if let Err(e) = written {
        let _ = STDOUT_ERROR.set(e);
    }
}

/// `println!` that never panics (see [`emit`]).
macro_rules! outln {
    ($($arg:tt)*) => { emit(format_args!($($arg)*), true) };
}

/// `print!` that never panics (see [`emit`]).
macro_rules! out {
    ($($arg:tt)*) => { emit(format_args!($($arg)*), false) };
}

/// Flushes stdout: `Err` (exit status 2, the reason on stderr) if any write to it failed.
fn stdout_done() -> Result<(), ExitCode> {
    if let Err(e) = std::io::stdout().flush() {
        let _ = STDOUT_ERROR.set(e);
    }
    match STDOUT_ERROR.get() {
        Some(e) => {
            eprintln!("vnpu: cannot write to stdout: {e}");
            Err(ExitCode::from(2))
        }
        None => Ok(()),
    }
}

#[derive(Parser)]
#[command(
    name = "vnpu",
    version,
    about = "The vnpu NN HAL 1.3 driver on the emulated accelerator"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Device identity, capabilities and the supported-operation table.
    Info {
        /// Ask the service on this socket (`vnpu serve`) instead of an embedded device.
        #[arg(long)]
        remote: Option<PathBuf>,
    },
    /// Run one conformance case (a JSON file, or a case name looked up in the corpus), or a
    /// TFLite model (`MODEL.tflite`).
    Run {
        case: String,
        /// A model input from a .npy file, `NAME=FILE.npy` (NAME a tensor name or an input
        /// index); inputs not given get seeded random data. TFLite models only.
        #[arg(long = "input")]
        inputs: Vec<String>,
        /// Write each output as `K_NAME.npy` here. TFLite models only.
        #[arg(long)]
        output_dir: Option<PathBuf>,
        /// Execute this many times (timings over all). TFLite models only.
        #[arg(long, default_value_t = 1)]
        repeat: usize,
        /// The seed of random inputs. TFLite models only.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Run the model up to its first operator vnpu cannot map, instead of failing.
        /// TFLite models only.
        #[arg(long)]
        partial: bool,
        /// Corpus files to look the case up in (default: the project's corpus).
        #[arg(long)]
        corpus: Vec<PathBuf>,
        /// Write the device's engine activity as Chrome trace JSON (Perfetto) here.
        #[arg(long)]
        trace: Option<PathBuf>,
        /// Compilation cache directory: load the prepared model from it when it holds
        /// this model (`cache: hit`), else prepare and save it there (`cache: miss`).
        #[arg(long)]
        cache_dir: Option<PathBuf>,
        /// The cache token, 64 hex digits (default: derived from the model's contents).
        #[arg(long, requires = "cache_dir")]
        token: Option<String>,
        /// Run on the service on this socket (`vnpu serve`) instead of an embedded device.
        #[arg(long, conflicts_with = "trace")]
        remote: Option<PathBuf>,
    },
    /// Which operators of a TFLite model run on vnpu and which on the CPU, and why (the
    /// partition report the LiteRT routes print).
    Partition {
        model: PathBuf,
        /// Ask the service on this socket (`vnpu serve`) instead of an embedded device.
        #[arg(long)]
        remote: Option<PathBuf>,
    },
    /// Run every case of corpus files through the full driver path.
    Conformance {
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Only cases whose name contains this.
        #[arg(long)]
        filter: Option<String>,
        /// Worker threads running cases against the one device (default: one per core).
        /// The output does not depend on it.
        #[arg(long)]
        jobs: Option<NonZeroUsize>,
        /// Write a per-case JSON report here.
        #[arg(long)]
        json: Option<PathBuf>,
        /// The execution path: execute_1_3 with a callback, executeSynchronously_1_3,
        /// executeFenced, a burst, or (AIDL only) a reusable execution run twice. Under
        /// `--interface aidl` the default path is executeSynchronouslyWithConfig.
        #[arg(long, value_enum, default_value_t = ExecPath::Async)]
        path: ExecPath,
        /// The interface every case goes through: HIDL NN HAL 1.3, or AIDL NN HAL V4 (as a
        /// client with NNAPI's experimental features enabled).
        #[arg(long, value_enum, default_value_t = Interface::Hidl)]
        interface: Interface,
        /// Where inputs and outputs live: one shared (ashmem) pool, or driver-managed
        /// buffers (IDevice::allocate; an operand without one stays shared).
        #[arg(long, value_enum, default_value_t = MemoryMode::Shared)]
        memory: MemoryMode,
        /// The suite's dynamic-output-shape variant: every case runs with its main outputs'
        /// dimensions unknown (0) and must report the real shapes, then again with output 0
        /// one byte short, which must give OUTPUT_INSUFFICIENT_SIZE. Models with RANK, IF
        /// or WHILE, and cases expected to fail, run as they are (the suite leaves them out)
        #[arg(long)]
        dynamic_shapes: bool,
        /// Run on the service on this socket (`vnpu serve`) instead of an embedded device.
        #[arg(long)]
        remote: Option<PathBuf>,
    },
    /// Serve the device to other processes on a Unix socket (mode 0660). Prints one line,
    /// `vnpu: serving DEVICE on PATH`, once it is listening (and notifies NOTIFY_SOCKET).
    /// Under socket activation (LISTEN_PID/LISTEN_FDS) it serves the inherited socket.
    Serve {
        /// Where to create the socket (a stale one left by a dead service is replaced).
        /// Required unless a socket is inherited.
        #[arg(long)]
        socket: Option<PathBuf>,
        /// A user who may connect (repeatable; default: only this user).
        #[arg(long)]
        allow_uid: Vec<u32>,
        /// A group whose members may connect (repeatable).
        #[arg(long)]
        allow_gid: Vec<u32>,
    },
    /// Render the per-operation x operand-type markdown table (docs/CONFORMANCE.md) of
    /// `conformance --json` reports on stdout.
    ConformanceTable {
        #[arg(required = true)]
        reports: Vec<PathBuf>,
    },
}

fn main() -> ExitCode {
    let code = command();
    match stdout_done() {
        Ok(()) => code,
        Err(failed) => failed,
    }
}

/// Runs the command line's command.
fn command() -> ExitCode {
    let cli = Cli::parse();
    // Driver and device logs on stderr, e.g. VNPU_LOG=debug (off by default).
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("VNPU_LOG")
                .unwrap_or_else(|_| "off".into()),
        )
        .init();
    if let Command::ConformanceTable { reports } = &cli.command {
        return conformance_table(reports);
    }
    if let Command::Serve {
        socket,
        allow_uid,
        allow_gid,
    } = cli.command
    {
        let policy = transport::PeerPolicy {
            allowed_uids: allow_uid,
            allowed_gids: allow_gid,
        };
        return serve(socket.as_deref(), policy);
    }
    let remote = match &cli.command {
        Command::Info { remote }
        | Command::Partition { remote, .. }
        | Command::Run { remote, .. }
        | Command::Conformance { remote, .. } => remote.clone(),
        _ => None,
    };
    let target = match Target::open(remote.as_deref()) {
        Ok(t) => t,
        Err(code) => return code,
    };
    match cli.command {
        Command::Info { .. } => info(&target),
        Command::Partition { model, .. } => partition(target.device(), &model),
        Command::Run {
            case,
            cache_dir,
            token,
            inputs,
            output_dir,
            repeat,
            seed,
            partial,
            trace,
            ..
        } if case.ends_with(".tflite") => run_model(
            &target,
            Path::new(&case),
            ModelRun {
                inputs,
                output_dir,
                repeat,
                seed,
                partial,
                trace,
                cache: cache_dir.zip(Some(token)),
            },
        ),
        Command::Run {
            case,
            corpus,
            trace,
            cache_dir,
            token,
            ..
        } => run(&target, &case, corpus, trace, cache_dir.zip(Some(token))),
        Command::Conformance {
            files,
            filter,
            jobs,
            json,
            path,
            memory,
            dynamic_shapes,
            interface,
            ..
        } => conformance(
            &target,
            &files,
            SuiteOptions {
                filter,
                exec: ExecOptions {
                    path,
                    memory,
                    dynamic_shapes,
                    interface,
                },
                jobs: jobs.unwrap_or(SuiteOptions::default().jobs),
            },
            json,
        ),
        // Answered above, before a device is opened.
        Command::ConformanceTable { .. } | Command::Serve { .. } => ExitCode::SUCCESS,
    }
}

/// The device a command runs on: embedded in this process, or served by `vnpu serve`.
enum Target {
    Local(Arc<VnpuDevice>),
    Remote(RemoteDevice),
}

impl Target {
    /// The embedded device, or a connection to the service at `remote`.
    fn open(remote: Option<&Path>) -> Result<Target, ExitCode> {
        match remote {
            Some(path) => RemoteDevice::connect(path, client::DEFAULT_TIMEOUT)
                .map(Target::Remote)
                .map_err(|e| {
                    eprintln!("vnpu: cannot reach the service at {}: {e}", path.display());
                    ExitCode::from(2)
                }),
            None => VnpuDevice::new().map(Target::Local).map_err(|e| {
                eprintln!("vnpu: cannot start the emulated device: {e}");
                ExitCode::from(2)
            }),
        }
    }

    fn device(&self) -> &dyn IDevice {
        match self {
            Target::Local(d) => d.as_ref(),
            Target::Remote(r) => r,
        }
    }

    fn name(&self) -> &str {
        match self {
            Target::Local(d) => d.name(),
            Target::Remote(r) => r.name(),
        }
    }
}

/// `vnpu serve`: listens, says so on one line, then serves until killed.
fn serve(socket: Option<&Path>, policy: transport::PeerPolicy) -> ExitCode {
    use vnpu_driver::service::activation;
    // First, before any thread exists: it edits the environment.
    let inherited = match activation::inherited_listener() {
        Ok(l) => l,
        Err(e) => {
            eprintln!("vnpu: serve: {e}");
            return ExitCode::from(2);
        }
    };
    let (listener, place) = match (inherited, socket) {
        (Some(l), _) => (l, "the inherited socket".to_string()),
        (None, Some(path)) => match transport::listen(path) {
            Ok(l) => (l, path.display().to_string()),
            Err(e) => {
                eprintln!("vnpu: cannot listen on {}: {e}", path.display());
                return ExitCode::from(2);
            }
        },
        (None, None) => {
            eprintln!("vnpu: serve needs --socket PATH (or an inherited socket)");
            return ExitCode::from(2);
        }
    };
    let device = match VnpuDevice::new() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("vnpu: cannot start the emulated device: {e}");
            return ExitCode::from(2);
        }
    };
    let name = device.name().to_string();
    outln!("vnpu: serving {name} on {place}");
    // Whoever waits for that line must get it, or learn that it could not be written.
    if let Err(code) = stdout_done() {
        return code;
    }
    activation::notify_ready();
    let mut options = server::ServeOptions::new(name);
    options.policy = policy;
    let probe = device.clone();
    options.usage = Some(Arc::new(move || probe.usage()));
    match server::serve(listener, device, options) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("vnpu: serve: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The embedded device's registers and memory.
fn local_info(device: &VnpuDevice) {
    let dev = device.hardware().device();
    let id = dev.read_reg(regs::ID);
    outln!(
        "id           {id:#010x} {:?}",
        String::from_utf8_lossy(&id.to_le_bytes())
    );
    outln!("version      {:#010x}", dev.read_reg(regs::VERSION));
    outln!("caps         {:#010x}", dev.read_reg(regs::CAPS));
    outln!(
        "dram         {} MiB at {:#x}",
        dev.dram_size() >> 20,
        dev.dram_base()
    );
}

fn info(target: &Target) -> ExitCode {
    let device = target.device();
    outln!(
        "device       {} ({})",
        target.name(),
        device.get_version_string().1
    );
    match target {
        Target::Local(local) => local_info(local),
        Target::Remote(remote) => match remote.usage() {
            Ok(u) => {
                outln!("service      {} client(s) connected", u.connections);
                let d = u.device;
                outln!(
                    "in use       {} prepared model(s), {} buffer(s), {} KiB device memory, {} KiB mapped",
                    d.prepared_models,
                    d.buffers,
                    d.dram_bytes >> 10,
                    d.iova_bytes >> 10
                );
            }
            Err(e) => outln!("service      usage unavailable: {e}"),
        },
    }
    outln!("type         {:?}", device.get_type().1);
    outln!("status       {:?}", device.get_status());
    let (_, m, d) = device.get_number_of_cache_files_needed();
    outln!("cache files  model {m}, data {d}");
    outln!("cache holds  {}", vnpu_driver::cache::DESCRIPTION);
    if let Target::Local(local) = target {
        outln!("cache I/O    {}", local.cache().io().describe());
        outln!(
            "cache key    {} (created on first use, mode 0600; set VNPU_CACHE_KEY to move it)",
            local.cache().config().key_path.display()
        );
    }
    let caps = device.get_capabilities_1_3().1;
    outln!("\ncapabilities (execTime, powerUsage; relative to a CPU, lower is better)");
    let p = caps.relaxed_float32_to_float16_performance_tensor;
    outln!(
        "  relaxed tensor     {:>12.6} {:>12.6}",
        p.exec_time,
        p.power_usage
    );
    for op in &caps.operand_performance {
        let name = op.r#type.name().unwrap_or("?");
        outln!(
            "  {name:<32} {:>14.6e} {:>14.6e}",
            op.info.exec_time,
            op.info.power_usage
        );
    }
    outln!("\nsupported operations (main operand types the device runs)");
    for ty in OperationType::ALL {
        let runs = vnpu_driver::ops::definition(*ty).map_or(&[][..], |d| d.runs);
        let list: Vec<String> = runs.iter().map(|t| t.to_string()).collect();
        outln!(
            "  {:<32} {}",
            ty.name().unwrap_or("?"),
            if list.is_empty() {
                "no".to_string()
            } else {
                list.join(" ")
            }
        );
    }
    ExitCode::SUCCESS
}

fn load_case(name: &str, corpus: Vec<PathBuf>) -> Result<TestCase, String> {
    let path = PathBuf::from(name);
    if path.is_file() {
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        return parse_case(text.trim()).map_err(|e| format!("{}: {e}", path.display()));
    }
    let files = if corpus.is_empty() {
        default_corpus()
    } else {
        corpus
    };
    lookup(&files, name).map_err(|e| e.to_string())
}

fn run(
    target: &Target,
    name: &str,
    corpus: Vec<PathBuf>,
    trace: Option<PathBuf>,
    cache: Option<(PathBuf, Option<String>)>,
) -> ExitCode {
    let case = match load_case(name, corpus) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("vnpu: {e}");
            return ExitCode::from(2);
        }
    };
    let device = target.device();
    let dev = match target {
        Target::Local(local) => Some(local.hardware().device()),
        Target::Remote(_) => None,
    };
    if let Some(dev) = dev {
        dev.set_tracing(trace.is_some());
    }
    let start = std::time::Instant::now();
    let report = match &cache {
        None => run_case(device, &case),
        Some((dir, token)) => {
            let token = match cache_token(&case, token.as_deref()) {
                Ok(t) => t,
                Err(e) => {
                    eprintln!("vnpu: {e}");
                    return ExitCode::from(2);
                }
            };
            let prepare = |dev: &dyn IDevice, model: &Model| {
                let (outcome, prepared) = prepare_cached(dev, model, HalVersion::V1_3, dir, &token);
                outln!("{outcome}");
                prepared
            };
            run_case_with(device, &case, &prepare)
        }
    };
    let wall = start.elapsed();
    if let (Some(path), Some(dev)) = (&trace, dev) {
        let events = dev.take_trace();
        if let Err(e) = std::fs::write(path, vnpu_emu::trace::chrome_json(&events)) {
            eprintln!("vnpu: cannot write {}: {e}", path.display());
            return ExitCode::from(2);
        }
        outln!("trace       {} events in {}", events.len(), path.display());
    }
    outln!("case        {}", report.name);
    outln!("operations  {}", report.operations.join(", "));
    for (k, o) in report.outputs.iter().enumerate() {
        let show = |v: &[f64]| {
            v.iter()
                .take(8)
                .map(|x| format!("{x:.6}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let more = if o.expected.len() > 8 { ", ..." } else { "" };
        outln!(
            "output {k}    operand {} {} [{} values]{}",
            o.operand,
            o.r#type.name().unwrap_or("?"),
            o.expected.len(),
            if o.ignored { " (ignored)" } else { "" }
        );
        outln!("  actual    [{}{more}]", show(&o.actual));
        outln!("  expected  [{}{more}]", show(&o.expected));
        outln!(
            "  max error {:.3e}, {} out of tolerance",
            o.max_error,
            o.mismatches
        );
    }
    if report.timing.time_in_driver != u64::MAX {
        outln!(
            "timing      {} us on device (modelled), {} us in driver",
            report.timing.time_on_device,
            report.timing.time_in_driver
        );
    }
    outln!(
        "wall        {:.1} ms (prepare + execute)",
        wall.as_secs_f64() * 1e3
    );
    match report.verdict {
        Verdict::Pass => {
            outln!("PASS");
            ExitCode::SUCCESS
        }
        Verdict::Fail(why) => {
            outln!("reason      {why}");
            outln!("FAIL");
            ExitCode::FAILURE
        }
        Verdict::Skip(why) => {
            outln!("reason      {why}");
            outln!("FAIL (skipped: not supported)");
            ExitCode::FAILURE
        }
    }
}

/// The token of `--token`, or one derived from the model.
fn cache_token(case: &TestCase, hex: Option<&str>) -> Result<[u8; 32], String> {
    token_for(&case.model, hex)
}

/// The cache token: `hex` (64 hex digits), or one derived from the model's contents.
fn token_for(model: &Model, hex: Option<&str>) -> Result<[u8; 32], String> {
    let Some(hex) = hex else {
        return vnpu_driver::cache::model_token(model)
            .map_err(|e| format!("cannot read the model's pools: {e}"));
    };
    let bad = || format!("--token must be 64 hex digits, not {hex:?}");
    if hex.len() != 64 || !hex.is_ascii() {
        return Err(bad());
    }
    let mut t = [0u8; 32];
    for (i, b) in t.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
    }
    Ok(t)
}

/// Prepares through the cache in `dir`: a load when its files hold this token's model,
/// else a preparation whose save is moved into `dir` complete or not at all
/// (`cache::dir::CacheDir::commit`). Returns the `cache: ...` line and the outcome.
fn prepare_cached(
    dev: &dyn IDevice,
    model: &Model,
    level: HalVersion,
    dir: &Path,
    token: &[u8; 32],
) -> (String, Preparation) {
    let p = vnpu_driver::cache::dir::prepare_in_dir(dev, model, level, dir, token);
    if let Some(e) = &p.save_error {
        eprintln!("vnpu: cache: {e}");
    }
    (p.line, (p.ret, p.status, p.prepared))
}

fn conformance(
    target: &Target,
    files: &[PathBuf],
    options: SuiteOptions,
    json: Option<PathBuf>,
) -> ExitCode {
    if options.exec.path == ExecPath::Reusable && options.exec.interface != Interface::Aidl {
        eprintln!("vnpu: --path reusable is an AIDL V4 execution: add --interface aidl");
        return ExitCode::from(2);
    }
    if options.exec.dynamic_shapes && options.exec.path == ExecPath::Fenced {
        eprintln!("vnpu: --dynamic-shapes needs output shapes, which executeFenced does not report: use --path async, sync or burst");
        return ExitCode::from(2);
    }
    // A progress bar on stderr only when a person is watching (CI has no terminal).
    let bar = if std::io::stderr().is_terminal() {
        let bar = ProgressBar::with_draw_target(
            Some(count_cases(files) as u64),
            ProgressDrawTarget::stderr(),
        );
        if let Ok(style) =
            ProgressStyle::with_template("[{bar:40}] {pos}/{len} cases, {elapsed} ({eta} left)")
        {
            bar.set_style(style.progress_chars("#>."));
        }
        bar
    } else {
        ProgressBar::hidden()
    };
    // Over a service, a lost connection ends the run at once, with one error.
    let lost = || match target {
        Target::Remote(r) => r.lost(),
        Target::Local(_) => None,
    };
    let run = run_suite_until(target.device(), files, &options, &mut || bar.inc(1), &lost);
    bar.finish_and_clear();
    let records = match run {
        Ok(r) => r,
        Err(why) => {
            eprintln!("vnpu: the run stopped: {why}");
            return ExitCode::from(2);
        }
    };

    let summary = summarize(&records);
    for r in records.iter().filter(|r| r.status == Status::Failed) {
        outln!("FAIL {}: {}", r.name, r.reason);
    }
    outln!(
        "{:<32} {:>8} {:>8} {:>8}",
        "operation",
        "passed",
        "failed",
        "skipped"
    );
    for (op, t) in &summary.per_operation {
        outln!("{op:<32} {:>8} {:>8} {:>8}", t.passed, t.failed, t.skipped);
    }
    let mut code = if summary.total.failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    };
    if let Some(path) = json {
        if let Err(e) = write_report_file(&path, &records) {
            eprintln!("vnpu: cannot write the report: {e}");
            code = ExitCode::from(2);
        }
    }
    let t = summary.total;
    if t.passed + t.failed + t.skipped == 0 {
        outln!("0 passed, 0 failed, 0 skipped");
        eprintln!("vnpu: no case matched (an empty corpus, or a --filter that matches nothing)");
        return ExitCode::from(2);
    }
    outln!(
        "{} passed, {} failed, {} skipped",
        t.passed,
        t.failed,
        t.skipped
    );
    code
}

fn conformance_table(reports: &[PathBuf]) -> ExitCode {
    let mut records = Vec::new();
    for path in reports {
        match read_report_file(path) {
            Ok(r) => records.extend(r),
            Err(e) => {
                eprintln!("vnpu: {e}");
                return ExitCode::from(2);
            }
        }
    }
    out!("{}", table::markdown(&records));
    ExitCode::SUCCESS
}

/// `vnpu partition MODEL.tflite`: the partition report.
fn partition(device: &dyn IDevice, path: &Path) -> ExitCode {
    let plan = std::fs::read(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))
        .and_then(|b| {
            vnpu_driver::tflite::partition::plan(&b, device)
                .map_err(|e| format!("{}: {e}", path.display()))
        });
    match plan {
        Ok(plan) => {
            outln!("model       {}", path.display());
            out!("{plan}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("vnpu: {e}");
            ExitCode::from(2)
        }
    }
}

/// `vnpu run MODEL.tflite`'s options.
struct ModelRun {
    inputs: Vec<String>,
    output_dir: Option<PathBuf>,
    repeat: usize,
    seed: u64,
    partial: bool,
    trace: Option<PathBuf>,
    cache: Option<(PathBuf, Option<String>)>,
}

/// Imports a TFLite model, runs it through the driver and reports times, operations and
/// memory; writes the outputs as .npy.
fn run_model(target: &Target, path: &Path, opts: ModelRun) -> ExitCode {
    use vnpu_driver::tflite::{self, npy, run as model_run};
    let fail = |e: String| {
        eprintln!("vnpu: {e}");
        ExitCode::from(2)
    };
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) => return fail(format!("cannot read {}: {e}", path.display())),
    };
    let imported = match tflite::import(&bytes, opts.partial) {
        Ok(m) => m,
        Err(e) => return fail(format!("{}: {e}", path.display())),
    };
    if opts.repeat == 0 {
        return fail("--repeat must be at least 1".into());
    }
    // Random inputs are made only once preparation has accepted the model's shapes.
    let mut given: Vec<Option<npy::Array>> = imported.inputs.iter().map(|_| None).collect();
    for spec in &opts.inputs {
        let Some((name, file)) = spec.split_once('=') else {
            return fail(format!("--input {spec}: expected NAME=FILE.npy"));
        };
        let k = imported
            .inputs
            .iter()
            .position(|t| t.name == name)
            .or_else(|| {
                name.parse::<usize>()
                    .ok()
                    .filter(|&k| k < imported.inputs.len())
            });
        let Some(k) = k else {
            return fail(format!("--input {spec}: the model has no input {name}"));
        };
        match std::fs::read(file)
            .map_err(|e| e.to_string())
            .and_then(|b| npy::read(&b).map_err(|e| e.to_string()))
        {
            Ok(a) => given[k] = Some(a),
            Err(e) => return fail(format!("--input {spec}: {e}")),
        }
    }
    let device = target.device();
    let start = std::time::Instant::now();
    let prepared = match &opts.cache {
        None => prepare_at(device, &imported.model, imported.level),
        Some((dir, hex)) => {
            let token = match token_for(&imported.model, hex.as_deref()) {
                Ok(t) => t,
                Err(e) => return fail(e),
            };
            let (line, p) = prepare_cached(device, &imported.model, imported.level, dir, &token);
            outln!("{line}");
            p
        }
    };
    let prepare_ms = start.elapsed().as_secs_f64() * 1e3;
    let prepared = match prepared {
        (_, ErrorStatus::None, Some(p)) => p,
        (_, status, _) => return fail(format!("prepareModel_1_3: {status}")),
    };
    let from_file: Vec<bool> = given.iter().map(Option::is_some).collect();
    let arrays = match model_run::fill_inputs(&imported.inputs, opts.seed, given) {
        Ok(a) => a,
        Err(e) => return fail(e.to_string()),
    };
    let ops: usize = imported.operations.values().sum();
    let list: Vec<String> = imported
        .operations
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    outln!("model       {}", path.display());
    outln!("operations  {ops} ({})", list.join(", "));
    if let Some((index, op, why)) = &imported.stopped {
        outln!("partial     stopped at operator {index} ({op}): {why}");
    }
    outln!(
        "constants   {:.1} KiB",
        imported.constant_bytes as f64 / 1024.0
    );
    for (k, t) in imported.inputs.iter().enumerate() {
        let from = if from_file[k] { "file" } else { "random" };
        outln!(
            "input {k}     {} {:?} {} ({from})",
            t.name,
            t.dims,
            t.r#type
        );
    }
    outln!("prepare     {prepare_ms:.2} ms");
    // Only the executions are traced (per kernel: where a model's time goes).
    let dev = match target {
        Target::Local(local) => Some(local.hardware().device()),
        Target::Remote(_) => None,
    };
    if let Some(dev) = dev {
        dev.set_tracing(opts.trace.is_some());
    }
    let report = match model_run::run(&prepared, &imported, &arrays, opts.repeat) {
        Ok(r) => r,
        Err(e) => return fail(e.to_string()),
    };
    if let (Some(path), Some(dev)) = (&opts.trace, dev) {
        let events = dev.take_trace();
        if let Err(e) = std::fs::write(path, vnpu_emu::trace::chrome_json(&events)) {
            return fail(format!("cannot write {}: {e}", path.display()));
        }
        outln!("trace       {} events in {}", events.len(), path.display());
    }
    let mut ms: Vec<f64> = report
        .executions
        .iter()
        .map(|d| d.as_secs_f64() * 1e3)
        .collect();
    ms.sort_by(f64::total_cmp);
    let device_us = report.device_us.last().copied().unwrap_or(0);
    outln!(
        "execute     {} run(s): median {:.3} ms, min {:.3} ms (device {device_us} µs)",
        ms.len(),
        ms[ms.len() / 2],
        ms[0]
    );
    for (k, (t, a)) in imported.outputs.iter().zip(&report.outputs).enumerate() {
        let mut line = format!("output {k}    {} {:?} {}", t.name, t.dims, t.r#type);
        if let Some(dir) = &opts.output_dir {
            let safe: String = t
                .name
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || "._-".contains(c) {
                        c
                    } else {
                        '_'
                    }
                })
                .collect();
            let file = dir.join(format!("{k}_{safe}.npy"));
            let written =
                std::fs::create_dir_all(dir).and_then(|()| std::fs::write(&file, npy::write(a)));
            if let Err(e) = written {
                return fail(format!("cannot write {}: {e}", file.display()));
            }
            line.push_str(&format!(" -> {}", file.display()));
        }
        outln!("{line}");
    }
    ExitCode::SUCCESS
}
