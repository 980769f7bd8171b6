//! The LiteRT vendor pair's C ABI against a synthetic runtime: a compiler context over a
//! small graph made here (ADD with RELU, RELU, a custom operator vnpu lacks, ADD), the
//! plugin's Partition and Compile through it, then the byte code through the dispatch
//! library with a synthetic runtime context and host tensor buffers, as LiteRT calls them.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void, CStr};

use vnpu_delegate::dispatch::{self, DeviceContext, DispatchApi, InvocationContext, Metrics};
use vnpu_delegate::lrt::{
    self, AbiHeader, ApiVersion, CompilerContext, Handle, MemBuffer, Metric, RankedTensorType,
    RuntimeContext, Status,
};
use vnpu_delegate::plugin::{self, Compiled, Plugin};

/// The graph the synthetic compiler context shows.
#[derive(Default)]
struct G {
    /// Shape and constant value of each tensor.
    tensors: Vec<(Vec<i32>, Option<Vec<f32>>)>,
    /// (code, custom name, inputs, outputs).
    ops: Vec<(i32, &'static CStr, Vec<usize>, Vec<usize>)>,
    /// (operators, inputs, outputs) of each subgraph.
    subgraphs: Vec<(Vec<usize>, Vec<usize>, Vec<usize>)>,
    /// What push_op was given: (operator, partition).
    pushed: Vec<(usize, usize)>,
}

thread_local! {
    static GRAPH: RefCell<G> = RefCell::new(G::default());
}

const T: usize = 0x1000;
const O: usize = 0x2000;
const S: usize = 0x3000;
const W: usize = 0x5000;

fn h(base: usize, k: usize) -> Handle {
    (base + k) as Handle
}

fn k(base: usize, x: Handle) -> usize {
    (x as usize).wrapping_sub(base)
}

fn with<R>(f: impl FnOnce(&mut G) -> R) -> R {
    GRAPH.with(|g| f(&mut g.borrow_mut()))
}

unsafe fn put<X>(out: *mut X, v: X) -> Status {
    // SAFETY: the plugin passes writable out-pointers.
    unsafe { out.write(v) };
    lrt::OK
}

unsafe extern "C" fn n_models(_m: Handle, n: *mut usize) -> Status {
    // SAFETY: as `put`.
    unsafe { put(n, with(|g| g.subgraphs.len())) }
}
unsafe extern "C" fn model_sg(_m: Handle, i: usize, out: *mut Handle) -> Status {
    // SAFETY: as `put`.
    unsafe { put(out, h(S, i)) }
}
unsafe extern "C" fn n_ops(s: Handle, n: *mut usize) -> Status {
    // SAFETY: as `put`.
    unsafe { put(n, with(|g| g.subgraphs[k(S, s)].0.len())) }
}
unsafe extern "C" fn sg_op(s: Handle, i: usize, out: *mut Handle) -> Status {
    // SAFETY: as `put`.
    unsafe { put(out, h(O, with(|g| g.subgraphs[k(S, s)].0[i]))) }
}
unsafe extern "C" fn n_sg_in(s: Handle, n: *mut usize) -> Status {
    // SAFETY: as `put`.
    unsafe { put(n, with(|g| g.subgraphs[k(S, s)].1.len())) }
}
unsafe extern "C" fn sg_in(s: Handle, i: usize, out: *mut Handle) -> Status {
    // SAFETY: as `put`.
    unsafe { put(out, h(T, with(|g| g.subgraphs[k(S, s)].1[i]))) }
}
unsafe extern "C" fn n_sg_out(s: Handle, n: *mut usize) -> Status {
    // SAFETY: as `put`.
    unsafe { put(n, with(|g| g.subgraphs[k(S, s)].2.len())) }
}
unsafe extern "C" fn sg_out(s: Handle, i: usize, out: *mut Handle) -> Status {
    // SAFETY: as `put`.
    unsafe { put(out, h(T, with(|g| g.subgraphs[k(S, s)].2[i]))) }
}
unsafe extern "C" fn op_code(op: Handle, out: *mut c_int) -> Status {
    // SAFETY: as `put`.
    unsafe { put(out, with(|g| g.ops[k(O, op)].0)) }
}
unsafe extern "C" fn custom_code(op: Handle, out: *mut *const c_char) -> Status {
    // SAFETY: as `put`.
    unsafe { put(out, with(|g| g.ops[k(O, op)].1.as_ptr())) }
}
unsafe extern "C" fn n_op_in(op: Handle, n: *mut usize) -> Status {
    // SAFETY: as `put`.
    unsafe { put(n, with(|g| g.ops[k(O, op)].2.len())) }
}
unsafe extern "C" fn op_in(op: Handle, i: usize, out: *mut Handle) -> Status {
    // SAFETY: as `put`.
    unsafe { put(out, h(T, with(|g| g.ops[k(O, op)].2[i]))) }
}
unsafe extern "C" fn n_op_out(op: Handle, n: *mut usize) -> Status {
    // SAFETY: as `put`.
    unsafe { put(n, with(|g| g.ops[k(O, op)].3.len())) }
}
unsafe extern "C" fn op_out(op: Handle, i: usize, out: *mut Handle) -> Status {
    // SAFETY: as `put`.
    unsafe { put(out, h(T, with(|g| g.ops[k(O, op)].3[i]))) }
}
unsafe extern "C" fn type_id(_t: Handle, out: *mut c_int) -> Status {
    // SAFETY: as `put`.
    unsafe { put(out, lrt::RANKED) }
}
unsafe extern "C" fn ranked(t: Handle, out: *mut RankedTensorType) -> Status {
    let dims = with(|g| g.tensors[k(T, t)].0.clone());
    let mut r = RankedTensorType {
        element_type: 1,
        ..Default::default()
    };
    r.layout.bits = dims.len() as u32;
    r.layout.dimensions[..dims.len()].copy_from_slice(&dims);
    // SAFETY: as `put`.
    unsafe { put(out, r) }
}
unsafe extern "C" fn quant_none(_t: Handle, out: *mut c_int) -> Status {
    // SAFETY: as `put`.
    unsafe { put(out, 0) }
}
unsafe extern "C" fn weights(t: Handle, out: *mut Handle) -> Status {
    let n = k(T, t);
    match with(|g| g.tensors[n].1.is_some()) {
        // SAFETY: as `put`.
        true => unsafe { put(out, h(W, n)) },
        false => lrt::UNSUPPORTED,
    }
}
unsafe extern "C" fn weight_bytes(w: Handle, addr: *mut *const c_void, size: *mut usize) -> Status {
    let n = k(W, w);
    with(|g| {
        let v = g.tensors[n].1.as_ref().unwrap();
        // SAFETY: as `put`; the vector lives in the thread's graph, unchanged meanwhile.
        unsafe {
            put(addr, v.as_ptr().cast());
            put(size, v.len() * 4)
        }
    })
}
unsafe extern "C" fn push(_list: Handle, op: Handle, partition: usize) -> Status {
    with(|g| g.pushed.push((k(O, op), partition)));
    lrt::OK
}
unsafe extern "C" fn add_activation(_op: Handle, out: *mut u32) -> Status {
    // SAFETY: as `put`. RELU (the schema's 1).
    unsafe { put(out, 1) }
}

fn compiler_context(header: AbiHeader) -> Box<CompilerContext> {
    // SAFETY: every field is an integer, a raw pointer or an Option of a function
    // pointer: all-zero is valid (null) for each.
    let mut c: Box<CompilerContext> = Box::new(unsafe { std::mem::zeroed() });
    c.header = header;
    c.get_num_model_subgraphs = Some(n_models);
    c.get_model_subgraph = Some(model_sg);
    c.get_num_subgraph_ops = Some(n_ops);
    c.get_subgraph_op = Some(sg_op);
    c.get_num_subgraph_inputs = Some(n_sg_in);
    c.get_subgraph_input = Some(sg_in);
    c.get_num_subgraph_outputs = Some(n_sg_out);
    c.get_subgraph_output = Some(sg_out);
    c.get_op_code = Some(op_code);
    c.get_custom_code = Some(custom_code);
    c.get_num_op_inputs = Some(n_op_in);
    c.get_op_input = Some(op_in);
    c.get_num_op_outputs = Some(n_op_out);
    c.get_op_output = Some(op_out);
    c.get_tensor_type_id = Some(type_id);
    c.get_ranked_tensor_type = Some(ranked);
    c.get_quantization_type_id = Some(quant_none);
    c.get_tensor_weights = Some(weights);
    c.get_weights_bytes = Some(weight_bytes);
    c.push_op = Some(push);
    // get_add_fused_activation_option, the 26th option getter.
    c.option_getters[62 - 37] = add_activation as *const c_void;
    c
}

const PINNED: AbiHeader = AbiHeader {
    struct_size: 1408,
    major_version: 1,
    minor_version: 3,
    reserved: 0,
};

/// relu(x + c) -> t2; relu(t2) -> t3; custom "Mystery"(t3) -> t4; relu(t4 + c) -> y.
fn graph() -> G {
    let c = Some(vec![1.0, -2.0, 3.0, -4.0]);
    G {
        tensors: vec![
            (vec![1, 4], None),
            (vec![1, 4], c),
            (vec![1, 4], None),
            (vec![1, 4], None),
            (vec![1, 4], None),
            (vec![1, 4], None),
        ],
        ops: vec![
            (0, c"", vec![0, 1], vec![2]),
            (19, c"", vec![2], vec![3]),
            (32, c"Mystery", vec![3], vec![4]),
            (0, c"", vec![4, 1], vec![5]),
        ],
        subgraphs: vec![(vec![0, 1, 2, 3], vec![0], vec![5])],
        pushed: Vec::new(),
    }
}

fn new_plugin(header: AbiHeader) -> (Box<CompilerContext>, Result<*mut Plugin, Status>) {
    let ctx = compiler_context(header);
    let mut p: *mut Plugin = std::ptr::null_mut();
    // SAFETY: a context that outlives the plugin (returned beside it).
    let s = unsafe { plugin::create(&*ctx, &mut p, std::ptr::null_mut(), std::ptr::null_mut()) };
    (ctx, if s == lrt::OK { Ok(p) } else { Err(s) })
}

#[test]
fn plugin_refuses_another_runtimes_context() {
    let older = AbiHeader {
        struct_size: 1104,
        minor_version: 1,
        ..PINNED
    };
    let (_ctx, p) = new_plugin(older);
    assert_eq!(p.unwrap_err(), lrt::WRONG_VERSION);
    let mut v = ApiVersion::default();
    // SAFETY: a local out-pointer.
    assert_eq!(unsafe { plugin::get_version(&mut v) }, lrt::OK);
    assert_eq!(v, lrt::API_VERSION);
}

/// Partition selects vnpu's operators in two partitions around the custom one; Compile
/// turns a partition into byte code the dispatch library runs to the right values.
#[test]
fn partition_compile_dispatch() {
    with(|g| *g = graph());
    let (_ctx, p) = new_plugin(PINNED);
    let p = p.unwrap();
    // SAFETY: the plugin and handles of the synthetic runtime.
    let s = unsafe { plugin::partition(p, c"vnpu1".as_ptr(), h(S, 0), 0x6000 as Handle) };
    assert_eq!(s, lrt::OK);
    assert_eq!(with(|g| g.pushed.clone()), vec![(0, 0), (1, 0), (3, 1)]);
    // SAFETY: a live plugin.
    let report = unsafe { &*p }.report();
    assert!(
        report.contains("(3 on vnpu in 2 partitions, 1 on CPU)"),
        "{report}"
    );
    assert!(report.contains("custom Mystery"), "{report}");
    // Another SoC model is refused.
    // SAFETY: as above.
    let other = unsafe { plugin::partition(p, c"npu9".as_ptr(), h(S, 0), 0x6000 as Handle) };
    assert_eq!(other, lrt::UNSUPPORTED);

    // LiteRT outlines partition 0 as its own subgraph: x -> ADD(RELU) -> RELU -> t3.
    with(|g| g.subgraphs = vec![(vec![0, 1], vec![0], vec![3])]);
    let mut c: *mut Compiled = std::ptr::null_mut();
    // SAFETY: as above.
    let s = unsafe { plugin::compile(p, std::ptr::null(), 0x4000 as Handle, &mut c) };
    assert_eq!(s, lrt::OK);
    let (mut n, mut code, mut size) = (0usize, std::ptr::null::<u8>(), 0usize);
    let (mut info, mut info_size, mut module) = (std::ptr::null::<u8>(), 0usize, 9usize);
    // SAFETY: a live result; local out-pointers; the byte code is copied while it lives.
    let bytes = unsafe {
        assert_eq!(plugin::num_modules(c, &mut n), lrt::OK);
        assert_eq!(n, 1);
        assert_eq!(plugin::byte_code(c, 0, &mut code, &mut size), lrt::OK);
        assert_eq!(
            plugin::byte_code(c, 1, &mut code, &mut size),
            lrt::INDEX_OOB
        );
        assert_eq!(plugin::byte_code(c, 0, &mut code, &mut size), lrt::OK);
        assert_eq!(
            plugin::call_info(c, 0, &mut info, &mut info_size, &mut module),
            lrt::OK
        );
        let name = std::slice::from_raw_parts(info, info_size);
        assert_eq!(name, b"vnpu_partition_0");
        assert_eq!(module, 0);
        let bytes = std::slice::from_raw_parts(code, size).to_vec();
        plugin::destroy_compiled(c);
        plugin::destroy(p);
        bytes
    };
    let x = [0.5f32, 0.5, -5.0, 5.0];
    let want: Vec<f32> = x
        .iter()
        .zip([1.0, -2.0, 3.0, -4.0])
        .map(|(a, b)| (a + b).max(0.0))
        .collect();
    let (got, metrics) = run_dispatch(&bytes, &x).unwrap();
    assert_eq!(got, want);
    assert_eq!(metrics[0], ("vnpu_invocations".to_string(), 2));
    assert_eq!(metrics[1].0, "vnpu_device_time_us");
    assert_eq!(metrics[2].0, "vnpu_driver_time_us");

    // Corrupt byte code: an error status from invocation_context_create, no crash.
    let mut bad = bytes.clone();
    let at = bad.len() / 2;
    bad[at] ^= 0xff;
    bad.truncate(bad.len() - 3);
    assert!(run_dispatch(&bad, &x).is_err());
    let mut newer = bytes.clone();
    newer[8] = 9;
    assert_eq!(
        run_dispatch(&newer, &x).unwrap_err(),
        lrt::INCOMPATIBLE_BYTECODE
    );
}

/// A host tensor buffer of the synthetic runtime.
struct Buf {
    data: Vec<u8>,
}

unsafe extern "C" fn requirements(
    n: c_int,
    types: *const c_int,
    size: usize,
    _ns: c_int,
    _s: *const u32,
    out: *mut Handle,
) -> Status {
    // SAFETY: the dispatch library passes `n` types and a writable out-pointer.
    unsafe {
        assert_eq!((n, *types), (1, lrt::BUFFER_HOST_MEMORY));
        put(out, size as Handle)
    }
}
unsafe extern "C" fn packed_size(tb: Handle, out: *mut usize) -> Status {
    // SAFETY: `tb` is a Buf of the test.
    unsafe { put(out, (*tb.cast::<Buf>()).data.len()) }
}
unsafe extern "C" fn lock(tb: Handle, addr: *mut *mut c_void, _mode: c_int) -> Status {
    // SAFETY: `tb` is a Buf of the test.
    unsafe { put(addr, (*tb.cast::<Buf>()).data.as_mut_ptr().cast()) }
}
unsafe extern "C" fn unlock(_tb: Handle) -> Status {
    lrt::OK
}

/// Runs byte code of one input and one output of four floats twice through the dispatch
/// library's calls, in LiteRT's order; the output and the metrics.
/// An output's values and the metrics (name, value).
type Ran = (Vec<f32>, Vec<(String, i64)>);

fn run_dispatch(bytes: &[u8], x: &[f32; 4]) -> Result<Ran, Status> {
    // SAFETY: zero is valid for every field (integers, pointers, Options).
    let mut rt: Box<RuntimeContext> = Box::new(unsafe { std::mem::zeroed() });
    rt.header = AbiHeader {
        struct_size: 416,
        major_version: 1,
        minor_version: 2,
        reserved: 0,
    };
    rt.create_tensor_buffer_requirements = Some(requirements);
    rt.get_tensor_buffer_packed_size = Some(packed_size);
    rt.lock_tensor_buffer = Some(lock);
    rt.unlock_tensor_buffer = Some(unlock);
    let rt: *const RuntimeContext = &*rt;
    // SAFETY: zero-initialised like the runtime's static.
    let mut api: DispatchApi = unsafe { std::mem::zeroed() };
    let null = std::ptr::null_mut();
    // SAFETY: every call gets live objects of this test and local out-pointers, in the
    // order LiteRT calls them.
    unsafe {
        assert_eq!(dispatch::get_api(&mut api), lrt::OK);
        assert_eq!(api.version, lrt::API_VERSION);
        let table = &(*api.interface).entries;
        assert_eq!(table[17], dispatch::invoke as *const c_void);
        assert_eq!(table[10], dispatch::invocation_create as *const c_void);
        assert_eq!(dispatch::initialize(rt, null, null), lrt::OK);
        assert_eq!(
            dispatch::check_runtime(lrt::API_VERSION, null, null),
            lrt::OK
        );
        let mut caps = 0;
        assert_eq!(dispatch::capabilities(&mut caps), lrt::OK);
        assert_eq!(caps, lrt::CAPABILITIES_BASIC);
        let mut dc: *mut DeviceContext = std::ptr::null_mut();
        assert_eq!(dispatch::device_create(rt, null, &mut dc), lrt::OK);
        let m = MemBuffer {
            fd: -1,
            base_addr: bytes.as_ptr().cast(),
            offset: 0,
            size: bytes.len(),
            alloc_base_file_offset: 0,
        };
        let mut ic: *mut InvocationContext = std::ptr::null_mut();
        let s = dispatch::invocation_create(
            rt,
            dc,
            lrt::EXEC_ML_MODEL,
            &m,
            c"vnpu_partition_0".as_ptr(),
            1,
            1,
            &mut ic,
        );
        if s != lrt::OK {
            dispatch::device_destroy(dc);
            return Err(s);
        }
        let mut t = RankedTensorType {
            element_type: 1,
            ..Default::default()
        };
        t.layout.bits = 2;
        t.layout.dimensions[..2].copy_from_slice(&[1, 4]);
        let mut req: Handle = null;
        assert_eq!(dispatch::input_requirements(ic, 0, &t, &mut req), lrt::OK);
        assert_eq!(req as usize, 16);
        assert_eq!(
            dispatch::output_requirements(ic, 1, &t, &mut req),
            lrt::INDEX_OOB
        );
        let mut input = Buf {
            data: x.iter().flat_map(|v| v.to_le_bytes()).collect(),
        };
        let mut output = Buf { data: vec![0; 16] };
        let (mut hi, mut ho) = (0u64, 0u64);
        assert_eq!(
            dispatch::register(dc, (&mut input as *mut Buf).cast(), &mut hi),
            lrt::OK
        );
        assert_eq!(
            dispatch::register(dc, (&mut output as *mut Buf).cast(), &mut ho),
            lrt::OK
        );
        assert_eq!(dispatch::attach_input(ic, 0, hi), lrt::OK);
        assert_eq!(dispatch::attach_output(ic, 0, ho), lrt::OK);
        assert_eq!(dispatch::attach_output(ic, 3, ho), lrt::INDEX_OOB);
        assert_eq!(dispatch::start_metrics(ic, 0), lrt::OK);
        assert_eq!(dispatch::invoke(ic), lrt::OK);
        assert_eq!(dispatch::invoke(ic), lrt::OK);
        let mut metrics: *mut Metrics = std::ptr::null_mut();
        assert_eq!(dispatch::stop_metrics(ic, &mut metrics), lrt::OK);
        let mut n = 0;
        assert_eq!(dispatch::num_metrics(metrics, &mut n), lrt::OK);
        let mut list = Vec::new();
        for k in 0..n {
            let mut m = Metric {
                name: std::ptr::null(),
                value: lrt::Any { kind: 0, value: 0 },
            };
            assert_eq!(dispatch::metric(metrics, k, &mut m), lrt::OK);
            assert_eq!(m.value.kind, lrt::ANY_INT);
            list.push((
                CStr::from_ptr(m.name).to_string_lossy().into_owned(),
                m.value.value,
            ));
        }
        dispatch::destroy_metrics(metrics);
        // Detached, an invoke is an error, not a crash.
        assert_eq!(dispatch::detach_input(ic, 0, hi), lrt::OK);
        assert_ne!(dispatch::invoke(ic), lrt::OK);
        assert_eq!(dispatch::unregister(dc, hi), lrt::OK);
        assert_eq!(dispatch::unregister(dc, ho), lrt::OK);
        assert_ne!(dispatch::unregister(dc, ho), lrt::OK);
        dispatch::invocation_destroy(ic);
        dispatch::device_destroy(dc);
        let got = output
            .data
            .chunks(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        Ok((got, list))
    }
}

#[test]
fn dispatch_refuses_another_runtimes_context() {
    // SAFETY: zero is valid for every field.
    let mut rt: Box<RuntimeContext> = Box::new(unsafe { std::mem::zeroed() });
    rt.header = AbiHeader {
        struct_size: 408,
        major_version: 1,
        minor_version: 1,
        reserved: 0,
    };
    let null = std::ptr::null_mut();
    // SAFETY: a synthetic context with a valid header.
    let s = unsafe { dispatch::initialize(&*rt, null, null) };
    assert_eq!(s, lrt::WRONG_VERSION);
    assert_eq!(
        dispatch::check_runtime(
            ApiVersion {
                major: 0,
                minor: 2,
                patch: 0
            },
            null,
            null
        ),
        lrt::WRONG_VERSION
    );
}
