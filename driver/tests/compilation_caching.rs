//! Port of the VTS 1.3 CompilationCachingTests and CompilationCachingSecurityTest.
//!
//! Every test runs twice: on a device whose cache I/O uses io_uring and on one forced to
//! the pread/pwrite fallback. Where io_uring is unavailable (many containers) the first
//! run says so on stderr and uses the fallback too; set `VNPU_REQUIRE_IO_URING=1` to make
//! that a failure. The models are the corpus's float MobileNet, a quant8 convolution (the
//! VTS quant8 MobileNet is not in the corpus) and, for the TOCTOU and replacement tests,
//! chains of 100 ADD and 100 MUL operations, as in VTS.

mod common;

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};

use vnpu_driver::cache::{CacheConfig, IoChoice, IoPath};
use vnpu_driver::conformance::corpus::{TestBuffer, TestCase, TestOutput};
use vnpu_driver::conformance::lookup;
use vnpu_driver::device::{IDevice, IPreparedModel, PreparedModelSlot, VnpuDevice};
use vnpu_driver::device::{PrepareArgs, PrepareFromCacheArgs};
use vnpu_driver::hal::{
    DataLocation, ErrorStatus, MeasureTiming, Model, NativeHandle, Operand, OperandLifeTime,
    OperandType, Operation, OperationType, OptionalTimePoint, OptionalTimeoutDuration, Subgraph,
    MAX_NUMBER_OF_CACHE_FILES,
};
use vnpu_emu::DeviceConfig;

type Token = [u8; 32];
type Prepared = Option<Arc<dyn IPreparedModel>>;

fn scratch_dir() -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let d = std::env::temp_dir().join(format!(
        "vnpu-cc-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&d).expect("scratch dir");
    d
}

/// The two devices: io_uring (where available) and the forced fallback, sharing a key
/// in a temporary directory.
fn devices() -> &'static [(IoChoice, Arc<VnpuDevice>)] {
    static DEVS: OnceLock<Vec<(IoChoice, Arc<VnpuDevice>)>> = OnceLock::new();
    DEVS.get_or_init(|| {
        let key_path = scratch_dir().join("cache.key");
        [IoChoice::Auto, IoChoice::Fallback]
            .into_iter()
            .map(|io| {
                let config = CacheConfig {
                    key_path: key_path.clone(),
                    io,
                };
                let dev = VnpuDevice::with_cache(DeviceConfig::default(), config).expect("device");
                (io, dev)
            })
            .collect()
    })
}

/// Runs `f` on each device, saying which I/O path each run used.
fn each_path(test: &str, f: impl Fn(&Arc<VnpuDevice>)) {
    for (choice, dev) in devices() {
        let path = dev.cache().io_path();
        let why = dev.cache().io().describe();
        match (choice, path) {
            (IoChoice::Auto, IoPath::IoUring) => eprintln!("{test}: io_uring path ({why})"),
            (IoChoice::Auto, IoPath::Fallback) => {
                assert!(
                    std::env::var_os("VNPU_REQUIRE_IO_URING").is_none(),
                    "io_uring required but unavailable: {why}"
                );
                eprintln!("{test}: io_uring unavailable, this run used the fallback ({why})");
            }
            (IoChoice::Fallback, p) => {
                assert_eq!(p, IoPath::Fallback);
                eprintln!("{test}: fallback path");
            }
        }
        f(dev);
    }
}

fn corpus_case(file: &str, name: &str) -> TestCase {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../conformance")
        .join(file);
    lookup(&[path], name).expect("corpus case")
}

fn mobilenet() -> &'static TestCase {
    static C: OnceLock<TestCase> = OnceLock::new();
    C.get_or_init(|| corpus_case("V1_0.jsonl.gz", "mobilenet_224_gender_basic_fixed"))
}

fn quant8() -> &'static TestCase {
    static C: OnceLock<TestCase> = OnceLock::new();
    C.get_or_init(|| corpus_case("V1_0.jsonl.gz", "conv_quant8/conv_quant8"))
}

/// The VTS "large" models: `x op c op c ... op c`, 100 operations, `c` a constant.
fn chain(op: OperationType) -> TestCase {
    const LEN: usize = 100;
    let f32t = |lifetime, consumers| Operand {
        r#type: OperandType::TENSOR_FLOAT32,
        dimensions: vec![1, 4],
        number_of_consumers: consumers,
        lifetime,
        ..Operand::default()
    };
    let c = [1.01f32, 0.99, 1.02, 0.98];
    let mut values: Vec<u8> = c.iter().flat_map(|v| v.to_le_bytes()).collect();
    values.extend_from_slice(&0i32.to_le_bytes());
    let mut operands = vec![
        f32t(OperandLifeTime::SUBGRAPH_INPUT, 1),
        Operand {
            location: DataLocation {
                pool_index: 0,
                offset: 0,
                length: 16,
            },
            ..f32t(OperandLifeTime::CONSTANT_COPY, LEN as u32)
        },
        Operand {
            r#type: OperandType::INT32,
            dimensions: vec![],
            number_of_consumers: LEN as u32,
            lifetime: OperandLifeTime::CONSTANT_COPY,
            location: DataLocation {
                pool_index: 0,
                offset: 16,
                length: 4,
            },
            ..Operand::default()
        },
    ];
    let mut operations = Vec::new();
    for k in 0..LEN {
        let last = k + 1 == LEN;
        operands.push(if last {
            f32t(OperandLifeTime::SUBGRAPH_OUTPUT, 0)
        } else {
            f32t(OperandLifeTime::TEMPORARY_VARIABLE, 1)
        });
        let prev = if k == 0 { 0 } else { operands.len() as u32 - 2 };
        operations.push(Operation {
            r#type: op,
            inputs: vec![prev, 1, 2],
            outputs: vec![operands.len() as u32 - 1],
        });
    }
    let out = operands.len() as u32 - 1;
    let x = [1.0f32, 2.0, 3.0, 4.0];
    let mut y = x;
    for _ in 0..LEN {
        for (v, c) in y.iter_mut().zip(c) {
            *v = if op == OperationType::ADD {
                *v + c
            } else {
                *v * c
            };
        }
    }
    let bytes = |v: &[f32]| v.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>();
    TestCase {
        name: format!("chain_{}", op.name().unwrap_or("?")),
        spec: "chain".into(),
        min_hal_version: "V1_0".into(),
        model: Model {
            main: Subgraph {
                operands,
                operations,
                input_indexes: vec![0],
                output_indexes: vec![out],
            },
            operand_values: values,
            ..Model::default()
        },
        expect_failure: false,
        multinomial_tolerance: 0.0,
        inputs: vec![TestBuffer {
            operand: 0,
            dimensions: vec![1, 4],
            data: bytes(&x),
            has_no_value: false,
        }],
        outputs: vec![TestOutput {
            operand: out,
            dimensions: vec![1, 4],
            data: bytes(&y),
            ignored: false,
        }],
        relaxed: false,
    }
}

fn add_chain() -> &'static TestCase {
    static C: OnceLock<TestCase> = OnceLock::new();
    C.get_or_init(|| chain(OperationType::ADD))
}

fn mul_chain() -> &'static TestCase {
    static C: OnceLock<TestCase> = OnceLock::new();
    C.get_or_init(|| chain(OperationType::MUL))
}

/// The models of CompilationCachingTests.
fn models() -> [&'static TestCase; 2] {
    [mobilenet(), quant8()]
}

/// Cache files on disk: paths, so tests can reopen them with other access modes.
struct Files {
    dir: PathBuf,
    model: Vec<PathBuf>,
    data: Vec<PathBuf>,
}

impl Files {
    fn new(n_model: usize, n_data: usize) -> Files {
        let dir = scratch_dir();
        let mk = |prefix: &str, n: usize| -> Vec<PathBuf> {
            (0..n)
                .map(|i| {
                    let p = dir.join(format!("{prefix}{i}"));
                    File::create(&p).expect("create cache file");
                    p
                })
                .collect()
        };
        let model = mk("model", n_model);
        let data = mk("data", n_data);
        Files { dir, model, data }
    }

    fn standard() -> Files {
        let dev = &devices()[0].1;
        let (_, m, d) = dev.get_number_of_cache_files_needed();
        Files::new(m as usize, d as usize)
    }

    fn handles(&self) -> (Vec<NativeHandle>, Vec<NativeHandle>) {
        (
            self.model
                .iter()
                .map(|p| handle(p, Access::ReadWrite))
                .collect(),
            self.data
                .iter()
                .map(|p| handle(p, Access::ReadWrite))
                .collect(),
        )
    }
}

impl Drop for Files {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Access {
    ReadWrite,
    ReadOnly,
    WriteOnly,
}

fn open(path: &Path, access: Access) -> File {
    let mut o = OpenOptions::new();
    match access {
        Access::ReadWrite => o.read(true).write(true),
        Access::ReadOnly => o.read(true),
        Access::WriteOnly => o.write(true),
    };
    o.open(path).expect("open cache file")
}

fn handle(path: &Path, access: Access) -> NativeHandle {
    NativeHandle {
        fds: vec![Arc::new(OwnedFd::from(open(path, access)))],
        ints: Vec::new(),
    }
}

/// prepareModel_1_3 with cache handles: must succeed whatever the handles.
fn save(
    dev: &VnpuDevice,
    case: &TestCase,
    model: &[NativeHandle],
    data: &[NativeHandle],
    token: &Token,
) -> Arc<dyn IPreparedModel> {
    let slot = PreparedModelSlot::new();
    let ret = dev.prepare_model_1_3(PrepareArgs {
        model_cache: model,
        data_cache: data,
        token,
        ..PrepareArgs::new(&case.model, Some(slot.clone()))
    });
    let (status, prepared) = slot.wait();
    assert_eq!(ret, ErrorStatus::None, "{}: prepareModel_1_3", case.name);
    assert_eq!(status, ErrorStatus::None, "{}: prepareModel_1_3", case.name);
    assert_eq!(slot.notifications(), 1);
    prepared.expect("prepared model")
}

/// prepareModelFromCache_1_3: return and notification agree, come once, and a model is
/// given exactly when the status is NONE.
fn load(
    dev: &VnpuDevice,
    model: &[NativeHandle],
    data: &[NativeHandle],
    token: &Token,
) -> (ErrorStatus, Prepared) {
    let slot = PreparedModelSlot::new();
    let ret = dev.prepare_model_from_cache_1_3(PrepareFromCacheArgs::new(
        model,
        data,
        token,
        Some(slot.clone()),
    ));
    let (status, prepared) = slot.wait();
    assert_eq!(ret, status, "return and notify disagree");
    assert_eq!(slot.notifications(), 1, "notified exactly once");
    assert_eq!(prepared.is_some(), status == ErrorStatus::None);
    (status, prepared)
}

/// Executes `case` on `prepared`; true when every output is within tolerance.
fn outputs_match(prepared: &Arc<dyn IPreparedModel>, case: &TestCase) -> bool {
    let (request, pool, locations) = case.make_request().expect("request");
    let (status, _, _) = prepared.execute_synchronously_1_3(
        &request,
        MeasureTiming::NO,
        OptionalTimePoint::NONE,
        OptionalTimeoutDuration(None),
    );
    if status != ErrorStatus::None {
        return false;
    }
    vnpu_driver::conformance::outputs_match(case, &pool, &locations)
}

fn check(prepared: &Arc<dyn IPreparedModel>, case: &TestCase) {
    assert!(
        outputs_match(prepared, case),
        "{}: wrong outputs",
        case.name
    );
}

fn assert_fails(status: ErrorStatus, what: &str) {
    assert!(
        matches!(
            status,
            ErrorStatus::GeneralFailure | ErrorStatus::InvalidArgument
        ),
        "{what}: {status}"
    );
}

/// A seeded generator (the suite's seeds 0-9), no dependency needed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n.max(1)
    }
}

fn read_all(path: &Path) -> Vec<u8> {
    std::fs::read(path).expect("read cache file")
}

/// A saved cache: the files' bytes after a save of `case` with `token`.
fn saved(dev: &VnpuDevice, case: &TestCase, token: &Token) -> (Vec<u8>, Vec<u8>) {
    let files = Files::standard();
    let (m, d) = files.handles();
    save(dev, case, &m, &d, token);
    (read_all(&files.model[0]), read_all(&files.data[0]))
}

/// Loads from fresh files holding these bytes.
fn load_bytes(
    dev: &VnpuDevice,
    model: &[u8],
    data: &[u8],
    token: &Token,
) -> (ErrorStatus, Prepared) {
    let files = Files::standard();
    std::fs::write(&files.model[0], model).expect("write");
    std::fs::write(&files.data[0], data).expect("write");
    let (m, d) = files.handles();
    load(dev, &m, &d, token)
}

#[test]
fn cache_saving_and_retrieval() {
    each_path("cache_saving_and_retrieval", |dev| {
        let (_, m, d) = dev.get_number_of_cache_files_needed();
        assert!(m > 0 && d > 0, "caching is supported");
        assert!(m as usize <= MAX_NUMBER_OF_CACHE_FILES && d as usize <= MAX_NUMBER_OF_CACHE_FILES);
        for case in models().into_iter().chain([add_chain()]) {
            let files = Files::standard();
            let (mh, dh) = files.handles();
            let token = [0u8; 32];
            check(&save(dev, case, &mh, &dh, &token), case);
            let (status, prepared) = load(dev, &mh, &dh, &token);
            assert_eq!(status, ErrorStatus::None, "{}", case.name);
            check(&prepared.expect("model"), case);
        }
    });
}

#[test]
fn cache_saving_and_retrieval_non_zero_offset() {
    each_path("cache_saving_and_retrieval_non_zero_offset", |dev| {
        for case in models() {
            let files = Files::standard();
            let all = || files.model.iter().chain(&files.data);
            // Two junk bytes at the start, leaving each file's offset at 2.
            let mut opened: Vec<File> = all().map(|p| open(p, Access::ReadWrite)).collect();
            for f in &mut opened {
                f.write_all(&[0xAB, 0xCD]).expect("junk");
            }
            let handles = |from: &mut [File]| -> Vec<NativeHandle> {
                from.iter()
                    .map(|f| NativeHandle {
                        fds: vec![Arc::new(OwnedFd::from(f.try_clone().expect("dup")))],
                        ints: Vec::new(),
                    })
                    .collect()
            };
            let hs = handles(&mut opened);
            let (mh, dh) = hs.split_at(files.model.len());
            let token = [0u8; 32];
            check(&save(dev, case, mh, dh, &token), case);
            // One byte read from each fd, so each offset is not 0.
            for f in &mut opened {
                f.seek(SeekFrom::Start(0)).expect("seek");
                let mut b = [0u8; 1];
                f.read_exact(&mut b).expect("read");
            }
            let (status, prepared) = load(dev, mh, dh, &token);
            assert_eq!(status, ErrorStatus::None, "{}", case.name);
            check(&prepared.expect("model"), case);
        }
    });
}

/// Handle lists with one handle more or one less than needed.
fn miscounted(files: &Files) -> Vec<(Vec<NativeHandle>, Vec<NativeHandle>)> {
    let (m, d) = files.handles();
    let extra = || handle(&files.model[0], Access::ReadWrite);
    let mut out = Vec::new();
    let mut more = m.clone();
    more.push(extra());
    out.push((more, d.clone()));
    out.push((m[..m.len() - 1].to_vec(), d.clone()));
    let mut more = d.clone();
    more.push(extra());
    out.push((m.clone(), more));
    out.push((m.clone(), d[..d.len() - 1].to_vec()));
    out
}

/// Bad handle lists made from a set of cache files.
type BadHandles = fn(&Files) -> Vec<(Vec<NativeHandle>, Vec<NativeHandle>)>;

/// Saving with each bad handle list still prepares a working model (nothing is saved),
/// and loading with the same handles fails.
fn saving_with(name: &str, bad: BadHandles, what: &str) {
    each_path(name, |dev| {
        for case in models() {
            let files = Files::standard();
            for (m, d) in bad(&files) {
                let token = [0u8; 32];
                check(&save(dev, case, &m, &d, &token), case);
                let (status, _) = load(dev, &m, &d, &token);
                assert_fails(status, what);
            }
        }
    });
}

/// After a good save, loading with each bad handle list fails.
fn loading_with(name: &str, bad: BadHandles, what: &str) {
    each_path(name, |dev| {
        for case in models() {
            let files = Files::standard();
            let (m, d) = files.handles();
            let token = [0u8; 32];
            save(dev, case, &m, &d, &token);
            for (m, d) in bad(&files) {
                let (status, _) = load(dev, &m, &d, &token);
                assert_fails(status, what);
            }
        }
    });
}

#[test]
fn save_to_cache_invalid_num_cache() {
    saving_with(
        "save_to_cache_invalid_num_cache",
        miscounted,
        "load with the same miscounted handles",
    );
}

#[test]
fn prepare_model_from_cache_invalid_num_cache() {
    loading_with(
        "prepare_model_from_cache_invalid_num_cache",
        miscounted,
        "miscounted handles",
    );
}

/// Handle lists where one handle holds 0 or 2 fds.
fn bad_fd_counts(files: &Files) -> Vec<(Vec<NativeHandle>, Vec<NativeHandle>)> {
    let (m, d) = files.handles();
    let mut out = Vec::new();
    for which in 0..m.len() + d.len() {
        for n in [0usize, 2] {
            let (mut m, mut d) = (m.clone(), d.clone());
            let h = if which < m.len() {
                &mut m[which]
            } else {
                &mut d[which - files.model.len()]
            };
            if n == 0 {
                h.fds.clear();
            } else {
                let fd = Arc::clone(&h.fds[0]);
                h.fds.push(fd);
            }
            out.push((m, d));
        }
    }
    out
}

#[test]
fn save_to_cache_invalid_num_fd() {
    saving_with(
        "save_to_cache_invalid_num_fd",
        bad_fd_counts,
        "load with the same bad fd counts",
    );
}

#[test]
fn prepare_model_from_cache_invalid_num_fd() {
    loading_with(
        "prepare_model_from_cache_invalid_num_fd",
        bad_fd_counts,
        "bad fd counts",
    );
}

/// Handle lists where one fd has the access mode `access`.
fn with_access(files: &Files, access: Access) -> Vec<(Vec<NativeHandle>, Vec<NativeHandle>)> {
    let all: Vec<&PathBuf> = files.model.iter().chain(&files.data).collect();
    (0..all.len())
        .map(|k| {
            let hs: Vec<NativeHandle> = all
                .iter()
                .enumerate()
                .map(|(i, p)| handle(p, if i == k { access } else { Access::ReadWrite }))
                .collect();
            let (m, d) = hs.split_at(files.model.len());
            (m.to_vec(), d.to_vec())
        })
        .collect()
}

#[test]
fn save_to_cache_invalid_access_mode() {
    each_path("save_to_cache_invalid_access_mode", |dev| {
        for case in models() {
            let token = [0u8; 32];
            let probe = Files::standard();
            for k in 0..with_access(&probe, Access::ReadOnly).len() {
                let files = Files::standard();
                let (m, d) = with_access(&files, Access::ReadOnly).swap_remove(k);
                check(&save(dev, case, &m, &d, &token), case);
                let (m, d) = files.handles();
                let (status, _) = load(dev, &m, &d, &token);
                assert_fails(status, "load after a save with a read-only fd");
            }
        }
    });
}

#[test]
fn prepare_model_from_cache_invalid_access_mode() {
    each_path("prepare_model_from_cache_invalid_access_mode", |dev| {
        for case in models() {
            let files = Files::standard();
            let (m, d) = files.handles();
            let token = [0u8; 32];
            save(dev, case, &m, &d, &token);
            for (m, d) in with_access(&files, Access::WriteOnly) {
                let (status, _) = load(dev, &m, &d, &token);
                assert_eq!(status, ErrorStatus::GeneralFailure, "a write-only fd");
            }
        }
    });
}

/// Copies the model cache files `from` over `to`, through separate fds, until `stop`
/// (as VTS's copyCacheFiles: the data cache is shared by both models).
fn copy_loop(from: &[PathBuf], to: &[PathBuf], stop: &AtomicBool) {
    let bytes: Vec<(Vec<u8>, &PathBuf)> =
        from.iter().zip(to).map(|(f, t)| (read_all(f), t)).collect();
    while !stop.load(Ordering::Relaxed) {
        for (b, t) in &bytes {
            let _ = std::fs::write(t, b);
        }
        std::thread::yield_now();
    }
}

const TOCTOU_ITERATIONS: usize = 100;

/// The TOCTOU set-up: MUL saved to its own model cache and the shared data cache with
/// token 0; ADD uses token 0 + 1 (as VTS: `mToken[0]++`).
struct Toctou {
    add: Files,
    mul_model: Vec<PathBuf>,
    add_token: Token,
}

impl Toctou {
    fn new(dev: &VnpuDevice) -> Toctou {
        let add = Files::standard();
        let mul_model: Vec<PathBuf> = add
            .model
            .iter()
            .map(|p| {
                let q = p.with_extension("mul");
                File::create(&q).expect("create");
                q
            })
            .collect();
        let m: Vec<NativeHandle> = mul_model
            .iter()
            .map(|p| handle(p, Access::ReadWrite))
            .collect();
        let (_, d) = add.handles();
        save(dev, mul_chain(), &m, &d, &[0u8; 32]);
        let mut add_token = [0u8; 32];
        add_token[0] += 1;
        Toctou {
            add,
            mul_model,
            add_token,
        }
    }

    /// A load's outcome: may fail, but a model that loads computes ADD.
    fn judge(&self, r: (ErrorStatus, Prepared), tally: &mut (u32, u32)) {
        match r {
            (ErrorStatus::None, Some(p)) => {
                check(&p, add_chain());
                tally.0 += 1;
            }
            (status, _) => {
                assert_eq!(status, ErrorStatus::GeneralFailure);
                tally.1 += 1;
            }
        }
    }
}

#[test]
fn save_to_cache_toctou() {
    each_path("save_to_cache_toctou", |dev| {
        let t = Toctou::new(dev);
        let mut tally = (0, 0);
        for _ in 0..TOCTOU_ITERATIONS {
            let (m, d) = t.add.handles();
            let stop = AtomicBool::new(false);
            std::thread::scope(|s| {
                s.spawn(|| copy_loop(&t.mul_model, &t.add.model, &stop));
                save(dev, add_chain(), &m, &d, &t.add_token);
                stop.store(true, Ordering::Relaxed);
            });
            t.judge(load(dev, &m, &d, &t.add_token), &mut tally);
        }
        eprintln!(
            "save_to_cache_toctou: {} loaded, {} failed",
            tally.0, tally.1
        );
    });
}

#[test]
fn prepare_from_cache_toctou() {
    each_path("prepare_from_cache_toctou", |dev| {
        let t = Toctou::new(dev);
        let mut tally = (0, 0);
        for _ in 0..TOCTOU_ITERATIONS {
            let (m, d) = t.add.handles();
            save(dev, add_chain(), &m, &d, &t.add_token);
            let stop = AtomicBool::new(false);
            let r = std::thread::scope(|s| {
                s.spawn(|| copy_loop(&t.mul_model, &t.add.model, &stop));
                let r = load(dev, &m, &d, &t.add_token);
                stop.store(true, Ordering::Relaxed);
                r
            });
            t.judge(r, &mut tally);
        }
        eprintln!(
            "prepare_from_cache_toctou: {} loaded, {} failed",
            tally.0, tally.1
        );
    });
}

#[test]
fn replace_security_sensitive_cache() {
    each_path("replace_security_sensitive_cache", |dev| {
        let add_token = [0u8; 32];
        let mut mul_token = [0u8; 32];
        mul_token[0] = 1;
        let (_, add_data) = saved(dev, add_chain(), &add_token);
        let (mul_model, _) = saved(dev, mul_chain(), &mul_token);
        let (status, _) = load_bytes(dev, &mul_model, &add_data, &add_token);
        assert_eq!(status, ErrorStatus::GeneralFailure);
    });
}

const SEEDS: std::ops::Range<u64> = 0..10;

/// CompilationCachingSecurityTest: for each model and seed, a saved cache altered by
/// `alter` (model cache, data cache, token) must fail to load with GENERAL_FAILURE.
fn tampered(test: &str, alter: impl Fn(&mut Rng, &mut Vec<u8>, &mut Vec<u8>, &mut Token)) {
    each_path(test, |dev| {
        for case in models() {
            let token = [0u8; 32];
            let (model, data) = saved(dev, case, &token);
            for seed in SEEDS {
                let (mut m, mut d, mut t) = (model.clone(), data.clone(), token);
                alter(&mut Rng(seed), &mut m, &mut d, &mut t);
                let (status, _) = load_bytes(dev, &m, &d, &t);
                assert_eq!(
                    status,
                    ErrorStatus::GeneralFailure,
                    "{}, seed {seed}",
                    case.name
                );
            }
        }
    });
}

fn flip_bit(rng: &mut Rng, bytes: &mut [u8]) {
    let bit = rng.below(bytes.len() as u64 * 8);
    bytes[(bit / 8) as usize] ^= 1 << (bit % 8);
}

fn append(rng: &mut Rng, bytes: &mut Vec<u8>) {
    let n = 1 + rng.below(256) as usize;
    bytes.extend((0..n).map(|_| rng.below(256) as u8));
}

#[test]
fn corrupted_model_cache() {
    tampered("corrupted_model_cache", |rng, m, _, _| flip_bit(rng, m));
}

#[test]
fn wrong_length_model_cache() {
    tampered("wrong_length_model_cache", |rng, m, _, _| append(rng, m));
}

/// VTS asks only for no crash and a model iff NONE (checked in `load`); the digest in the
/// model cache catches every flipped bit and every appended byte.
#[test]
fn corrupted_data_cache() {
    tampered("corrupted_data_cache", |rng, _, d, _| flip_bit(rng, d));
}

#[test]
fn wrong_length_data_cache() {
    tampered("wrong_length_data_cache", |rng, _, d, _| append(rng, d));
}

#[test]
fn wrong_token() {
    tampered("wrong_token", |rng, _, _, t| flip_bit(rng, t));
}

/// A model whose input shape is left open is saved without a program: the restored model
/// compiles one at its first execution (its constants read back from device memory, the
/// pre-packed float32 filters unpacked) over the packed filters already in device memory.
#[test]
fn restored_model_compiles_from_its_packed_weights() {
    each_path("restored_model_compiles_from_its_packed_weights", |dev| {
        let mut case = mobilenet().clone();
        let input = case.model.main.input_indexes[0] as usize;
        case.model.main.operands[input].dimensions[0] = 0;
        let files = Files::standard();
        let (mh, dh) = files.handles();
        let token = [3u8; 32];
        check(&save(dev, &case, &mh, &dh, &token), &case);
        let (status, prepared) = load(dev, &mh, &dh, &token);
        assert_eq!(status, ErrorStatus::None);
        check(&prepared.expect("model"), &case);
    });
}

/// A corpus-format case (`vnpu run FILE.json`): `x + c + c ...`, `len` ADD operations on
/// [1, 4] float32 tensors, with its expected output.
fn add_chain_json(len: usize) -> String {
    let operand = |lifetime: &str, data: &str| {
        format!(
            r#"{{"type":"TENSOR_FLOAT32","dimensions":[1,4],"scale":0.0,"zero_point":0,"lifetime":"{lifetime}","channel_quant":null,"data":{data}}}"#
        )
    };
    let c = [0.5f32, 0.25, 1.0, 2.0];
    let mut operands = vec![
        operand("SUBGRAPH_INPUT", "null"),
        operand("CONSTANT_COPY", "[0.5,0.25,1.0,2.0]"),
        r#"{"type":"INT32","dimensions":[],"scale":0.0,"zero_point":0,"lifetime":"CONSTANT_COPY","channel_quant":null,"data":[0]}"#.to_string(),
    ];
    let mut operations = Vec::new();
    for k in 0..len {
        let last = k + 1 == len;
        operands.push(operand(
            if last {
                "SUBGRAPH_OUTPUT"
            } else {
                "TEMPORARY_VARIABLE"
            },
            "null",
        ));
        let prev = if k == 0 { 0 } else { operands.len() - 2 };
        operations.push(format!(
            r#"{{"type":"ADD","inputs":[{prev},1,2],"outputs":[{}]}}"#,
            operands.len() - 1
        ));
    }
    let x = [1.0f32, 2.0, 3.0, 4.0];
    let y: Vec<String> = x
        .iter()
        .zip(c)
        .map(|(x, c)| format!("{:?}", x + c * len as f32))
        .collect();
    format!(
        r#"{{"name":"add_chain/add_chain","spec":"add_chain","min_hal_version":"V1_0","model":{{"main":{{"operands":[{}],"operations":[{}],"input_indexes":[0],"output_indexes":[{}]}},"referenced":[],"relax_fp32_to_fp16":false}},"expect_failure":false,"multinomial_tolerance":0.0,"inputs":[{{"operand":0,"dimensions":[1,4],"data":[1.0,2.0,3.0,4.0]}}],"outputs":[{{"operand":{},"dimensions":[1,4],"data":[{}],"ignored":false}}]}}"#,
        operands.join(","),
        operations.join(","),
        operands.len() - 1,
        operands.len() - 1,
        y.join(",")
    )
}

/// `vnpu run CASE --cache-dir DIR --remote SOCKET` with a file size limit of `limit` bytes
/// (RLIMIT_FSIZE, SIGXFSZ ignored: a write past it fails with EFBIG, as a full disk fails
/// one with ENOSPC): (exit status, stdout, stderr).
fn run_cached_with_size_limit(
    case: &Path,
    dir: &Path,
    socket: &Path,
    limit: u64,
) -> (Option<i32>, String, String) {
    use std::os::unix::process::CommandExt;
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_vnpu"));
    cmd.arg("run")
        .arg(case)
        .arg("--cache-dir")
        .arg(dir)
        .arg("--remote")
        .arg(socket);
    // SAFETY: between fork and exec only async-signal-safe calls (signal, setrlimit).
    unsafe {
        cmd.pre_exec(move || {
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            let lim = libc::rlimit {
                rlim_cur: limit,
                rlim_max: limit,
            };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = cmd.output().expect("run vnpu");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A save into a cache directory that runs out of room (here a file size limit, which
/// fails a write as a full disk does) is reported as failed, with the OS's reason, and
/// leaves no file behind: the next run misses again and saves once there is room. The
/// run itself is not affected. Over `--remote`, so that the files the CLI writes are only
/// its own (the service, without the limit, writes the staged cache).
#[test]
fn full_disk_save_reports_failure_and_leaves_no_partial_files() {
    let service = common::service::Service::start("full-disk");
    let dir = scratch_dir().join("full-disk");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let case = dir.join("chain.json");
    std::fs::write(&case, add_chain_json(300)).unwrap();
    let cache = dir.join("cache");
    // Below the model cache's size, above everything else the CLI writes.
    const LIMIT: u64 = 32 << 10;
    for _ in 0..2 {
        let (code, out, err) = run_cached_with_size_limit(&case, &cache, &service.socket, LIMIT);
        assert_eq!(code, Some(0), "{out}{err}");
        assert_eq!(out.lines().last(), Some("PASS"), "{out}");
        let line = out.lines().find(|l| l.starts_with("cache: ")).unwrap();
        assert!(
            line.starts_with("cache: miss")
                && line.contains("failed")
                && line.contains("File too large"),
            "{line}"
        );
        assert!(err.contains("File too large"), "{err}");
        let left: Vec<_> = std::fs::read_dir(&cache)
            .map(|d| d.map(|e| e.unwrap().file_name()).collect())
            .unwrap_or_default();
        assert!(left.is_empty(), "files left behind: {left:?}");
    }
    // With room, the save completes and the next run loads it.
    let unlimited = libc::RLIM_INFINITY;
    let (code, out, err) = run_cached_with_size_limit(&case, &cache, &service.socket, unlimited);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains("cache: miss") && out.contains("saved to"),
        "{out}"
    );
    let sizes: Vec<u64> = std::fs::read_dir(&cache)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .collect();
    assert_eq!(sizes.len(), 2, "{sizes:?}");
    assert!(
        sizes.iter().any(|&s| s > LIMIT),
        "the limit was below the save: {sizes:?}"
    );
    let (code, out, err) = run_cached_with_size_limit(&case, &cache, &service.socket, LIMIT);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("cache: hit"), "{out}");
    std::fs::remove_dir_all(&dir).unwrap();
}
