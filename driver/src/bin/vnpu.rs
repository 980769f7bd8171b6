//! `vnpu`: the command-line face of the driver. Every command is a thin layer over the
//! library; the output formats here are a contract other tools script against.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand};
use vnpu_driver::compile::lower::SUPPORTED_OPERATIONS;
use vnpu_driver::conformance::corpus::{open_corpus, parse_case, TestCase};
use vnpu_driver::conformance::{default_corpus, lookup, run_case, CaseReport, Verdict};
use vnpu_driver::device::{IDevice, VnpuDevice};
use vnpu_driver::hal::OperationType;
use vnpu_emu::regs;

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
    Info,
    /// Run one conformance case (a JSON file, or a case name looked up in the corpus).
    Run {
        case: String,
        /// Corpus files to look the case up in (default: the project's corpus).
        #[arg(long)]
        corpus: Vec<PathBuf>,
        /// Write the device's engine activity as Chrome trace JSON (Perfetto) here.
        #[arg(long)]
        trace: Option<PathBuf>,
    },
    /// Run every case of corpus files through the full driver path.
    Conformance {
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Only cases whose name contains this.
        #[arg(long)]
        filter: Option<String>,
        /// Write a per-case JSON report here.
        #[arg(long)]
        json: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Driver and device logs on stderr, e.g. VNPU_LOG=debug (off by default).
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("VNPU_LOG")
                .unwrap_or_else(|_| "off".into()),
        )
        .init();
    let device = match VnpuDevice::new() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("vnpu: cannot start the emulated device: {e}");
            return ExitCode::from(2);
        }
    };
    match cli.command {
        Command::Info => info(&device),
        Command::Run {
            case,
            corpus,
            trace,
        } => run(&device, &case, corpus, trace),
        Command::Conformance {
            files,
            filter,
            json,
        } => conformance(&device, &files, filter.as_deref(), json),
    }
}

fn info(device: &Arc<VnpuDevice>) -> ExitCode {
    let dev = device.hardware().device();
    let id = dev.read_reg(regs::ID);
    println!(
        "device       {} ({})",
        device.name(),
        device.get_version_string().1
    );
    println!(
        "id           {id:#010x} {:?}",
        String::from_utf8_lossy(&id.to_le_bytes())
    );
    println!("version      {:#010x}", dev.read_reg(regs::VERSION));
    println!("caps         {:#010x}", dev.read_reg(regs::CAPS));
    println!(
        "dram         {} MiB at {:#x}",
        dev.dram_size() >> 20,
        dev.dram_base()
    );
    println!("type         {:?}", device.get_type().1);
    println!("status       {:?}", device.get_status());
    let (_, m, d) = device.get_number_of_cache_files_needed();
    println!("cache files  model {m}, data {d}");
    let caps = device.get_capabilities_1_3().1;
    println!("\ncapabilities (execTime, powerUsage; relative to a CPU, lower is better)");
    let p = caps.relaxed_float32_to_float16_performance_tensor;
    println!(
        "  relaxed tensor     {:>12.6} {:>12.6}",
        p.exec_time, p.power_usage
    );
    for op in &caps.operand_performance {
        let name = op.r#type.name().unwrap_or("?");
        println!(
            "  {name:<32} {:>14.6e} {:>14.6e}",
            op.info.exec_time, op.info.power_usage
        );
    }
    println!("\nsupported operations (float32)");
    for ty in OperationType::ALL {
        let yes = SUPPORTED_OPERATIONS.contains(ty);
        println!(
            "  {:<32} {}",
            ty.name().unwrap_or("?"),
            if yes { "yes" } else { "no" }
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
    device: &Arc<VnpuDevice>,
    name: &str,
    corpus: Vec<PathBuf>,
    trace: Option<PathBuf>,
) -> ExitCode {
    let case = match load_case(name, corpus) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("vnpu: {e}");
            return ExitCode::from(2);
        }
    };
    let dev = device.hardware().device();
    dev.set_tracing(trace.is_some());
    let start = std::time::Instant::now();
    let report = run_case(device.as_ref(), &case);
    let wall = start.elapsed();
    if let Some(path) = &trace {
        let events = dev.take_trace();
        match std::fs::write(path, vnpu_emu::trace::chrome_json(&events)) {
            Ok(()) => println!("trace       {} events in {}", events.len(), path.display()),
            Err(e) => eprintln!("vnpu: cannot write {}: {e}", path.display()),
        }
    }
    println!("case        {}", report.name);
    println!("operations  {}", report.operations.join(", "));
    for (k, o) in report.outputs.iter().enumerate() {
        let show = |v: &[f64]| {
            v.iter()
                .take(8)
                .map(|x| format!("{x:.6}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let more = if o.expected.len() > 8 { ", ..." } else { "" };
        println!(
            "output {k}    operand {} {} [{} values]{}",
            o.operand,
            o.r#type.name().unwrap_or("?"),
            o.expected.len(),
            if o.ignored { " (ignored)" } else { "" }
        );
        println!("  actual    [{}{more}]", show(&o.actual));
        println!("  expected  [{}{more}]", show(&o.expected));
        println!(
            "  max error {:.3e}, {} out of tolerance",
            o.max_error, o.mismatches
        );
    }
    if report.timing.time_in_driver != u64::MAX {
        println!(
            "timing      {} us on device (modelled), {} us in driver",
            report.timing.time_on_device, report.timing.time_in_driver
        );
    }
    println!(
        "wall        {:.1} ms (prepare + execute)",
        wall.as_secs_f64() * 1e3
    );
    match report.verdict {
        Verdict::Pass => {
            println!("PASS");
            ExitCode::SUCCESS
        }
        Verdict::Fail(why) => {
            println!("reason      {why}");
            println!("FAIL");
            ExitCode::FAILURE
        }
        Verdict::Skip(why) => {
            println!("reason      {why}");
            println!("FAIL (skipped: not supported)");
            ExitCode::FAILURE
        }
    }
}

#[derive(Default)]
struct Tally {
    passed: usize,
    failed: usize,
    skipped: usize,
}

fn json_escape(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

fn conformance(
    device: &Arc<VnpuDevice>,
    files: &[PathBuf],
    filter: Option<&str>,
    json: Option<PathBuf>,
) -> ExitCode {
    let mut total = Tally::default();
    let mut per_op: BTreeMap<String, Tally> = BTreeMap::new();
    let mut records = Vec::new();
    let mut failures = Vec::new();
    let progress = std::io::stderr().is_terminal();
    // Count first so the progress bar knows its end (cheap next to running the cases).
    let count = if progress {
        files
            .iter()
            .filter_map(|f| open_corpus(f).ok())
            .map(|r| r.count())
            .sum()
    } else {
        0
    };
    let mut seen = 0usize;
    for file in files {
        let reader = match open_corpus(file) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("vnpu: {e}");
                total.failed += 1;
                records.push(format!(
                    "{{\"name\":{},\"status\":\"failed\",\"reason\":{}}}",
                    json_escape(&file.display().to_string()),
                    json_escape(&e.to_string())
                ));
                continue;
            }
        };
        for (line, entry) in reader {
            seen += 1;
            if progress {
                let width = 40;
                let done = (seen * width).checked_div(count).unwrap_or(0);
                eprint!(
                    "\r[{}{}] {seen}/{count}",
                    "#".repeat(done.min(width)),
                    ".".repeat(width - done.min(width))
                );
            }
            let report = match entry {
                Ok(case) => {
                    if filter.is_some_and(|f| !case.name.contains(f)) {
                        continue;
                    }
                    run_case(device.as_ref(), &case)
                }
                Err(e) => CaseReport {
                    name: format!("{}:{line}", file.display()),
                    operations: Vec::new(),
                    verdict: Verdict::Fail(format!("unreadable case: {e}")),
                    outputs: Vec::new(),
                    timing: vnpu_driver::hal::Timing::NONE,
                },
            };
            let (status, reason) = match &report.verdict {
                Verdict::Pass => ("passed", String::new()),
                Verdict::Fail(r) => ("failed", r.clone()),
                Verdict::Skip(r) => ("skipped", r.clone()),
            };
            for op in &report.operations {
                let t = per_op.entry(op.clone()).or_default();
                match status {
                    "passed" => t.passed += 1,
                    "failed" => t.failed += 1,
                    _ => t.skipped += 1,
                }
            }
            match status {
                "passed" => total.passed += 1,
                "failed" => {
                    total.failed += 1;
                    failures.push(format!("FAIL {}: {reason}", report.name));
                }
                _ => total.skipped += 1,
            }
            let ops: Vec<String> = report.operations.iter().map(|o| json_escape(o)).collect();
            records.push(format!(
                "{{\"name\":{},\"status\":\"{status}\",\"reason\":{},\"operations\":[{}]}}",
                json_escape(&report.name),
                json_escape(&reason),
                ops.join(",")
            ));
        }
    }
    if progress {
        eprintln!();
    }
    let mut out = std::io::stdout().lock();
    for f in &failures {
        let _ = writeln!(out, "{f}");
    }
    let _ = writeln!(
        out,
        "{:<32} {:>8} {:>8} {:>8}",
        "operation", "passed", "failed", "skipped"
    );
    for (op, t) in &per_op {
        let _ = writeln!(
            out,
            "{op:<32} {:>8} {:>8} {:>8}",
            t.passed, t.failed, t.skipped
        );
    }
    if let Some(path) = json {
        let body = format!("[\n{}\n]\n", records.join(",\n"));
        if let Err(e) = std::fs::write(&path, body) {
            let _ = writeln!(out, "vnpu: cannot write {}: {e}", path.display());
        }
    }
    let _ = writeln!(
        out,
        "{} passed, {} failed, {} skipped",
        total.passed, total.failed, total.skipped
    );
    if total.failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
