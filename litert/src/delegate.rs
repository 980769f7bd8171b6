//! The external delegate: `tflite_plugin_create_delegate` / `tflite_plugin_destroy_delegate`
//! (the interface `ai_edge_litert.interpreter.load_delegate` dlopens). Its `Prepare` reads
//! the runtime's graph ([`crate::graph`]), asks the driver's partitioner which operators
//! vnpu takes, and hands those to the runtime as delegate kernels; each kernel prepares its
//! partition on the device ([`crate::kernel`]). Everything else stays on the CPU, and the
//! `log` option prints why.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use vnpu_driver::device::{IDevice, VnpuDevice};
use vnpu_driver::service::client::{self, RemoteDevice};
use vnpu_driver::tflite::partition::plan_graph;
use vnpu_driver::tflite::{import_ops_with_outputs, Graph};

use crate::ffi::{
    self, OwnedIntArray, TfLiteContext, TfLiteDelegate, TfLiteDelegateParams, TfLiteNode,
    TfLiteRegistration,
};
use crate::graph::{snapshot, Snapshot};
use crate::kernel::Kernel;
use crate::trace::Trace;

/// Where the partition report goes.
#[derive(Clone, Debug, PartialEq)]
pub enum Log {
    /// Standard error.
    Stderr,
    /// This file (overwritten at each `Prepare`).
    File(PathBuf),
}

/// The delegate's options (`load_delegate(path, {...})`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Options {
    /// A `vnpu serve` socket (else `VNPU_SOCKET`, else a device in this process).
    pub socket: Option<PathBuf>,
    /// Where to print the partition report.
    pub log: Option<Log>,
    /// A compilation cache directory: each partition loads from it when it holds that
    /// partition's model, else prepares and saves there.
    pub cache_dir: Option<PathBuf>,
    /// A Perfetto (Chrome trace-event) JSON file recording each partition invoke.
    pub trace: Option<PathBuf>,
}

impl Options {
    /// Parses `key = value` pairs; an unknown key or a bad value is an error naming it.
    pub fn parse<'a>(
        pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Options, String> {
        let mut o = Options::default();
        for (k, v) in pairs {
            match k {
                "socket" if !v.is_empty() => o.socket = Some(PathBuf::from(v)),
                "log" => {
                    o.log = match v {
                        "" | "0" | "false" => None,
                        "1" | "true" | "stderr" | "-" => Some(Log::Stderr),
                        path => Some(Log::File(PathBuf::from(path))),
                    }
                }
                "cache_dir" => o.cache_dir = (!v.is_empty()).then(|| PathBuf::from(v)),
                "trace" => o.trace = (!v.is_empty()).then(|| PathBuf::from(v)),
                _ => {
                    return Err(format!(
                        "unknown option {k:?}={v:?} (known: socket, log, cache_dir, trace)"
                    ))
                }
            }
        }
        if o.socket.is_none() {
            o.socket = std::env::var_os("VNPU_SOCKET")
                .filter(|s| !s.is_empty())
                .map(PathBuf::from);
        }
        Ok(o)
    }

    /// The device these options name.
    pub fn open(&self) -> Result<Arc<dyn IDevice>, String> {
        match &self.socket {
            Some(path) => RemoteDevice::connect(path, client::DEFAULT_TIMEOUT)
                .map(|d| Arc::new(d) as Arc<dyn IDevice>)
                .map_err(|e| format!("cannot reach the vnpu service at {}: {e}", path.display())),
            None => VnpuDevice::new()
                .map(|d| d as Arc<dyn IDevice>)
                .map_err(|e| format!("cannot start the vnpu device: {e}")),
        }
    }
}

/// The delegate: the runtime's struct first, so a pointer to one is a pointer to the other.
#[repr(C)]
pub struct Delegate {
    raw: TfLiteDelegate,
    device: Arc<dyn IDevice>,
    options: Options,
    /// The graph as read at the last `Prepare`, for the kernels' `init`.
    graph: Mutex<Option<Arc<Snapshot>>>,
    /// The last partition report.
    report: Mutex<String>,
    /// The `trace` option's recording.
    trace: Option<Trace>,
    /// Kernels made so far (each kernel's number in the trace).
    kernels: AtomicUsize,
}

impl Drop for Delegate {
    fn drop(&mut self) {
        write_trace(self);
    }
}

/// Writes the trace file, when tracing (errors go to the log: nobody is left to ask).
fn write_trace(d: &Delegate) {
    if let Some(t) = &d.trace {
        if let Err(e) = t.write() {
            tracing::warn!("vnpu delegate: trace {}: {e}", t.path().display());
            eprintln!("vnpu: trace {}: {e}", t.path().display());
        }
    }
}

impl Delegate {
    /// A delegate over `device`.
    pub fn new(device: Arc<dyn IDevice>, options: Options) -> Box<Delegate> {
        let mut d = Box::new(Delegate {
            raw: TfLiteDelegate {
                data: std::ptr::null_mut(),
                prepare: Some(prepare_delegate),
                copy_from_buffer_handle: std::ptr::null(),
                copy_to_buffer_handle: std::ptr::null(),
                free_buffer_handle: std::ptr::null(),
                flags: 0,
                opaque_delegate_builder: std::ptr::null_mut(),
            },
            device,
            trace: options.trace.clone().map(Trace::new),
            options,
            graph: Mutex::new(None),
            report: Mutex::new(String::new()),
            kernels: AtomicUsize::new(0),
        });
        d.raw.data = (&mut *d as *mut Delegate).cast();
        d
    }

    /// The runtime's view of it.
    pub fn as_raw(&mut self) -> *mut TfLiteDelegate {
        &mut self.raw
    }

    /// The partition report of the last `Prepare`.
    pub fn report(&self) -> String {
        self.report.lock().map(|r| r.clone()).unwrap_or_default()
    }
}

/// Reports `msg` through the context's `ReportError`.
///
/// # Safety
/// `ctx` is null or the runtime's valid context.
unsafe fn report(ctx: *mut TfLiteContext, msg: &str) {
    tracing::warn!("vnpu delegate: {msg}");
    if ctx.is_null() {
        return;
    }
    let text = CString::new(format!("vnpu: {msg}").replace('\0', " ")).unwrap_or_default();
    // SAFETY: a valid context; "%s" with one C string argument.
    unsafe {
        if let Some(f) = (*ctx).report_error {
            f(ctx, c"%s".as_ptr(), text.as_ptr());
        }
    }
}

/// Runs `f`, turning a panic into `ERROR` (a panic must not unwind into C).
fn guarded(f: impl FnOnce() -> c_int) -> c_int {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(ffi::ERROR)
}

/// `TfLiteDelegate::Prepare`: partitions the graph and hands vnpu's operators over.
unsafe extern "C" fn prepare_delegate(ctx: *mut TfLiteContext, raw: *mut TfLiteDelegate) -> c_int {
    guarded(|| {
        // SAFETY: `raw` is the delegate this library made (its data points back to it);
        // `ctx` is the runtime's context during Prepare.
        unsafe {
            let d = &*(*raw).data.cast::<Delegate>();
            match take_nodes(d, ctx, raw) {
                Ok(()) => ffi::OK,
                Err(e) => {
                    report(ctx, &e);
                    ffi::ERROR
                }
            }
        }
    })
}

/// # Safety
/// As [`prepare_delegate`].
unsafe fn take_nodes(
    d: &Delegate,
    ctx: *mut TfLiteContext,
    raw: *mut TfLiteDelegate,
) -> Result<(), String> {
    // SAFETY: the caller's promise.
    let snap = unsafe { snapshot(ctx) }.map_err(|e| e.to_string())?;
    let g = Graph::read(&snap.bytes).map_err(|e| format!("the graph: {e}"))?;
    let plan = plan_graph(&g, d.device.as_ref()).map_err(|e| format!("partitioning: {e}"))?;
    let text = format!("vnpu delegate partition report\n{plan}");
    match &d.options.log {
        Some(Log::Stderr) => eprint!("{text}"),
        Some(Log::File(p)) => {
            std::fs::write(p, &text).map_err(|e| format!("log {}: {e}", p.display()))?
        }
        None => {}
    }
    if let Ok(mut r) = d.report.lock() {
        *r = text;
    }
    let nodes: Vec<i32> = plan
        .partitions
        .iter()
        .flat_map(|p| p.ops.iter().map(|&k| snap.nodes[k]))
        .collect();
    if let Ok(mut g) = d.graph.lock() {
        *g = Some(Arc::new(snap));
    }
    if nodes.is_empty() {
        return Ok(());
    }
    let registration = TfLiteRegistration {
        init: Some(kernel_init),
        free: Some(kernel_free),
        prepare: Some(kernel_prepare),
        invoke: Some(kernel_invoke),
        profiling_string: std::ptr::null(),
        builtin_code: ffi::BUILTIN_DELEGATE,
        custom_name: c"vnpu".as_ptr(),
        version: 1,
        registration_external: std::ptr::null_mut(),
        async_kernel: std::ptr::null(),
        inplace_operator: 0,
    };
    let list = OwnedIntArray::new(&nodes);
    // SAFETY: the runtime's context; `list` outlives the call.
    let status = unsafe {
        let replace = (*ctx)
            .replace_node_subsets_with_delegate_kernels
            .ok_or("no ReplaceNodeSubsetsWithDelegateKernels")?;
        replace(ctx, registration, list.as_ptr(), raw)
    };
    match status {
        ffi::OK => Ok(()),
        s => Err(format!(
            "ReplaceNodeSubsetsWithDelegateKernels returned {s}"
        )),
    }
}

/// What a delegate kernel holds: its prepared partition, or why it has none.
struct KernelState {
    kernel: Result<Kernel, String>,
    /// Its number, in the order kernels are made.
    id: usize,
    /// The delegate, which outlives its kernels.
    delegate: *const Delegate,
}

/// Makes one partition's kernel from the runtime's `TfLiteDelegateParams`.
///
/// # Safety
/// `buffer` points to the runtime's `TfLiteDelegateParams` for this delegate.
unsafe fn make_kernel(buffer: *const c_char) -> (Result<Kernel, String>, *const Delegate) {
    // SAFETY: the caller's promise.
    let d = unsafe {
        let params = &*buffer.cast::<TfLiteDelegateParams>();
        (*params.delegate).data.cast::<Delegate>().cast_const()
    };
    // SAFETY: as above.
    (unsafe { prepare_kernel(buffer) }, d)
}

/// Prepares the partition of `buffer`'s `TfLiteDelegateParams`.
///
/// # Safety
/// As [`make_kernel`].
unsafe fn prepare_kernel(buffer: *const c_char) -> Result<Kernel, String> {
    // SAFETY: the caller's promise; the delegate outlives its kernels.
    let (d, nodes, outputs) = unsafe {
        let params = &*buffer.cast::<TfLiteDelegateParams>();
        let d = &*(*params.delegate).data.cast::<Delegate>();
        (
            d,
            ffi::ints(params.nodes_to_replace),
            ffi::ints(params.output_tensors),
        )
    };
    let snap = d
        .graph
        .lock()
        .ok()
        .and_then(|g| g.clone())
        .ok_or("no graph read before the kernel")?;
    let mut ops = nodes
        .iter()
        .map(|n| {
            snap.nodes
                .iter()
                .position(|m| m == n)
                .ok_or(format!("node {n} unknown"))
        })
        .collect::<Result<Vec<usize>, String>>()?;
    ops.sort_unstable();
    let outputs: Vec<usize> = outputs
        .iter()
        .filter_map(|&t| usize::try_from(t).ok())
        .collect();
    let g = Graph::read(&snap.bytes).map_err(|e| e.to_string())?;
    let imported = import_ops_with_outputs(&g, &ops, &outputs).map_err(|e| e.to_string())?;
    Kernel::prepare(d.device.as_ref(), &imported, d.options.cache_dir.as_deref())
        .map_err(|e| e.to_string())
}

unsafe extern "C" fn kernel_init(
    _ctx: *mut TfLiteContext,
    buffer: *const c_char,
    _len: usize,
) -> *mut c_void {
    std::panic::catch_unwind(|| {
        // SAFETY: the runtime passes this delegate's parameters to its kernels' init.
        let (kernel, delegate) = unsafe { make_kernel(buffer) };
        // SAFETY: the delegate outlives its kernels.
        let id = unsafe { (*delegate).kernels.fetch_add(1, Ordering::Relaxed) };
        Box::into_raw(Box::new(KernelState {
            kernel,
            id,
            delegate,
        }))
        .cast::<c_void>()
    })
    .unwrap_or(std::ptr::null_mut())
}

unsafe extern "C" fn kernel_free(_ctx: *mut TfLiteContext, data: *mut c_void) {
    if !data.is_null() {
        // SAFETY: `data` is what kernel_init boxed, freed once by the runtime.
        let state = unsafe { Box::from_raw(data.cast::<KernelState>()) };
        // The interpreter is going: its invokes so far are the trace (the delegate itself
        // may never be destroyed before the process exits).
        // SAFETY: the delegate outlives its kernels.
        write_trace(unsafe { &*state.delegate });
    }
}

/// The kernel of `node` with its state, or why there is none.
///
/// # Safety
/// `node` is the runtime's node of one of this delegate's kernels.
unsafe fn kernel_of<'a>(node: *mut TfLiteNode) -> Result<(&'a Kernel, &'a KernelState), String> {
    // SAFETY: user_data is what kernel_init returned (or null when it panicked).
    let state = unsafe { (*node).user_data.cast::<KernelState>().as_ref() };
    match state {
        None => Err("the partition's kernel was not made".into()),
        Some(s @ KernelState { kernel: Ok(k), .. }) => Ok((k, s)),
        Some(KernelState { kernel: Err(e), .. }) => {
            Err(format!("the partition could not be prepared: {e}"))
        }
    }
}

/// The runtime's tensor `t`.
///
/// # Safety
/// `ctx` is the runtime's valid context.
unsafe fn tensor<'a>(ctx: *mut TfLiteContext, t: usize) -> Option<&'a ffi::TfLiteTensor> {
    // SAFETY: the caller's promise; the index is checked against tensors_size.
    unsafe { (t < (*ctx).tensors_size).then(|| &*(*ctx).tensors.add(t)) }
}

unsafe extern "C" fn kernel_prepare(ctx: *mut TfLiteContext, node: *mut TfLiteNode) -> c_int {
    guarded(|| {
        // SAFETY: the runtime's context and node of this delegate's kernel.
        unsafe {
            let k = match kernel_of(node) {
                Ok((k, _)) => k,
                Err(e) => {
                    report(ctx, &e);
                    return ffi::ERROR;
                }
            };
            for (t, n) in k.input_sizes().chain(k.output_sizes()) {
                let got = tensor(ctx, t).map_or(0, |x| x.bytes);
                if got != n {
                    report(
                        ctx,
                        &format!("tensor {t} holds {got} bytes, the partition's model {n}"),
                    );
                    return ffi::ERROR;
                }
            }
            ffi::OK
        }
    })
}

unsafe extern "C" fn kernel_invoke(ctx: *mut TfLiteContext, node: *mut TfLiteNode) -> c_int {
    guarded(|| {
        // SAFETY: during invoke the runtime lets the kernel read its inputs' data and write
        // its outputs' (sizes checked against `bytes` in prepare and here).
        unsafe {
            let (k, state) = match kernel_of(node) {
                Ok(k) => k,
                Err(e) => {
                    report(ctx, &e);
                    return ffi::ERROR;
                }
            };
            // The delegate outlives its kernels.
            let trace = (*state.delegate).trace.as_ref();
            let begun = Instant::now();
            let read = |t: usize| -> &[u8] {
                match tensor(ctx, t) {
                    Some(x) if !x.data.is_null() => {
                        std::slice::from_raw_parts(x.data.cast::<u8>(), x.bytes)
                    }
                    _ => &[],
                }
            };
            let write = |t: usize, bytes: &[u8]| match tensor(ctx, t) {
                Some(x) if !x.data.is_null() && x.bytes == bytes.len() => {
                    std::ptr::copy_nonoverlapping(bytes.as_ptr(), x.data.cast::<u8>(), bytes.len());
                    Ok(())
                }
                _ => Err(crate::kernel::KernelError::Size {
                    tensor: t,
                    got: tensor(ctx, t).map_or(0, |x| x.bytes),
                    want: bytes.len(),
                }),
            };
            match k.invoke(read, write, trace.is_some()) {
                Ok(timing) => {
                    if let Some(t) = trace {
                        t.record(
                            state.id,
                            begun,
                            timing.time_on_device,
                            timing.time_in_driver,
                        );
                    }
                    ffi::OK
                }
                Err(e) => {
                    report(ctx, &e.to_string());
                    ffi::ERROR
                }
            }
        }
    })
}

/// `tflite_plugin_create_delegate`: the delegate for these options, or null after
/// `report_error` says why.
///
/// # Safety
/// `keys` and `values` hold `n` valid C strings each (or `n` is 0).
#[no_mangle]
pub unsafe extern "C" fn tflite_plugin_create_delegate(
    keys: *const *const c_char,
    values: *const *const c_char,
    n: usize,
    report_error: Option<unsafe extern "C" fn(*const c_char)>,
) -> *mut TfLiteDelegate {
    let made = std::panic::catch_unwind(|| {
        let mut pairs = Vec::with_capacity(n);
        for i in 0..n {
            // SAFETY: the caller's promise.
            let (k, v) = unsafe { (CStr::from_ptr(*keys.add(i)), CStr::from_ptr(*values.add(i))) };
            pairs.push((
                k.to_string_lossy().into_owned(),
                v.to_string_lossy().into_owned(),
            ));
        }
        let options = Options::parse(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())))?;
        let device = options.open()?;
        Ok::<_, String>(Box::into_raw(Delegate::new(device, options)))
    })
    .unwrap_or_else(|_| Err("the vnpu delegate panicked while starting".into()));
    match made {
        Ok(d) => d.cast::<TfLiteDelegate>(),
        Err(e) => {
            if let (Some(f), Ok(text)) = (report_error, CString::new(format!("vnpu: {e}"))) {
                // SAFETY: the runtime's callback, with a valid C string.
                unsafe { f(text.as_ptr()) };
            }
            std::ptr::null_mut()
        }
    }
}

/// `tflite_plugin_destroy_delegate`.
///
/// # Safety
/// `d` is null or a delegate `tflite_plugin_create_delegate` made, destroyed once.
#[no_mangle]
pub unsafe extern "C" fn tflite_plugin_destroy_delegate(d: *mut TfLiteDelegate) {
    if !d.is_null() {
        // SAFETY: the caller's promise; the runtime struct is the Delegate's first field.
        drop(unsafe { Box::from_raw(d.cast::<Delegate>()) });
    }
}
