//! The compiler plugin (`libLiteRtCompilerPlugin_Vnpu.so`): Partition reads the subgraph
//! LiteRT hands it ([`walk`]) into the driver's one importer and partitioner and selects
//! each vnpu partition's operators under that partition's index; Compile imports each
//! partition LiteRT outlined and emits it as vnpu byte code ([`crate::bytecode`]).
//!
//! The functions here are the C ABI's bodies; [`crate::export_compiler_plugin`] gives them
//! their exported names in the plugin's own small crate (`litert/plugin`).

pub mod options;
pub mod walk;

use std::ffi::{c_char, c_int, CStr, CString};
use std::sync::{Arc, Mutex};

use vnpu_driver::device::IDevice;
use vnpu_driver::tflite::partition::{plan_graph, Plan};
use vnpu_driver::tflite::{import_ops_with_outputs, Graph};

use crate::bytecode;
use crate::delegate::Options;
use crate::lrt::{
    self, check_header, ApiVersion, CompilerContext, Handle, Status, API_VERSION, COMPILER_CONTEXT,
};

/// The SoC manufacturer LiteRT matches plugins and dispatch libraries by.
pub const MANUFACTURER: &CStr = c"Vnpu";
/// The one SoC model.
pub const SOC_MODEL: &CStr = c"vnpu1";
const SDK_VERSION: &CStr = c"vnpu-litert 0.1.0";

/// A plugin instance.
pub struct Plugin {
    ctx: *const CompilerContext,
    device: Arc<dyn IDevice>,
    /// The last partition report.
    report: Mutex<String>,
}

// SAFETY: the compiler context is the runtime's immutable function table, valid for the
// plugin's life and callable from any thread.
unsafe impl Send for Plugin {}
// SAFETY: as above; the rest is Sync.
unsafe impl Sync for Plugin {}

impl Plugin {
    /// The partition report of the last Partition.
    pub fn report(&self) -> String {
        self.report.lock().map(|r| r.clone()).unwrap_or_default()
    }
}

/// The compiled partitions: one byte code module and one call per partition.
pub struct Compiled {
    modules: Vec<Vec<u8>>,
    names: Vec<CString>,
}

/// Says why a call failed (LiteRT's own log shows only the status).
pub fn complain(msg: &str) {
    eprintln!("vnpu: {msg}");
}

/// Runs `f`, turning an error into its message on stderr and a status, and a panic into
/// `RUNTIME_FAILURE` (a panic must not unwind into C).
pub fn guarded(f: impl FnOnce() -> Result<(), (Status, String)>) -> Status {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(Ok(())) => lrt::OK,
        Ok(Err((s, msg))) => {
            complain(&msg);
            s
        }
        Err(_) => {
            complain("internal error (panic) in the vnpu LiteRT library");
            lrt::RUNTIME_FAILURE
        }
    }
}

fn null() -> (Status, String) {
    (lrt::INVALID_ARGUMENT, "a null argument".into())
}

/// Where the partition report goes: `VNPU_REPORT` = `stderr` (or `1`, `-`) or a file.
fn print_report(text: &str) {
    match std::env::var("VNPU_REPORT").as_deref() {
        Err(_) | Ok("") | Ok("0") => {}
        Ok("1") | Ok("-") | Ok("stderr") => eprint!("{text}"),
        Ok(path) => {
            if let Err(e) = std::fs::write(path, text) {
                complain(&format!("VNPU_REPORT {path}: {e}"));
            }
        }
    }
}

/// `LiteRtGetCompilerPluginVersion`.
///
/// # Safety
/// `v` is null or writable.
pub unsafe extern "C" fn get_version(v: *mut ApiVersion) -> Status {
    // SAFETY: the caller's promise.
    match unsafe { v.as_mut() } {
        Some(v) => {
            *v = API_VERSION;
            lrt::OK
        }
        None => lrt::INVALID_ARGUMENT,
    }
}

/// `LiteRtGetCompilerPluginSocManufacturer`.
pub extern "C" fn soc_manufacturer() -> *const c_char {
    MANUFACTURER.as_ptr()
}

/// `LiteRtCreateCompilerPlugin`.
///
/// # Safety
/// `ctx` is null or the runtime's compiler context, living as long as the plugin; `out`
/// is null or writable.
pub unsafe extern "C" fn create(
    ctx: *const CompilerContext,
    out: *mut *mut Plugin,
    _env: Handle,
    _options: Handle,
) -> Status {
    guarded(|| {
        if ctx.is_null() || out.is_null() {
            return Err(null());
        }
        // SAFETY: the caller's promise; the header is the table's first member.
        let header = unsafe { (*ctx).header };
        check_header("LiteRtCompilerContext", header, COMPILER_CONTEXT)
            .map_err(|e| (lrt::WRONG_VERSION, e))?;
        let device = Options::parse(std::iter::empty())
            .and_then(|o| o.open())
            .map_err(|e| (lrt::RUNTIME_FAILURE, e))?;
        let plugin = Box::new(Plugin {
            ctx,
            device,
            report: Mutex::new(String::new()),
        });
        // SAFETY: checked non-null above.
        unsafe { *out = Box::into_raw(plugin) };
        Ok(())
    })
}

/// `LiteRtDestroyCompilerPlugin`.
///
/// # Safety
/// `p` is null or a plugin `create` made, destroyed once.
pub unsafe extern "C" fn destroy(p: *mut Plugin) {
    if !p.is_null() {
        // SAFETY: the caller's promise.
        drop(unsafe { Box::from_raw(p) });
    }
}

/// `LiteRtGetCompilerPluginSupportedHardware`.
///
/// # Safety
/// `hw` is null or writable.
pub unsafe extern "C" fn supported_hardware(p: *mut Plugin, hw: *mut c_int) -> Status {
    if p.is_null() || hw.is_null() {
        return lrt::INVALID_ARGUMENT;
    }
    // SAFETY: checked non-null; the caller's promise.
    unsafe { *hw = lrt::HW_NPU };
    lrt::OK
}

/// `LiteRtGetNumCompilerPluginSupportedSocModels`.
///
/// # Safety
/// `n` is null or writable.
pub unsafe extern "C" fn num_soc_models(p: *mut Plugin, n: *mut usize) -> Status {
    if p.is_null() || n.is_null() {
        return lrt::INVALID_ARGUMENT;
    }
    // SAFETY: checked non-null.
    unsafe { *n = 1 };
    lrt::OK
}

/// `LiteRtGetCompilerPluginSupportedSocModel`.
///
/// # Safety
/// `name` is null or writable.
pub unsafe extern "C" fn soc_model(p: *mut Plugin, k: usize, name: *mut *const c_char) -> Status {
    if p.is_null() || name.is_null() {
        return lrt::INVALID_ARGUMENT;
    }
    if k != 0 {
        return lrt::UNSUPPORTED;
    }
    // SAFETY: checked non-null.
    unsafe { *name = SOC_MODEL.as_ptr() };
    lrt::OK
}

/// `LiteRtGetCompilerPluginSDKVersion`.
///
/// # Safety
/// `v` is null or writable.
pub unsafe extern "C" fn sdk_version(p: *mut Plugin, v: *mut *const c_char) -> Status {
    if p.is_null() || v.is_null() {
        return lrt::INVALID_ARGUMENT;
    }
    // SAFETY: checked non-null.
    unsafe { *v = SDK_VERSION.as_ptr() };
    lrt::OK
}

/// Whether `soc` names the one SoC model (null: the default).
///
/// # Safety
/// `soc` is null or a C string.
unsafe fn check_soc(soc: *const c_char) -> Result<(), (Status, String)> {
    // SAFETY: the caller's promise.
    match unsafe { soc.as_ref() }.map(|_| unsafe { CStr::from_ptr(soc) }) {
        None => Ok(()),
        Some(s) if s == SOC_MODEL || s.is_empty() => Ok(()),
        Some(s) => Err((
            lrt::UNSUPPORTED,
            format!("SoC model {s:?} is not vnpu's (vnpu1)"),
        )),
    }
}

/// `LiteRtCompilerPluginPartition`: selects vnpu's operators of `subgraph`, each under
/// its partition's index.
///
/// # Safety
/// `p` is a plugin `create` made; `soc` null or a C string; `subgraph` and `selected` the
/// runtime's.
pub unsafe extern "C" fn partition(
    p: *mut Plugin,
    soc: *const c_char,
    subgraph: Handle,
    selected: Handle,
) -> Status {
    guarded(|| {
        // SAFETY: the caller's promise.
        let p = unsafe { p.as_ref() }.ok_or_else(null)?;
        // SAFETY: the caller's promise.
        unsafe { check_soc(soc) }?;
        // SAFETY: the plugin's context is the runtime's, checked at create.
        let ctx = unsafe { &*p.ctx };
        let fail = |e: String| (lrt::RUNTIME_FAILURE, format!("partitioning: {e}"));
        // SAFETY: the runtime's subgraph during Partition.
        let w = unsafe { walk::walk(ctx, subgraph) }.map_err(fail)?;
        let bytes = w.desc.to_bytes();
        let g = Graph::read(&bytes).map_err(|e| fail(e.to_string()))?;
        let plan = match w.desc.ops.iter().any(|o| o.code == DENSIFY) {
            true => Plan::all_on_cpu(&g, SPARSE),
            false => plan_graph(&g, p.device.as_ref()).map_err(|e| fail(e.to_string()))?,
        };
        let text = format!("vnpu compiler plugin partition report\n{plan}");
        print_report(&text);
        if let Ok(mut r) = p.report.lock() {
            *r = text;
        }
        let push = ctx
            .push_op
            .ok_or_else(|| fail("the runtime has no push_op".into()))?;
        for (k, part) in plan.partitions.iter().enumerate() {
            for &op in &part.ops {
                // SAFETY: an operator of this subgraph and the runtime's list.
                let s = unsafe { push(selected, w.ops[op], k) };
                if s != lrt::OK {
                    return Err(fail(format!("push_op returned {s}")));
                }
            }
        }
        Ok(())
    })
}

/// TFLite's DENSIFY, the operator that reads a sparse tensor.
const DENSIFY: i32 = 124;

/// Why a model with sparse tensors is left whole to the CPU: the compiler-plugin API gives
/// no tensor's sparsity parameters, and the model LiteRT rewrites around any partition
/// drops them (its interpreter then refuses the sparse tensors), so taking even one
/// operator would break the model. vnpu's delegate and `vnpu run` take such models.
const SPARSE: &str = "the model has sparse tensors, which LiteRT's compiler-plugin route \
                      cannot carry (a rewritten model loses them): the model stays on the CPU";

/// Compiles one partition subgraph into byte code.
///
/// # Safety
/// `ctx` is the runtime's context and `subgraph` one of its subgraphs.
unsafe fn compile_one(ctx: &CompilerContext, subgraph: Handle) -> Result<Vec<u8>, String> {
    // SAFETY: the caller's promise.
    let w = unsafe { walk::walk(ctx, subgraph) }?;
    let bytes = w.desc.to_bytes();
    let g = Graph::read(&bytes).map_err(|e| e.to_string())?;
    let all: Vec<usize> = (0..g.op_count()).collect();
    let imported = import_ops_with_outputs(&g, &all, &w.outputs).map_err(|e| e.to_string())?;
    let inputs: Vec<Option<u32>> = w
        .inputs
        .iter()
        .map(|t| {
            imported
                .input_tensors
                .iter()
                .position(|x| x == t)
                .map(|k| k as u32)
        })
        .collect();
    let outputs = w
        .outputs
        .iter()
        .map(|t| {
            imported
                .output_tensors
                .iter()
                .position(|x| x == t)
                .map(|k| k as u32)
                .ok_or(format!("output tensor {t} is not one of the model's"))
        })
        .collect::<Result<Vec<u32>, String>>()?;
    bytecode::encode(&imported.model, &inputs, &outputs).map_err(|e| e.to_string())
}

/// `LiteRtCompilerPluginCompile`: one byte code module per partition subgraph.
///
/// # Safety
/// `p` is a plugin `create` made; `soc` null or a C string; `model` the runtime's; `out`
/// null or writable.
pub unsafe extern "C" fn compile(
    p: *mut Plugin,
    soc: *const c_char,
    model: Handle,
    out: *mut *mut Compiled,
) -> Status {
    guarded(|| {
        // SAFETY: the caller's promise.
        let p = unsafe { p.as_ref() }.ok_or_else(null)?;
        if out.is_null() {
            return Err(null());
        }
        // SAFETY: the caller's promise.
        unsafe { check_soc(soc) }?;
        // SAFETY: checked at create.
        let ctx = unsafe { &*p.ctx };
        let fail = |e: String| (lrt::COMPILATION, format!("compiling: {e}"));
        let (count, get) = ctx
            .get_num_model_subgraphs
            .zip(ctx.get_model_subgraph)
            .ok_or_else(|| fail("the runtime has no subgraph getters".into()))?;
        let mut n = 0usize;
        // SAFETY: the runtime's model; out-pointers are locals.
        if unsafe { count(model, &mut n) } != lrt::OK {
            return Err(fail("get_num_model_subgraphs failed".into()));
        }
        let mut c = Compiled {
            modules: Vec::with_capacity(n),
            names: Vec::with_capacity(n),
        };
        for k in 0..n {
            let mut sg: Handle = std::ptr::null_mut();
            // SAFETY: as above.
            if unsafe { get(model, k, &mut sg) } != lrt::OK {
                return Err(fail(format!("get_model_subgraph {k} failed")));
            }
            // SAFETY: the runtime's subgraph.
            let code =
                unsafe { compile_one(ctx, sg) }.map_err(|e| fail(format!("partition {k}: {e}")))?;
            c.modules.push(code);
            c.names
                .push(CString::new(format!("vnpu_partition_{k}")).unwrap_or_default());
        }
        // SAFETY: checked non-null.
        unsafe { *out = Box::into_raw(Box::new(c)) };
        Ok(())
    })
}

/// `LiteRtDestroyCompiledResult`.
///
/// # Safety
/// `c` is null or a result `compile` made, destroyed once.
pub unsafe extern "C" fn destroy_compiled(c: *mut Compiled) {
    if !c.is_null() {
        // SAFETY: the caller's promise.
        drop(unsafe { Box::from_raw(c) });
    }
}

/// `LiteRtGetCompiledResultByteCode`.
///
/// # Safety
/// `c` is null or a live result; the out-pointers null or writable.
pub unsafe extern "C" fn byte_code(
    c: *mut Compiled,
    k: usize,
    code: *mut *const u8,
    size: *mut usize,
) -> Status {
    // SAFETY: the caller's promise.
    let Some(c) = (unsafe { c.as_ref() }) else {
        return lrt::INVALID_ARGUMENT;
    };
    if code.is_null() || size.is_null() {
        return lrt::INVALID_ARGUMENT;
    }
    let Some(m) = c.modules.get(k) else {
        return lrt::INDEX_OOB;
    };
    // SAFETY: checked non-null; the module lives as long as the result.
    unsafe {
        *code = m.as_ptr();
        *size = m.len();
    }
    lrt::OK
}

/// `LiteRtCompiledResultNumByteCodeModules` and `LiteRtGetNumCompiledResultCalls` (one
/// call per module).
///
/// # Safety
/// `c` is null or a live result; `n` null or writable.
pub unsafe extern "C" fn num_modules(c: *mut Compiled, n: *mut usize) -> Status {
    // SAFETY: the caller's promise.
    match (unsafe { c.as_ref() }, n.is_null()) {
        (Some(c), false) => {
            // SAFETY: checked non-null.
            unsafe { *n = c.modules.len() };
            lrt::OK
        }
        _ => lrt::INVALID_ARGUMENT,
    }
}

/// `LiteRtGetCompiledResultCallInfo`: call `k` is partition `k`'s function name in module
/// `k`.
///
/// # Safety
/// `c` is null or a live result; the out-pointers null or writable.
pub unsafe extern "C" fn call_info(
    c: *mut Compiled,
    k: usize,
    info: *mut *const u8,
    size: *mut usize,
    module: *mut usize,
) -> Status {
    // SAFETY: the caller's promise.
    let Some(c) = (unsafe { c.as_ref() }) else {
        return lrt::INVALID_ARGUMENT;
    };
    if info.is_null() || size.is_null() || module.is_null() {
        return lrt::INVALID_ARGUMENT;
    }
    let Some(name) = c.names.get(k) else {
        return lrt::INDEX_OOB;
    };
    // SAFETY: checked non-null; the name lives as long as the result.
    unsafe {
        *info = name.as_ptr().cast();
        *size = name.as_bytes().len();
        *module = k;
    }
    lrt::OK
}

/// `LiteRtCompilerPluginRegisterAllTransformations`: none.
///
/// # Safety
/// The out-pointers are null or writable.
pub unsafe extern "C" fn transformations(
    _p: *mut Plugin,
    list: *mut *mut std::ffi::c_void,
    n: *mut usize,
) -> Status {
    if list.is_null() || n.is_null() {
        return lrt::INVALID_ARGUMENT;
    }
    // SAFETY: checked non-null.
    unsafe {
        *list = std::ptr::null_mut();
        *n = 0;
    }
    lrt::OK
}

/// `LiteRtCompilerPluginCheckCompilerCompatibility`.
///
/// # Safety
/// `soc` is null or a C string.
pub unsafe extern "C" fn check_compatibility(
    v: ApiVersion,
    _p: *mut Plugin,
    _env: Handle,
    _options: Handle,
    soc: *const c_char,
) -> Status {
    guarded(|| {
        if v != API_VERSION {
            return Err((
                lrt::WRONG_VERSION,
                format!(
                    "LiteRT API {}.{}.{}; vnpu's plugin is built for {}.{}.{}",
                    v.major,
                    v.minor,
                    v.patch,
                    API_VERSION.major,
                    API_VERSION.minor,
                    API_VERSION.patch
                ),
            ));
        }
        // SAFETY: the caller's promise.
        unsafe { check_soc(soc) }
    })
}

/// Defines the plugin's 17 exported C functions (16 required, no JIT handle) in the
/// crate that invokes it: the `litert/plugin` cdylib.
#[macro_export]
macro_rules! export_compiler_plugin {
    () => {
        use std::ffi::{c_char, c_int};
        use $crate::lrt::{ApiVersion, CompilerContext, Handle, Status};
        use $crate::plugin::{self as p, Compiled, Plugin};

        /// `LiteRtGetCompilerPluginVersion`.
        ///
        /// # Safety
        /// As [`p::get_version`].
        #[no_mangle]
        pub unsafe extern "C" fn LiteRtGetCompilerPluginVersion(v: *mut ApiVersion) -> Status {
            // SAFETY: forwarded.
            unsafe { p::get_version(v) }
        }
        /// `LiteRtGetCompilerPluginSocManufacturer`.
        #[no_mangle]
        pub extern "C" fn LiteRtGetCompilerPluginSocManufacturer() -> *const c_char {
            p::soc_manufacturer()
        }
        /// `LiteRtCreateCompilerPlugin`.
        ///
        /// # Safety
        /// As [`p::create`].
        #[no_mangle]
        pub unsafe extern "C" fn LiteRtCreateCompilerPlugin(
            ctx: *const CompilerContext,
            out: *mut *mut Plugin,
            env: Handle,
            options: Handle,
        ) -> Status {
            // SAFETY: forwarded.
            unsafe { p::create(ctx, out, env, options) }
        }
        /// `LiteRtDestroyCompilerPlugin`.
        ///
        /// # Safety
        /// As [`p::destroy`].
        #[no_mangle]
        pub unsafe extern "C" fn LiteRtDestroyCompilerPlugin(x: *mut Plugin) {
            // SAFETY: forwarded.
            unsafe { p::destroy(x) }
        }
        /// `LiteRtGetCompilerPluginSupportedHardware`.
        ///
        /// # Safety
        /// As [`p::supported_hardware`].
        #[no_mangle]
        pub unsafe extern "C" fn LiteRtGetCompilerPluginSupportedHardware(
            x: *mut Plugin,
            hw: *mut c_int,
        ) -> Status {
            // SAFETY: forwarded.
            unsafe { p::supported_hardware(x, hw) }
        }
        /// `LiteRtGetNumCompilerPluginSupportedSocModels`.
        ///
        /// # Safety
        /// As [`p::num_soc_models`].
        #[no_mangle]
        pub unsafe extern "C" fn LiteRtGetNumCompilerPluginSupportedSocModels(
            x: *mut Plugin,
            n: *mut usize,
        ) -> Status {
            // SAFETY: forwarded.
            unsafe { p::num_soc_models(x, n) }
        }
        /// `LiteRtGetCompilerPluginSupportedSocModel`.
        ///
        /// # Safety
        /// As [`p::soc_model`].
        #[no_mangle]
        pub unsafe extern "C" fn LiteRtGetCompilerPluginSupportedSocModel(
            x: *mut Plugin,
            k: usize,
            name: *mut *const c_char,
        ) -> Status {
            // SAFETY: forwarded.
            unsafe { p::soc_model(x, k, name) }
        }
        /// `LiteRtGetCompilerPluginSDKVersion`.
        ///
        /// # Safety
        /// As [`p::sdk_version`].
        #[no_mangle]
        pub unsafe extern "C" fn LiteRtGetCompilerPluginSDKVersion(
            x: *mut Plugin,
            v: *mut *const c_char,
        ) -> Status {
            // SAFETY: forwarded.
            unsafe { p::sdk_version(x, v) }
        }
        /// `LiteRtCompilerPluginPartition`.
        ///
        /// # Safety
        /// As [`p::partition`].
        #[no_mangle]
        pub unsafe extern "C" fn LiteRtCompilerPluginPartition(
            x: *mut Plugin,
            soc: *const c_char,
            subgraph: Handle,
            selected: Handle,
        ) -> Status {
            // SAFETY: forwarded.
            unsafe { p::partition(x, soc, subgraph, selected) }
        }
        /// `LiteRtCompilerPluginCompile`.
        ///
        /// # Safety
        /// As [`p::compile`].
        #[no_mangle]
        pub unsafe extern "C" fn LiteRtCompilerPluginCompile(
            x: *mut Plugin,
            soc: *const c_char,
            model: Handle,
            out: *mut *mut Compiled,
        ) -> Status {
            // SAFETY: forwarded.
            unsafe { p::compile(x, soc, model, out) }
        }
        /// `LiteRtDestroyCompiledResult`.
        ///
        /// # Safety
        /// As [`p::destroy_compiled`].
        #[no_mangle]
        pub unsafe extern "C" fn LiteRtDestroyCompiledResult(c: *mut Compiled) {
            // SAFETY: forwarded.
            unsafe { p::destroy_compiled(c) }
        }
        /// `LiteRtGetCompiledResultByteCode`.
        ///
        /// # Safety
        /// As [`p::byte_code`].
        #[no_mangle]
        pub unsafe extern "C" fn LiteRtGetCompiledResultByteCode(
            c: *mut Compiled,
            k: usize,
            code: *mut *const u8,
            size: *mut usize,
        ) -> Status {
            // SAFETY: forwarded.
            unsafe { p::byte_code(c, k, code, size) }
        }
        /// `LiteRtCompiledResultNumByteCodeModules`.
        ///
        /// # Safety
        /// As [`p::num_modules`].
        #[no_mangle]
        pub unsafe extern "C" fn LiteRtCompiledResultNumByteCodeModules(
            c: *mut Compiled,
            n: *mut usize,
        ) -> Status {
            // SAFETY: forwarded.
            unsafe { p::num_modules(c, n) }
        }
        /// `LiteRtGetNumCompiledResultCalls`.
        ///
        /// # Safety
        /// As [`p::num_modules`].
        #[no_mangle]
        pub unsafe extern "C" fn LiteRtGetNumCompiledResultCalls(
            c: *mut Compiled,
            n: *mut usize,
        ) -> Status {
            // SAFETY: forwarded.
            unsafe { p::num_modules(c, n) }
        }
        /// `LiteRtGetCompiledResultCallInfo`.
        ///
        /// # Safety
        /// As [`p::call_info`].
        #[no_mangle]
        pub unsafe extern "C" fn LiteRtGetCompiledResultCallInfo(
            c: *mut Compiled,
            k: usize,
            info: *mut *const u8,
            size: *mut usize,
            module: *mut usize,
        ) -> Status {
            // SAFETY: forwarded.
            unsafe { p::call_info(c, k, info, size, module) }
        }
        /// `LiteRtCompilerPluginRegisterAllTransformations`.
        ///
        /// # Safety
        /// As [`p::transformations`].
        #[no_mangle]
        pub unsafe extern "C" fn LiteRtCompilerPluginRegisterAllTransformations(
            x: *mut Plugin,
            list: *mut *mut std::ffi::c_void,
            n: *mut usize,
        ) -> Status {
            // SAFETY: forwarded.
            unsafe { p::transformations(x, list, n) }
        }
        /// `LiteRtCompilerPluginCheckCompilerCompatibility`.
        ///
        /// # Safety
        /// As [`p::check_compatibility`].
        #[no_mangle]
        pub unsafe extern "C" fn LiteRtCompilerPluginCheckCompilerCompatibility(
            v: ApiVersion,
            x: *mut Plugin,
            env: Handle,
            options: Handle,
            soc: *const c_char,
        ) -> Status {
            // SAFETY: forwarded.
            unsafe { p::check_compatibility(v, x, env, options, soc) }
        }
    };
}
