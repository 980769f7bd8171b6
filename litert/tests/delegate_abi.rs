//! The external delegate's C ABI against a synthetic runtime: a `TfLiteContext` made here
//! (execution plan, nodes with C parameter structs, tensors) that does what TFLite does with
//! a delegate (Prepare, ReplaceNodeSubsetsWithDelegateKernels splitting the nodes into
//! runs, each kernel's init / prepare / invoke / free), with a custom operator vnpu lacks
//! in the middle run on the "CPU" here.

use std::ffi::{c_char, c_int, c_void, CString};
use std::ptr;

use vnpu_delegate::ffi::{
    self, OwnedIntArray, TfLiteContext, TfLiteDelegate, TfLiteDelegateParams, TfLiteIntArray,
    TfLiteNode, TfLiteQuantization, TfLiteQuantizationParams, TfLiteRegistration, TfLiteTensor,
};
use vnpu_delegate::{tflite_plugin_create_delegate, tflite_plugin_destroy_delegate, Delegate};

/// The synthetic runtime; the context is its first field, so callbacks find the rest.
#[repr(C)]
struct Runtime {
    ctx: TfLiteContext,
    tensors: Vec<TfLiteTensor>,
    /// Tensor data (f32) and shapes, kept alive for the tensors' pointers.
    data: Vec<Vec<f32>>,
    dims: Vec<OwnedIntArray>,
    nodes: Vec<TfLiteNode>,
    node_io: Vec<(OwnedIntArray, OwnedIntArray)>,
    regs: Vec<TfLiteRegistration>,
    /// ADD's TfLiteAddParams (activation RELU).
    add_params: [i32; 2],
    plan: OwnedIntArray,
    /// What ReplaceNodeSubsetsWithDelegateKernels was given: the registration and, per
    /// run of consecutive nodes, the kernel data its init returned with the run's params.
    kernel: Option<TfLiteRegistration>,
    kernels: Vec<(Vec<i32>, *mut c_void)>,
    errors: Vec<String>,
}

unsafe extern "C" fn get_plan(ctx: *mut TfLiteContext, plan: *mut *mut TfLiteIntArray) -> c_int {
    // SAFETY: ctx is the Runtime's first field.
    unsafe {
        let rt = &*ctx.cast::<Runtime>();
        *plan = rt.plan.as_ptr().cast_mut();
    }
    ffi::OK
}

unsafe extern "C" fn get_node(
    ctx: *mut TfLiteContext,
    index: c_int,
    node: *mut *mut TfLiteNode,
    reg: *mut *mut TfLiteRegistration,
) -> c_int {
    // SAFETY: ctx is the Runtime's first field; the index is checked.
    unsafe {
        let rt = &mut *ctx.cast::<Runtime>();
        let Some(k) = usize::try_from(index).ok().filter(|&k| k < rt.nodes.len()) else {
            return ffi::ERROR;
        };
        *node = &mut rt.nodes[k];
        *reg = &mut rt.regs[k];
    }
    ffi::OK
}

/// `ReportError` is printf-style; stable Rust cannot define a variadic function, so this
/// takes the one argument the delegate passes ("%s", message) as a fixed third parameter,
/// where the 64-bit Linux calling conventions put it for a variadic call too.
unsafe extern "C" fn report_error(ctx: *mut TfLiteContext, _fmt: *const c_char, s: *const c_char) {
    // SAFETY: the delegate reports with "%s" and one valid C string.
    unsafe {
        let rt = &mut *ctx.cast::<Runtime>();
        rt.errors
            .push(std::ffi::CStr::from_ptr(s).to_string_lossy().into_owned());
    }
}

type FixedReport = unsafe extern "C" fn(*mut TfLiteContext, *const c_char, *const c_char);

unsafe extern "C" fn replace(
    ctx: *mut TfLiteContext,
    reg: TfLiteRegistration,
    nodes: *const TfLiteIntArray,
    delegate: *mut TfLiteDelegate,
) -> c_int {
    // SAFETY: ctx is the Runtime's first field; `nodes` is the delegate's valid array.
    unsafe {
        let rt = &mut *ctx.cast::<Runtime>();
        rt.kernel = Some(reg);
        // Runs of consecutive nodes, as TFLite makes one kernel per independent subset.
        let mut runs: Vec<Vec<i32>> = Vec::new();
        for n in ffi::ints(nodes) {
            match runs.last_mut() {
                Some(r) if *r.last().unwrap() + 1 == n => r.push(n),
                _ => runs.push(vec![n]),
            }
        }
        for run in runs {
            // The run's inputs: what it reads and does not write; outputs: what it writes
            // that a later node or the graph's output (tensor 5) reads.
            let io = |k: i32| {
                (
                    ffi::ints(rt.node_io[k as usize].0.as_ptr()),
                    ffi::ints(rt.node_io[k as usize].1.as_ptr()),
                )
            };
            let writes: Vec<i32> = run.iter().flat_map(|&k| io(k).1).collect();
            let ins: Vec<i32> = run
                .iter()
                .flat_map(|&k| io(k).0)
                .filter(|t| !writes.contains(t))
                .collect();
            let later: Vec<i32> = (0..rt.nodes.len() as i32)
                .filter(|k| !run.contains(k))
                .flat_map(|k| io(k).0)
                .collect();
            let outs: Vec<i32> = writes
                .iter()
                .copied()
                .filter(|t| later.contains(t) || *t == 5)
                .collect();
            let (n, i, o) = (
                OwnedIntArray::new(&run),
                OwnedIntArray::new(&ins),
                OwnedIntArray::new(&outs),
            );
            let params = TfLiteDelegateParams {
                delegate,
                nodes_to_replace: n.as_ptr().cast_mut(),
                input_tensors: i.as_ptr().cast_mut(),
                output_tensors: o.as_ptr().cast_mut(),
            };
            let data = (reg.init.unwrap())(ctx, (&params as *const TfLiteDelegateParams).cast(), 0);
            rt.kernels.push((run, data));
        }
    }
    ffi::OK
}

fn tensor(data: &mut Vec<f32>, dims: &OwnedIntArray, constant: bool) -> TfLiteTensor {
    TfLiteTensor {
        kind: 1, // float32
        data: data.as_mut_ptr().cast(),
        dims: dims.as_ptr().cast_mut(),
        params: TfLiteQuantizationParams {
            scale: 0.0,
            zero_point: 0,
        },
        allocation_type: if constant { ffi::MMAP_RO } else { 2 },
        bytes: data.len() * 4,
        allocation: ptr::null(),
        name: ptr::null(),
        delegate: ptr::null_mut(),
        buffer_handle: -1,
        data_is_stale: false,
        is_variable: false,
        quantization: TfLiteQuantization {
            kind: 0,
            params: ptr::null_mut(),
        },
        sparsity: ptr::null_mut(),
        dims_signature: ptr::null(),
    }
}

fn registration(code: i32, custom: *const c_char) -> TfLiteRegistration {
    TfLiteRegistration {
        init: None,
        free: None,
        prepare: None,
        invoke: None,
        profiling_string: ptr::null(),
        builtin_code: code,
        custom_name: custom,
        version: 1,
        registration_external: ptr::null_mut(),
        async_kernel: ptr::null(),
        inplace_operator: 0,
    }
}

/// `relu(x + c) -> y` (ADD with a fused RELU), `Foo(y) -> w` (custom: the CPU), `relu(w) -> z`.
/// Tensors: 0 x, 1 c, 2 y, 3 w, 4 unused, 5 z.
fn runtime(custom_name: &CString) -> Box<Runtime> {
    let mut rt = Box::new(Runtime {
        ctx: TfLiteContext {
            tensors_size: 6,
            get_execution_plan: Some(get_plan),
            tensors: ptr::null_mut(),
            impl_: ptr::null_mut(),
            resize_tensor: ptr::null(),
            // SAFETY: see `report_error`: same registers for the delegate's one argument.
            report_error: Some(unsafe {
                std::mem::transmute::<FixedReport, ffi::ReportErrorFn>(report_error)
            }),
            add_tensors: ptr::null(),
            get_node_and_registration: Some(get_node),
            replace_node_subsets_with_delegate_kernels: Some(replace),
        },
        tensors: Vec::new(),
        data: vec![
            vec![0.0; 4],
            vec![1.0, -2.0, 3.0, -4.0],
            vec![0.0; 4],
            vec![0.0; 4],
            vec![0.0; 4],
            vec![0.0; 4],
        ],
        dims: (0..6).map(|_| OwnedIntArray::new(&[1, 4])).collect(),
        nodes: Vec::new(),
        node_io: vec![
            (OwnedIntArray::new(&[0, 1]), OwnedIntArray::new(&[2])),
            (OwnedIntArray::new(&[2]), OwnedIntArray::new(&[3])),
            (OwnedIntArray::new(&[3]), OwnedIntArray::new(&[5])),
        ],
        regs: vec![
            registration(0, ptr::null()),
            registration(32, custom_name.as_ptr()),
            registration(19, ptr::null()),
        ],
        add_params: [1, 0],
        plan: OwnedIntArray::new(&[0, 1, 2]),
        kernel: None,
        kernels: Vec::new(),
        errors: Vec::new(),
    });
    let rt_ref = &mut *rt;
    for k in 0..6 {
        let t = tensor(&mut rt_ref.data[k], &rt_ref.dims[k], k == 1);
        rt_ref.tensors.push(t);
    }
    rt_ref.ctx.tensors = rt_ref.tensors.as_mut_ptr();
    for (k, (i, o)) in rt_ref.node_io.iter().enumerate() {
        rt_ref.nodes.push(TfLiteNode {
            inputs: i.as_ptr().cast_mut(),
            outputs: o.as_ptr().cast_mut(),
            intermediates: ptr::null_mut(),
            temporaries: ptr::null_mut(),
            user_data: ptr::null_mut(),
            builtin_data: if k == 0 {
                rt_ref.add_params.as_mut_ptr().cast()
            } else {
                ptr::null_mut()
            },
            custom_initial_data: ptr::null(),
            custom_initial_data_size: 0,
            delegate: ptr::null_mut(),
            might_have_side_effect: false,
        });
    }
    rt
}

#[test]
fn a_synthetic_runtime_runs_vnpu_partitions_around_a_cpu_operator() {
    let custom_name = CString::new("Foo").unwrap();
    let mut rt = runtime(&custom_name);
    let key = CString::new("log").unwrap();
    let value = CString::new("").unwrap();
    let (keys, values) = ([key.as_ptr()], [value.as_ptr()]);
    // SAFETY: one valid key/value pair.
    let d = unsafe { tflite_plugin_create_delegate(keys.as_ptr(), values.as_ptr(), 1, None) };
    assert!(!d.is_null());
    let ctx: *mut TfLiteContext = &mut rt.ctx;
    // SAFETY: the delegate's Prepare with a valid context.
    let status = unsafe { ((*d).prepare.unwrap())(ctx, d) };
    assert_eq!(status, ffi::OK, "{:?}", rt.errors);
    // ADD and the last RELU are vnpu's, in two kernels; Foo stays here.
    let runs: Vec<Vec<i32>> = rt.kernels.iter().map(|k| k.0.clone()).collect();
    assert_eq!(runs, [vec![0], vec![2]]);
    // SAFETY: `d` is a Delegate this library made.
    let report = unsafe { (*d.cast::<Delegate>()).report() };
    assert!(report.contains("custom Foo"), "{report}");
    assert!(
        report.contains("2 on vnpu in 2 partitions, 1 on CPU"),
        "{report}"
    );
    let reg = rt.kernel.unwrap();
    assert_eq!(reg.builtin_code, ffi::BUILTIN_DELEGATE);
    // Bind each kernel's data to its node (as TFLite does with the replacement node).
    let mut kernel_nodes: Vec<TfLiteNode> = rt
        .kernels
        .iter()
        .map(|(_, data)| TfLiteNode {
            inputs: ptr::null_mut(),
            outputs: ptr::null_mut(),
            intermediates: ptr::null_mut(),
            temporaries: ptr::null_mut(),
            user_data: *data,
            builtin_data: ptr::null_mut(),
            custom_initial_data: ptr::null(),
            custom_initial_data_size: 0,
            delegate: d,
            might_have_side_effect: false,
        })
        .collect();
    for n in &mut kernel_nodes {
        // SAFETY: the kernel's prepare with its node.
        let status = unsafe { (reg.prepare.unwrap())(ctx, n) };
        assert_eq!(status, ffi::OK, "{:?}", rt.errors);
    }
    rt.data[0].copy_from_slice(&[0.5, 0.5, -5.0, 5.0]);
    // SAFETY: the kernels' invoke, the CPU's Foo (an identity) between them.
    unsafe {
        assert_eq!((reg.invoke.unwrap())(ctx, &mut kernel_nodes[0]), ffi::OK);
        assert_eq!(rt.data[2], [1.5, 0.0, 0.0, 1.0]);
        let y = rt.data[2].clone();
        rt.data[3].copy_from_slice(&y.iter().map(|v| v - 1.0).collect::<Vec<_>>());
        assert_eq!((reg.invoke.unwrap())(ctx, &mut kernel_nodes[1]), ffi::OK);
    }
    assert_eq!(rt.data[5], [0.5, 0.0, 0.0, 0.0]);
    for n in &kernel_nodes {
        // SAFETY: each kernel's data freed once.
        unsafe { (reg.free.unwrap())(ctx, n.user_data) };
    }
    // SAFETY: destroyed once.
    unsafe { tflite_plugin_destroy_delegate(d) };
}

#[test]
fn bad_options_are_reported_and_give_no_delegate() {
    let key = CString::new("colour").unwrap();
    let value = CString::new("blue").unwrap();
    let (keys, values) = ([key.as_ptr()], [value.as_ptr()]);
    static REPORTED: std::sync::Mutex<String> = std::sync::Mutex::new(String::new());
    unsafe extern "C" fn note(s: *const c_char) {
        // SAFETY: the delegate reports a valid C string.
        let s = unsafe { std::ffi::CStr::from_ptr(s) };
        *REPORTED.lock().unwrap() = s.to_string_lossy().into_owned();
    }
    // SAFETY: one valid pair.
    let d = unsafe { tflite_plugin_create_delegate(keys.as_ptr(), values.as_ptr(), 1, Some(note)) };
    assert!(d.is_null());
    assert!(REPORTED
        .lock()
        .unwrap()
        .contains("unknown option \"colour\""));
    let socket_key = CString::new("socket").unwrap();
    let socket = CString::new("/nonexistent/vnpu.sock").unwrap();
    let (keys, values) = ([socket_key.as_ptr()], [socket.as_ptr()]);
    // SAFETY: one valid pair.
    let d = unsafe { tflite_plugin_create_delegate(keys.as_ptr(), values.as_ptr(), 1, Some(note)) };
    assert!(d.is_null());
    assert!(REPORTED
        .lock()
        .unwrap()
        .contains("cannot reach the vnpu service"));
}
