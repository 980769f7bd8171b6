//! The conformance runner: each corpus case through the full driver path (validate,
//! prepare, execute on the device) and compared with the corpus's tolerances
//! (conformance/CRITERIA.md).
//!
//! [`corpus`] reads the corpus files into test cases; [`compare`](mod@compare) holds the tolerances;
//! [`suite`] runs whole files on worker threads; [`report`] is the JSON report and its
//! tallies; [`table`] renders reports as the markdown table of docs/CONFORMANCE.md.

pub mod compare;
pub mod corpus;
pub mod dynamic;
pub mod exec;
pub mod face;
pub mod multinomial;
pub mod report;
pub mod suite;
pub mod table;

pub use compare::{compare, decode, tolerance, OutputReport};
pub use exec::{ExecOptions, ExecPath, MemoryMode};
pub use face::Interface;
pub use report::OperationUse;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::device::{IDevice, IPreparedModel, PreparedModelSlot, VnpuDevice};
use crate::hal::{
    DataLocation, ErrorStatus, HalVersion, Memory, Model, OperandType, OperationType, Timing,
};
use crate::interface::PrepareArgs;
use corpus::{find_case, CorpusError, TestCase};

/// The outcome of one case.
///
/// A normal case passes when every output is within tolerance; it is skipped only when
/// getSupportedOperations says false for one of its operations; any other error
/// (getSupportedOperations failing, preparation, execution, a wrong output) fails it. A case
/// with `expect_failure` passes when getSupportedOperations refuses an operation or
/// preparation or execution fails, and fails when everything succeeds.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// The case behaved as the corpus expects.
    Pass,
    /// It did not; the reason.
    Fail(String),
    /// getSupportedOperations said false for one of its operations (which, and why).
    Skip(String),
}

/// What running one case gave.
#[derive(Clone, Debug)]
pub struct CaseReport {
    /// The case name, `<spec>/<variant>`.
    pub name: String,
    /// Operation names of the main subgraph, deduplicated, in first-use order.
    pub operations: Vec<String>,
    /// Every operation of the main subgraph, in order, with the type of its input 0.
    pub uses: Vec<OperationUse>,
    /// The outcome.
    pub verdict: Verdict,
    /// One per compared output (empty when the case did not get as far as executing).
    pub outputs: Vec<OutputReport>,
    /// The execution's timing ([`Timing::NONE`] when it did not execute).
    pub timing: Timing,
}

/// The corpus files shipped with the project.
pub fn default_corpus() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../conformance");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|d| {
            d.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.to_string_lossy().ends_with(".jsonl.gz"))
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files
}

/// Finds a case by full name (`spec/variant`) or by spec name when the spec has a
/// variant of the same name.
pub fn lookup(paths: &[PathBuf], name: &str) -> Result<TestCase, CorpusError> {
    match find_case(paths, name) {
        Err(CorpusError::NotFound(_)) if !name.contains('/') => {
            find_case(paths, &format!("{name}/{name}"))
        }
        r => r,
    }
}

/// An operation's name; an extension operation as `extension:OPERATION`, through the
/// model's prefix map.
fn operation_name(model: &Model, t: OperationType) -> String {
    crate::extensions::describe_operation(model, t)
        .or_else(|| t.name_any().map(str::to_string))
        .unwrap_or_else(|| t.to_string())
}

fn operation_names(case: &TestCase) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for op in &case.model.main.operations {
        let n = operation_name(&case.model, op.r#type);
        if !names.contains(&n) {
            names.push(n);
        }
    }
    names
}

/// Every operation of the main subgraph with the type of its input 0 (`-` when it has none).
pub fn operation_uses(case: &TestCase) -> Vec<OperationUse> {
    let main = &case.model.main;
    main.operations
        .iter()
        .map(|op| OperationUse {
            operation: operation_name(&case.model, op.r#type),
            input_type: op
                .inputs
                .first()
                .and_then(|&i| main.operands.get(i as usize))
                .map_or_else(|| "-".to_string(), |o| o.r#type.to_string()),
        })
        .collect()
}

/// What a preparation gave: the call's return status, the notified status and model.
pub type Preparation = (ErrorStatus, ErrorStatus, Option<Arc<dyn IPreparedModel>>);

/// prepareModel_1_3 without cache handles, waiting for the notification.
pub fn prepare_plain(device: &dyn IDevice, model: &Model) -> Preparation {
    prepare_at(device, model, HalVersion::V1_3)
}

/// A preparation without cache handles, the model validated as an interface at `level`
/// does (`IDevice::prepare_model_at`; an imported model's `level`), waiting for the
/// notification.
pub fn prepare_at(device: &dyn IDevice, model: &Model, level: HalVersion) -> Preparation {
    let slot = PreparedModelSlot::new();
    let ret = device.prepare_model_at(level, PrepareArgs::new(model, Some(slot.clone())));
    let (status, prepared) = slot.wait();
    (ret, status, prepared)
}

/// Runs one case; a panic anywhere inside is caught and reported as a failure.
pub fn run_case(device: &dyn IDevice, case: &TestCase) -> CaseReport {
    run_case_with(device, case, &prepare_plain)
}

/// Runs one case, preparing its model with `prepare` (e.g. through the compilation
/// cache); a panic anywhere inside is caught and reported as a failure.
pub fn run_case_with(
    device: &dyn IDevice,
    case: &TestCase,
    prepare: &dyn Fn(&dyn IDevice, &Model) -> Preparation,
) -> CaseReport {
    run_case_opts(device, case, prepare, ExecOptions::default())
}

/// Runs one case as [`run_case_with`] does, executing it as `exec` says. A model that is
/// no valid HAL 1.3 model but one of a later interface is skipped under HIDL: it "needs
/// AIDL" (under AIDL it runs).
pub fn run_case_opts(
    device: &dyn IDevice,
    case: &TestCase,
    prepare: &dyn Fn(&dyn IDevice, &Model) -> Preparation,
    exec: ExecOptions,
) -> CaseReport {
    if exec.interface == face::Interface::Hidl && needs_aidl(&case.model) {
        return report(
            case,
            (Verdict::Skip(NEEDS_AIDL.into()), Vec::new(), Timing::NONE),
        );
    }
    let supported = |m: &Model| device.get_supported_operations_1_3(m);
    run_guarded(device, case, &supported, prepare, exec)
}

/// The reason a HAL 1.3 run skips a case of a later interface.
pub const NEEDS_AIDL: &str = "needs AIDL";

/// Whether `model` is no valid HAL 1.3 model but valid at a later level.
fn needs_aidl(model: &Model) -> bool {
    use crate::validate::{validate_model, validate_model_at};
    validate_model(model).is_err() && validate_model_at(model, HalVersion::Experimental).is_ok()
}

/// Runs one case through the driver's preparation core at `level` (getSupportedOperations
/// and preparation validate the model at it; the AIDL levels' operations are valid from
/// theirs on), executing it as `exec` says.
pub fn run_case_at(
    device: &VnpuDevice,
    case: &TestCase,
    level: HalVersion,
    exec: ExecOptions,
) -> CaseReport {
    let supported = |m: &Model| device.supported_operations_at(level, m);
    let prepare = |_: &dyn IDevice, m: &Model| {
        let slot = PreparedModelSlot::new();
        let ret = device.prepare_at(level, PrepareArgs::new(m, Some(slot.clone())));
        let (status, prepared) = slot.wait();
        (ret, status, prepared)
    };
    run_guarded(device, case, &supported, &prepare, exec)
}

/// What getSupportedOperations gives for a model.
type Supported<'a> = &'a dyn Fn(&Model) -> (ErrorStatus, Vec<bool>);

/// Runs one case (its dynamic-output variant when `exec` asks and it applies); a panic
/// anywhere inside is caught and reported as a failure.
fn run_guarded(
    device: &dyn IDevice,
    case: &TestCase,
    supported: Supported<'_>,
    prepare: &dyn Fn(&dyn IDevice, &Model) -> Preparation,
    exec: ExecOptions,
) -> CaseReport {
    let result = catch_unwind(AssertUnwindSafe(|| {
        if exec.dynamic_shapes && dynamic::applies(case) {
            let case = dynamic::with_unknown_outputs(case);
            run_case_inner(device, &case, supported, prepare, exec)
        } else {
            let exec = ExecOptions {
                dynamic_shapes: false,
                ..exec
            };
            run_case_inner(device, case, supported, prepare, exec)
        }
    }));
    let outcome = match result {
        Ok(r) => r,
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            (
                Verdict::Fail(format!("panic: {msg}")),
                Vec::new(),
                Timing::NONE,
            )
        }
    };
    report(case, outcome)
}

/// The report of `case` with its outcome.
fn report(case: &TestCase, outcome: (Verdict, Vec<OutputReport>, Timing)) -> CaseReport {
    let (verdict, outputs, timing) = outcome;
    CaseReport {
        name: case.name.clone(),
        operations: operation_names(case),
        uses: operation_uses(case),
        verdict,
        outputs,
        timing,
    }
}

fn run_case_inner(
    device: &dyn IDevice,
    case: &TestCase,
    supported: Supported<'_>,
    prepare: &dyn Fn(&dyn IDevice, &Model) -> Preparation,
    exec: ExecOptions,
) -> (Verdict, Vec<OutputReport>, Timing) {
    let expected_failure = |what: String| {
        if case.expect_failure {
            (Verdict::Pass, Vec::new(), Timing::NONE)
        } else {
            (Verdict::Fail(what), Vec::new(), Timing::NONE)
        }
    };
    let model = &case.model;
    // HIDL: the run's getSupportedOperations (1.3, or a level's); AIDL: through V4.
    let (status, supported) = match exec.interface {
        face::Interface::Hidl => supported(model),
        face::Interface::Aidl => face::supported(device, model, exec.interface),
    };
    if status != ErrorStatus::None {
        return expected_failure(format!("getSupportedOperations_1_3: {status}"));
    }
    if let Some(k) = supported.iter().position(|s| !s) {
        if case.expect_failure {
            return (Verdict::Pass, Vec::new(), Timing::NONE);
        }
        let name = model
            .main
            .operations
            .get(k)
            .map_or_else(|| "?".to_string(), |o| operation_name(model, o.r#type));
        return (
            Verdict::Skip(format!("{name} (operation {k}) is not supported")),
            Vec::new(),
            Timing::NONE,
        );
    }
    let (ret, status, prepared) = face::prepare(device, model, exec.interface, prepare);
    // A launch that returned NONE may still notify an error (preparation is asynchronous);
    // a launch that returned an error must notify that same error.
    if ret != ErrorStatus::None && ret != status {
        return (
            Verdict::Fail(format!(
                "prepareModel_1_3 returned {ret} but notified {status}"
            )),
            Vec::new(),
            Timing::NONE,
        );
    }
    let Some(prepared) = prepared.filter(|_| status == ErrorStatus::None) else {
        return expected_failure(format!("prepareModel_1_3: {status}"));
    };
    let (mut request, pool, locations) = match case.make_request() {
        Ok(r) => r,
        Err(e) => {
            return (
                Verdict::Fail(format!("building the request: {e}")),
                Vec::new(),
                Timing::NONE,
            )
        }
    };
    let pool = match exec.memory {
        MemoryMode::Blob => match exec::into_blob(&mut request, &pool) {
            Ok(blob) => blob,
            Err(e) => return (Verdict::Fail(e), Vec::new(), Timing::NONE),
        },
        _ => pool,
    };
    let memories = match exec.memory {
        MemoryMode::Shared | MemoryMode::Blob => exec::DeviceMemories::default(),
        MemoryMode::Device => match face::device_memories(device, &prepared, case, &mut request) {
            Ok(m) => m,
            Err(e) => return (Verdict::Fail(e), Vec::new(), Timing::NONE),
        },
    };
    if exec.dynamic_shapes {
        dynamic::unspecified(&mut request);
    }
    let (status, shapes, timing, again) = match face::execute(&prepared, &request, exec.path) {
        Ok(r) => (r.result.0, r.result.1, r.result.2, r.again),
        Err(e) => return (Verdict::Fail(e), Vec::new(), Timing::NONE),
    };
    // executeFenced cannot return output shapes, so the HAL has it refuse outputs of
    // unknown size, and a zero-sized output's dimensions (0) read as unknown: VTS skips
    // such a model on this path, and so does the runner.
    let zero_sized = case.outputs.iter().any(|o| o.dimensions.contains(&0));
    if status != ErrorStatus::None
        && exec.path == ExecPath::Fenced
        && zero_sized
        && !case.expect_failure
    {
        return (
            Verdict::Skip(format!(
                "executeFenced refused a model with a zero-sized output ({status}), as the HAL allows; VTS skips it too"
            )),
            Vec::new(),
            Timing::NONE,
        );
    }
    if status != ErrorStatus::None {
        return expected_failure(format!("execution ({:?}): {status}", exec.path));
    }
    if case.expect_failure {
        return (
            Verdict::Fail("expected preparation or execution to fail".into()),
            Vec::new(),
            timing,
        );
    }
    let (reports, mut problems) = match check_outputs(case, &shapes, &memories, &pool, &locations) {
        Ok(r) => r,
        Err(e) => return (Verdict::Fail(e), Vec::new(), timing),
    };
    // A reusable execution runs again over the same request: outputs cleared, then
    // checked again.
    if let (Some(execution), true) = (again, problems.is_empty()) {
        for (want, loc) in case.outputs.iter().zip(&locations) {
            if let Err(e) = write_zeros(&pool, loc.offset as u64, want.data.len()) {
                return (
                    Verdict::Fail(format!("clearing outputs: {e}")),
                    reports,
                    timing,
                );
            }
        }
        let (status, shapes, _) = face::run_again(&execution);
        if status != ErrorStatus::None {
            return (
                Verdict::Fail(format!("second run of the reusable execution: {status}")),
                reports,
                timing,
            );
        }
        match check_outputs(case, &shapes, &memories, &pool, &locations) {
            Ok((_, second)) => {
                problems.extend(second.into_iter().map(|p| format!("second run: {p}")))
            }
            Err(e) => return (Verdict::Fail(format!("second run: {e}")), reports, timing),
        }
    }
    if exec.dynamic_shapes && problems.is_empty() {
        if let (Some(short), Some(want)) = (dynamic::one_byte_short(&request), case.outputs.first())
        {
            match face::execute(&prepared, &short, exec.path) {
                Ok(face::Executed {
                    result: (status, shapes, _),
                    ..
                }) => {
                    if let Err(e) = dynamic::check_short(status, &shapes, &want.dimensions) {
                        problems.push(e);
                    }
                }
                Err(e) => problems.push(e),
            }
        }
    }
    let verdict = if problems.is_empty() {
        Verdict::Pass
    } else {
        Verdict::Fail(problems.join("; "))
    };
    (verdict, reports, timing)
}

/// Compares the outputs an execution wrote (in `pool` at `locations`, or in driver-managed
/// buffers) and its output shapes with the case's references: one report per output and
/// the problems found; an output that cannot be read is an error.
fn check_outputs(
    case: &TestCase,
    shapes: &[crate::hal::OutputShape],
    memories: &exec::DeviceMemories,
    pool: &Memory,
    locations: &[DataLocation],
) -> Result<(Vec<OutputReport>, Vec<String>), String> {
    let mut reports = Vec::new();
    let mut problems = Vec::new();
    for (k, (want, loc)) in case.outputs.iter().zip(locations).enumerate() {
        if let Some(s) = shapes.get(k) {
            if !want.ignored && (s.dimensions != want.dimensions || !s.is_sufficient) {
                problems.push(format!(
                    "output {k}: shape {:?}, expected {:?}",
                    s.dimensions, want.dimensions
                ));
            }
        }
        let ty = case.operand_type(want.operand).unwrap_or(OperandType(-1));
        let read = memories.output(k, want.data.len()).unwrap_or_else(|| {
            read_bytes(pool, loc.offset as u64, want.data.len()).map_err(|e| e.to_string())
        });
        let bytes = match read {
            Ok(b) => b,
            Err(e) => return Err(format!("reading output {k}: {e}")),
        };
        // RANDOM_MULTINOMIAL: the harness checks the samples' distribution instead.
        if k == 0 && case.multinomial_tolerance > 0.0 {
            if let Err(e) = multinomial::check(case, &bytes) {
                problems.push(e);
            }
        }
        let r = compare(
            want.operand,
            ty,
            &want.data,
            &bytes,
            case.relaxed,
            want.ignored,
        );
        if r.mismatches > 0 {
            problems.push(format!(
                "output {k}: {} of {} values out of tolerance (max error {:.3e})",
                r.mismatches,
                r.expected.len(),
                r.max_error
            ));
        }
        reports.push(r);
    }
    Ok((reports, problems))
}

/// Whether the outputs the execution wrote to `pool` (at `locations`, as
/// [`TestCase::make_request`] laid them out) match the case's references, within the
/// corpus's tolerances.
pub fn outputs_match(case: &TestCase, pool: &Memory, locations: &[DataLocation]) -> bool {
    case.outputs
        .iter()
        .zip(locations)
        .enumerate()
        .all(|(k, (want, loc))| {
            read_bytes(pool, loc.offset as u64, want.data.len())
                .is_ok_and(|got| output_matches(case, k, &got))
        })
}

/// Whether `got` matches the case's reference for output `k` within the corpus's
/// tolerances.
pub fn output_matches(case: &TestCase, k: usize, got: &[u8]) -> bool {
    let Some(want) = case.outputs.get(k) else {
        return false;
    };
    let Some(ty) = case.operand_type(want.operand) else {
        return false;
    };
    let r = compare(
        want.operand,
        ty,
        &want.data,
        got,
        case.relaxed,
        want.ignored,
    );
    r.mismatches == 0
}

fn write_zeros(pool: &Memory, offset: u64, len: usize) -> std::io::Result<()> {
    let fd = pool
        .fd()
        .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    let zeros = vec![0u8; len];
    let mut done = 0;
    while done < len {
        let n = nix::sys::uio::pwrite(fd, &zeros[done..], (offset + done as u64) as i64)
            .map_err(std::io::Error::from)?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        done += n;
    }
    Ok(())
}

fn read_bytes(pool: &Memory, offset: u64, len: usize) -> std::io::Result<Vec<u8>> {
    let fd = pool
        .fd()
        .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    let mut buf = vec![0u8; len];
    let mut done = 0;
    while done < len {
        let n = nix::sys::uio::pread(fd, &mut buf[done..], (offset + done as u64) as i64)
            .map_err(std::io::Error::from)?;
        if n == 0 {
            return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof));
        }
        done += n;
    }
    Ok(buf)
}
