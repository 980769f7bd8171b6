//! The dispatch library (`libLiteRtDispatch_Vnpu.so`): LiteRT hands it each `DISPATCH_OP`'s
//! byte code; it decodes and validates it ([`crate::bytecode`]), prepares the model on
//! the device (a `vnpu serve` service with `VNPU_SOCKET`, else a device in this process;
//! through the compilation cache in `VNPU_CACHE_DIR` when set), binds LiteRT's host-memory
//! tensor buffers, invokes, and reports the device's timing through the metrics calls.
//!
//! The functions here are the C ABI's bodies behind the one exported symbol
//! `LiteRtDispatchGetApi` ([`crate::export_dispatch`], in `litert/dispatch`).

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use vnpu_driver::device::IDevice;
use vnpu_driver::hal::validate::operand_size;

use crate::bytecode::{self, ByteCode};
use crate::delegate::Options;
use crate::kernel::{Kernel, KernelError};
use crate::lrt::{
    self, check_header, AbiHeader, Any, ApiVersion, Handle, MemBuffer, Metric, RankedTensorType,
    RuntimeContext, Status, API_VERSION, RUNTIME_CONTEXT,
};
use crate::plugin::guarded;

/// The most byte code one dispatch op may carry.
const MAX_BYTECODE: usize = 1 << 32;

/// A device context: the device and the tensor buffers registered with it.
pub struct DeviceContext {
    device: Arc<dyn IDevice>,
    cache_dir: Option<PathBuf>,
    buffers: Mutex<HashMap<u64, usize>>,
    next: AtomicU64,
}

/// An invocation context: one prepared partition and the buffers attached to it.
pub struct InvocationContext {
    rt: *const RuntimeContext,
    dc: *const DeviceContext,
    code: ByteCode,
    kernel: Kernel,
    inputs: Vec<Option<u64>>,
    outputs: Vec<Option<u64>>,
    metrics: Option<Totals>,
}

/// Timing summed while metrics are collected.
#[derive(Clone, Copy, Debug, Default)]
struct Totals {
    invokes: i64,
    device_us: i64,
    driver_us: i64,
}

/// Collected metrics, as `LiteRtDispatchMetrics`.
pub struct Metrics {
    items: Vec<(CString, i64)>,
}

fn err(s: Status, msg: impl Into<String>) -> (Status, String) {
    (s, msg.into())
}

/// Checks the runtime context the runtime passes.
///
/// # Safety
/// `rt` is null or points to at least an ABI header.
unsafe fn runtime(rt: *const RuntimeContext) -> Result<&'static RuntimeContext, (Status, String)> {
    // SAFETY: the caller's promise; the header is the first member.
    let header: AbiHeader = unsafe { rt.as_ref() }
        .ok_or_else(|| err(lrt::INVALID_ARGUMENT, "a null runtime context"))?
        .header;
    check_header("LiteRtRuntimeContext", header, RUNTIME_CONTEXT)
        .map_err(|e| err(lrt::WRONG_VERSION, e))?;
    // SAFETY: checked to be the pinned table, which the runtime keeps for the process.
    Ok(unsafe { &*rt })
}

/// `initialize`.
///
/// # Safety
/// `rt` is null or the runtime's context.
pub unsafe extern "C" fn initialize(rt: *const RuntimeContext, _env: Handle, _o: Handle) -> Status {
    // SAFETY: the caller's promise.
    guarded(|| unsafe { runtime(rt) }.map(|_| ()))
}

/// `get_vendor_id`.
///
/// # Safety
/// `out` is null or writable.
pub unsafe extern "C" fn vendor_id(out: *mut *const c_char) -> Status {
    put(out, crate::plugin::MANUFACTURER.as_ptr())
}

/// `get_build_id`.
///
/// # Safety
/// `out` is null or writable.
pub unsafe extern "C" fn build_id(out: *mut *const c_char) -> Status {
    put(out, c"vnpu-litert 0.1.0".as_ptr())
}

/// `get_capabilities`: the basic (synchronous) API.
///
/// # Safety
/// `out` is null or writable.
pub unsafe extern "C" fn capabilities(out: *mut c_int) -> Status {
    put(out, lrt::CAPABILITIES_BASIC)
}

fn put<T>(out: *mut T, v: T) -> Status {
    if out.is_null() {
        return lrt::INVALID_ARGUMENT;
    }
    // SAFETY: checked non-null; every caller's contract makes it writable.
    unsafe { out.write(v) };
    lrt::OK
}

/// `check_runtime_compatibility`: the runtime's API version must be exactly vnpu's.
pub extern "C" fn check_runtime(v: ApiVersion, _env: Handle, _o: Handle) -> Status {
    guarded(|| match v == API_VERSION {
        true => Ok(()),
        false => Err(err(
            lrt::WRONG_VERSION,
            format!(
                "LiteRT runtime API {}.{}.{}; vnpu's dispatch library is built for 0.1.0",
                v.major, v.minor, v.patch
            ),
        )),
    })
}

/// `device_context_create`: opens the device (`VNPU_SOCKET`, else in this process).
///
/// # Safety
/// `rt` is null or the runtime's context; `out` null or writable.
pub unsafe extern "C" fn device_create(
    rt: *const RuntimeContext,
    _o: Handle,
    out: *mut *mut DeviceContext,
) -> Status {
    guarded(|| {
        // SAFETY: the caller's promise.
        unsafe { runtime(rt) }?;
        if out.is_null() {
            return Err(err(lrt::INVALID_ARGUMENT, "a null out-pointer"));
        }
        let device = Options::parse(std::iter::empty())
            .and_then(|o| o.open())
            .map_err(|e| err(lrt::RUNTIME_FAILURE, e))?;
        let cache_dir = std::env::var_os("VNPU_CACHE_DIR")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from);
        let dc = Box::new(DeviceContext {
            device,
            cache_dir,
            buffers: Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
        });
        // SAFETY: checked non-null.
        unsafe { *out = Box::into_raw(dc) };
        Ok(())
    })
}

/// `device_context_destroy`.
///
/// # Safety
/// `dc` is null or a context `device_create` made, destroyed once after its invocation
/// contexts.
pub unsafe extern "C" fn device_destroy(dc: *mut DeviceContext) -> Status {
    if !dc.is_null() {
        // SAFETY: the caller's promise.
        drop(unsafe { Box::from_raw(dc) });
    }
    lrt::OK
}

/// `register_tensor_buffer`: a handle for a LiteRT tensor buffer.
///
/// # Safety
/// `dc` is null or a live device context; `out` null or writable.
pub unsafe extern "C" fn register(dc: *mut DeviceContext, tb: Handle, out: *mut u64) -> Status {
    guarded(|| {
        // SAFETY: the caller's promise.
        let dc = unsafe { dc.as_ref() }
            .ok_or_else(|| err(lrt::INVALID_ARGUMENT, "no device context"))?;
        if tb.is_null() || out.is_null() {
            return Err(err(lrt::INVALID_ARGUMENT, "a null tensor buffer"));
        }
        let h = dc.next.fetch_add(1, Ordering::Relaxed);
        dc.buffers
            .lock()
            .map_err(|_| err(lrt::RUNTIME_FAILURE, "poisoned"))?
            .insert(h, tb as usize);
        // SAFETY: checked non-null.
        unsafe { *out = h };
        Ok(())
    })
}

/// `unregister_tensor_buffer`.
///
/// # Safety
/// `dc` is null or a live device context.
pub unsafe extern "C" fn unregister(dc: *mut DeviceContext, h: u64) -> Status {
    guarded(|| {
        // SAFETY: the caller's promise.
        let dc = unsafe { dc.as_ref() }
            .ok_or_else(|| err(lrt::INVALID_ARGUMENT, "no device context"))?;
        let gone = dc
            .buffers
            .lock()
            .map_err(|_| err(lrt::RUNTIME_FAILURE, "poisoned"))?
            .remove(&h);
        gone.map(|_| ()).ok_or_else(|| {
            err(
                lrt::INVALID_ARGUMENT,
                format!("unknown tensor buffer handle {h}"),
            )
        })
    })
}

/// The byte code's bytes: in memory, or read from the file the runtime mapped.
///
/// # Safety
/// `m` describes memory or a file region the runtime guarantees for the call.
unsafe fn bytecode_bytes(m: &MemBuffer) -> Result<Vec<u8>, String> {
    if m.size == 0 || m.size > MAX_BYTECODE {
        return Err(format!("byte code of {} bytes", m.size));
    }
    if !m.base_addr.is_null() {
        // SAFETY: the runtime's buffer holds `size` bytes at `offset` from `base_addr`.
        return Ok(unsafe {
            std::slice::from_raw_parts(m.base_addr.cast::<u8>().add(m.offset), m.size).to_vec()
        });
    }
    if m.fd < 0 {
        return Err("byte code with neither an address nor a file".into());
    }
    // SAFETY: the runtime's descriptor, open for the call; borrowed, not closed.
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(m.fd) };
    let at = m
        .alloc_base_file_offset
        .checked_add(m.offset)
        .ok_or("byte code offset overflows")?;
    let mut buf = vec![0u8; m.size];
    let mut done = 0;
    while done < buf.len() {
        let n = nix::sys::uio::pread(fd, &mut buf[done..], (at + done) as i64)
            .map_err(|e| format!("reading the byte code: {e}"))?;
        if n == 0 {
            return Err("the byte code runs past the end of the model file".into());
        }
        done += n;
    }
    Ok(buf)
}

/// `invocation_context_create`: decodes the byte code and prepares its model.
///
/// # Safety
/// `rt` is null or the runtime's context; `dc` null or a live device context; `code` null
/// or the runtime's buffer description; `out` null or writable.
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn invocation_create(
    rt: *const RuntimeContext,
    dc: *mut DeviceContext,
    exec_type: c_int,
    code: *const MemBuffer,
    function: *const c_char,
    n_in: c_int,
    n_out: c_int,
    out: *mut *mut InvocationContext,
) -> Status {
    guarded(|| {
        // SAFETY: the caller's promise.
        unsafe { runtime(rt) }?;
        // SAFETY: the caller's promise.
        let (dcr, m) = unsafe { (dc.as_ref(), code.as_ref()) };
        let (Some(dcr), Some(m)) = (dcr, m) else {
            return Err(err(
                lrt::INVALID_ARGUMENT,
                "a null device context or byte code",
            ));
        };
        if out.is_null() {
            return Err(err(lrt::INVALID_ARGUMENT, "a null out-pointer"));
        }
        let name = match function.is_null() {
            true => String::new(),
            // SAFETY: a C string from the runtime.
            false => unsafe { CStr::from_ptr(function) }
                .to_string_lossy()
                .into_owned(),
        };
        if exec_type != lrt::EXEC_ML_MODEL {
            return Err(err(
                lrt::UNSUPPORTED,
                format!("{name}: executable type {exec_type} (vnpu runs byte code only)"),
            ));
        }
        // SAFETY: the runtime's buffer description.
        let bytes = unsafe { bytecode_bytes(m) }
            .map_err(|e| err(lrt::RUNTIME_FAILURE, format!("{name}: {e}")))?;
        let code = bytecode::decode(&bytes).map_err(|e| {
            let s = match e {
                bytecode::ByteCodeError::Version(_) => lrt::INCOMPATIBLE_BYTECODE,
                _ => lrt::INVALID_ARGUMENT,
            };
            err(s, format!("{name}: {e}"))
        })?;
        if usize::try_from(n_in).ok() != Some(code.inputs.len())
            || usize::try_from(n_out).ok() != Some(code.outputs.len())
        {
            return Err(err(
                lrt::INVALID_ARGUMENT,
                format!(
                    "{name}: the dispatch op has {n_in} inputs and {n_out} outputs, its byte code {} and {}",
                    code.inputs.len(),
                    code.outputs.len()
                ),
            ));
        }
        let ins: Vec<usize> = (0..code.model.main.input_indexes.len()).collect();
        let outs: Vec<usize> = (0..code.model.main.output_indexes.len()).collect();
        let kernel = Kernel::prepare_model(
            dcr.device.as_ref(),
            &code.model,
            code.level,
            &ins,
            &outs,
            dcr.cache_dir.as_deref(),
        )
        .map_err(|e| err(lrt::RUNTIME_FAILURE, format!("{name}: {e}")))?;
        let ic = Box::new(InvocationContext {
            rt,
            dc,
            inputs: vec![None; code.inputs.len()],
            outputs: vec![None; code.outputs.len()],
            code,
            kernel,
            metrics: None,
        });
        // SAFETY: checked non-null.
        unsafe { *out = Box::into_raw(ic) };
        Ok(())
    })
}

/// `invocation_context_destroy`.
///
/// # Safety
/// `ic` is null or a context `invocation_create` made, destroyed once.
pub unsafe extern "C" fn invocation_destroy(ic: *mut InvocationContext) -> Status {
    if !ic.is_null() {
        // SAFETY: the caller's promise.
        drop(unsafe { Box::from_raw(ic) });
    }
    lrt::OK
}

/// Bytes of a tensor of `t` (`None` for an element type without a size or a dynamic
/// dimension).
fn tensor_bytes(t: &RankedTensorType) -> Option<usize> {
    let es = match t.element_type {
        6 | 9 | 3 => 1,   // bool, int8, uint8
        7 | 10 | 17 => 2, // int16, float16, uint16
        1 | 2 | 16 => 4,  // float32, int32, uint32
        4 | 11 | 13 => 8, // int64, float64, uint64
        _ => return None,
    };
    t.layout.dims().iter().try_fold(es, |acc: usize, &d| {
        acc.checked_mul(usize::try_from(d).ok()?)
    })
}

/// The bytes model input or output `k` takes.
fn operand_bytes(code: &ByteCode, indexes: &[u32], k: usize) -> Option<usize> {
    let o = code.model.main.operands.get(*indexes.get(k)? as usize)?;
    operand_size(o.r#type, &o.dimensions).and_then(|n| usize::try_from(n).ok())
}

/// `get_input_requirements` / `get_output_requirements`: host memory of the tensor's size.
///
/// # Safety
/// `ic` is null or a live context; `t` null or a tensor type; `out` null or writable.
unsafe fn requirements(
    ic: *mut InvocationContext,
    index: c_int,
    output: bool,
    t: *const RankedTensorType,
    out: *mut Handle,
) -> Status {
    guarded(|| {
        // SAFETY: the caller's promise.
        let (ic, t) = unsafe { (ic.as_ref(), t.as_ref()) };
        let (Some(ic), Some(t)) = (ic, t) else {
            return Err(err(lrt::INVALID_ARGUMENT, "a null context or tensor type"));
        };
        let k = usize::try_from(index).map_err(|_| err(lrt::INDEX_OOB, "a negative index"))?;
        let size = match output {
            false => match ic.code.inputs.get(k) {
                None => return Err(err(lrt::INDEX_OOB, format!("input {k}"))),
                Some(Some(h)) => {
                    operand_bytes(&ic.code, &ic.code.model.main.input_indexes, *h as usize)
                }
                Some(None) => tensor_bytes(t),
            },
            true => match ic.code.outputs.get(k) {
                None => return Err(err(lrt::INDEX_OOB, format!("output {k}"))),
                Some(h) => operand_bytes(&ic.code, &ic.code.model.main.output_indexes, *h as usize),
            },
        }
        .ok_or_else(|| err(lrt::UNSUPPORTED, format!("tensor {k} has no fixed size")))?;
        if out.is_null() {
            return Err(err(lrt::INVALID_ARGUMENT, "a null out-pointer"));
        }
        // SAFETY: checked at create.
        let rt = unsafe { &*ic.rt };
        let create = rt
            .create_tensor_buffer_requirements
            .ok_or_else(|| err(lrt::RUNTIME_FAILURE, "no create_tensor_buffer_requirements"))?;
        let types = [lrt::BUFFER_HOST_MEMORY];
        // SAFETY: the runtime's function; `types` outlives the call; `out` writable.
        match unsafe { create(1, types.as_ptr(), size, 0, std::ptr::null(), out) } {
            lrt::OK => Ok(()),
            s => Err(err(s, "create_tensor_buffer_requirements failed")),
        }
    })
}

/// `get_input_requirements`.
///
/// # Safety
/// As [`requirements`].
pub unsafe extern "C" fn input_requirements(
    ic: *mut InvocationContext,
    k: c_int,
    t: *const RankedTensorType,
    out: *mut Handle,
) -> Status {
    // SAFETY: forwarded.
    unsafe { requirements(ic, k, false, t, out) }
}

/// `get_output_requirements`.
///
/// # Safety
/// As [`requirements`].
pub unsafe extern "C" fn output_requirements(
    ic: *mut InvocationContext,
    k: c_int,
    t: *const RankedTensorType,
    out: *mut Handle,
) -> Status {
    // SAFETY: forwarded.
    unsafe { requirements(ic, k, true, t, out) }
}

/// Sets or clears an attachment.
///
/// # Safety
/// `ic` is null or a live context.
unsafe fn attach(ic: *mut InvocationContext, k: c_int, h: Option<u64>, output: bool) -> Status {
    guarded(|| {
        // SAFETY: the caller's promise; the runtime does not call into one context from
        // two threads at once.
        let ic = unsafe { ic.as_mut() }.ok_or_else(|| err(lrt::INVALID_ARGUMENT, "no context"))?;
        let slots = if output {
            &mut ic.outputs
        } else {
            &mut ic.inputs
        };
        let slot = usize::try_from(k)
            .ok()
            .and_then(|k| slots.get_mut(k))
            .ok_or_else(|| err(lrt::INDEX_OOB, format!("tensor {k}")))?;
        *slot = h;
        Ok(())
    })
}

/// `attach_input`.
///
/// # Safety
/// As [`attach`].
pub unsafe extern "C" fn attach_input(ic: *mut InvocationContext, k: c_int, h: u64) -> Status {
    // SAFETY: forwarded.
    unsafe { attach(ic, k, Some(h), false) }
}

/// `attach_output`.
///
/// # Safety
/// As [`attach`].
pub unsafe extern "C" fn attach_output(ic: *mut InvocationContext, k: c_int, h: u64) -> Status {
    // SAFETY: forwarded.
    unsafe { attach(ic, k, Some(h), true) }
}

/// `detach_input`.
///
/// # Safety
/// As [`attach`].
pub unsafe extern "C" fn detach_input(ic: *mut InvocationContext, k: c_int, _h: u64) -> Status {
    // SAFETY: forwarded.
    unsafe { attach(ic, k, None, false) }
}

/// `detach_output`.
///
/// # Safety
/// As [`attach`].
pub unsafe extern "C" fn detach_output(ic: *mut InvocationContext, k: c_int, _h: u64) -> Status {
    // SAFETY: forwarded.
    unsafe { attach(ic, k, None, true) }
}

/// `invocation_context_set_scheduling_info` and `invocation_context_set_options`: nothing
/// vnpu uses.
pub extern "C" fn ignore(_ic: *mut InvocationContext, _x: *const c_void) -> Status {
    lrt::OK
}

/// A locked tensor buffer, unlocked on drop.
struct Locked<'r> {
    rt: &'r RuntimeContext,
    tb: Handle,
    addr: *mut u8,
    len: usize,
}

impl<'r> Locked<'r> {
    fn new(rt: &'r RuntimeContext, tb: Handle, mode: c_int) -> Result<Locked<'r>, String> {
        let (lock, size) = rt
            .lock_tensor_buffer
            .zip(rt.get_tensor_buffer_packed_size)
            .ok_or("the runtime has no lock_tensor_buffer")?;
        let mut len = 0usize;
        let mut addr: *mut c_void = std::ptr::null_mut();
        // SAFETY: the runtime's buffer, registered with this device context; out-pointers
        // are locals.
        unsafe {
            if size(tb, &mut len) != lrt::OK {
                return Err("get_tensor_buffer_packed_size failed".into());
            }
            if lock(tb, &mut addr, mode) != lrt::OK || addr.is_null() {
                return Err("lock_tensor_buffer failed".into());
            }
        }
        Ok(Locked {
            rt,
            tb,
            addr: addr.cast(),
            len,
        })
    }

    /// Its bytes.
    ///
    /// # Safety
    /// Nothing else writes the buffer while it is locked for this invoke.
    unsafe fn bytes(&self) -> &[u8] {
        // SAFETY: the runtime locked `len` bytes at `addr` for us.
        unsafe { std::slice::from_raw_parts(self.addr, self.len) }
    }
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        if let Some(unlock) = self.rt.unlock_tensor_buffer {
            // SAFETY: the buffer this guard locked.
            unsafe { unlock(self.tb) };
        }
    }
}

/// `invoke`: copies the attached inputs in, runs the model, copies the outputs out.
///
/// # Safety
/// `ic` is null or a live context whose device context is alive.
pub unsafe extern "C" fn invoke(ic: *mut InvocationContext) -> Status {
    guarded(|| {
        // SAFETY: the caller's promise.
        let ic = unsafe { ic.as_mut() }.ok_or_else(|| err(lrt::INVALID_ARGUMENT, "no context"))?;
        // SAFETY: the runtime keeps both contexts alive across invoke.
        let (rt, dc) = unsafe { (&*ic.rt, &*ic.dc) };
        let fail = |e: String| err(lrt::RUNTIME_FAILURE, format!("invoke: {e}"));
        // Held through the invoke: registering meanwhile waits (LiteRT does not).
        let buffers = dc.buffers.lock().map_err(|_| fail("poisoned".into()))?;
        let buffer = |h: Option<u64>, what: String| -> Result<Handle, (Status, String)> {
            let h = h.ok_or_else(|| fail(format!("{what} has no buffer attached")))?;
            buffers
                .get(&h)
                .map(|&b| b as Handle)
                .ok_or_else(|| fail(format!("{what}: unknown buffer handle {h}")))
        };
        // Model input k: the first dispatch input that maps to it.
        let mut locked = Vec::new();
        for k in 0..ic.code.model.main.input_indexes.len() {
            let i = ic
                .code
                .inputs
                .iter()
                .position(|&m| m == Some(k as u32))
                .ok_or_else(|| fail(format!("model input {k} unmapped")))?;
            let tb = buffer(ic.inputs[i], format!("input {i}"))?;
            locked.push(Locked::new(rt, tb, lrt::LOCK_READ).map_err(fail)?);
        }
        // SAFETY: the inputs stay locked (and unwritten) until the copies are done.
        let read = |k: usize| unsafe { locked.get(k).map_or(&[][..], |l| l.bytes()) };
        let outputs = &ic.outputs;
        let map = &ic.code.outputs;
        let write = |k: usize, bytes: &[u8]| -> Result<(), KernelError> {
            for (j, _) in map.iter().enumerate().filter(|(_, &m)| m as usize == k) {
                let tb = buffer(outputs[j], format!("output {j}"))
                    .map_err(|(_, e)| KernelError::Memory(e))?;
                let l = Locked::new(rt, tb, lrt::LOCK_WRITE).map_err(KernelError::Memory)?;
                if l.len < bytes.len() {
                    return Err(KernelError::Size {
                        tensor: j,
                        got: l.len,
                        want: bytes.len(),
                    });
                }
                // SAFETY: the runtime locked `len` bytes for writing; no Rust reference
                // into them exists.
                unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), l.addr, bytes.len()) };
            }
            Ok(())
        };
        let timing = ic
            .kernel
            .invoke(read, write, ic.metrics.is_some())
            .map_err(|e| fail(e.to_string()))?;
        drop(locked);
        if let Some(t) = &mut ic.metrics {
            t.invokes += 1;
            if timing.time_on_device != u64::MAX {
                t.device_us += timing.time_on_device as i64;
            }
            if timing.time_in_driver != u64::MAX {
                t.driver_us += timing.time_in_driver as i64;
            }
        }
        Ok(())
    })
}

/// `start_metrics_collection`.
///
/// # Safety
/// `ic` is null or a live context.
pub unsafe extern "C" fn start_metrics(ic: *mut InvocationContext, _level: c_int) -> Status {
    // SAFETY: the caller's promise.
    match unsafe { ic.as_mut() } {
        Some(ic) => {
            ic.metrics = Some(Totals::default());
            lrt::OK
        }
        None => lrt::INVALID_ARGUMENT,
    }
}

/// `stop_metrics_collection`: the invocations, modelled device time and driver time (µs)
/// since the start.
///
/// # Safety
/// `ic` is null or a live context; `out` null or writable.
pub unsafe extern "C" fn stop_metrics(
    ic: *mut InvocationContext,
    out: *mut *mut Metrics,
) -> Status {
    // SAFETY: the caller's promise.
    let Some(ic) = (unsafe { ic.as_mut() }) else {
        return lrt::INVALID_ARGUMENT;
    };
    let t = ic.metrics.take().unwrap_or_default();
    let m = Box::new(Metrics {
        items: vec![
            (c"vnpu_invocations".into(), t.invokes),
            (c"vnpu_device_time_us".into(), t.device_us),
            (c"vnpu_driver_time_us".into(), t.driver_us),
        ],
    });
    if out.is_null() {
        return lrt::INVALID_ARGUMENT;
    }
    put(out, Box::into_raw(m))
}

/// `get_num_metrics`.
///
/// # Safety
/// `m` is null or live metrics; `n` null or writable.
pub unsafe extern "C" fn num_metrics(m: *mut Metrics, n: *mut c_int) -> Status {
    // SAFETY: the caller's promise.
    match unsafe { m.as_ref() } {
        Some(m) => put(n, m.items.len() as c_int),
        None => lrt::INVALID_ARGUMENT,
    }
}

/// `get_metric`: the name stays valid while the metrics live.
///
/// # Safety
/// `m` is null or live metrics; `out` null or writable.
pub unsafe extern "C" fn metric(m: *mut Metrics, k: c_int, out: *mut Metric) -> Status {
    // SAFETY: the caller's promise.
    let Some(m) = (unsafe { m.as_ref() }) else {
        return lrt::INVALID_ARGUMENT;
    };
    let Some((name, v)) = usize::try_from(k).ok().and_then(|k| m.items.get(k)) else {
        return lrt::INDEX_OOB;
    };
    put(
        out,
        Metric {
            name: name.as_ptr(),
            value: Any {
                kind: lrt::ANY_INT,
                value: *v,
            },
        },
    )
}

/// `destroy_metrics`.
///
/// # Safety
/// `m` is null or metrics `stop_metrics` made, destroyed once.
pub unsafe extern "C" fn destroy_metrics(m: *mut Metrics) -> Status {
    if !m.is_null() {
        // SAFETY: the caller's promise.
        drop(unsafe { Box::from_raw(m) });
    }
    lrt::OK
}

/// An entry of the interface table (the runtime calls each through its own signature).
type Entry = *const c_void;

/// `LiteRtDispatchInterface`, in the header's field order, then null room for fields a
/// later runtime may append.
#[repr(C)]
pub struct Interface {
    /// The entries, in order.
    pub entries: [Entry; 28],
    _room: [Entry; 16],
}

// SAFETY: a table of function pointers, never written after construction.
unsafe impl Sync for Interface {}

/// The interface table.
pub static INTERFACE: Interface = Interface {
    entries: [
        initialize as Entry,
        vendor_id as Entry,
        build_id as Entry,
        capabilities as Entry,
        device_create as Entry,
        device_destroy as Entry,
        input_requirements as Entry,
        output_requirements as Entry,
        register as Entry,
        unregister as Entry,
        invocation_create as Entry,
        invocation_destroy as Entry,
        ignore as Entry, // invocation_context_set_scheduling_info
        attach_input as Entry,
        attach_output as Entry,
        detach_input as Entry,
        detach_output as Entry,
        invoke as Entry,
        start_metrics as Entry,
        stop_metrics as Entry,
        num_metrics as Entry,
        metric as Entry,
        destroy_metrics as Entry,
        check_runtime as Entry,
        ignore as Entry,  // invocation_context_set_options
        std::ptr::null(), // get_hooks
        std::ptr::null(), // attach_edge_buffer
        std::ptr::null(), // detach_edge_buffer
    ],
    _room: [std::ptr::null(); 16],
};

/// The leading fields of `LiteRtDispatchApi` vnpu fills (the runtime's struct may have
/// more after them, which it zero-initialises and vnpu leaves alone).
#[repr(C)]
pub struct DispatchApi {
    /// The ABI header.
    pub header: AbiHeader,
    /// Must be exactly the runtime's API version.
    pub version: ApiVersion,
    /// The synchronous interface.
    pub interface: *const Interface,
    /// None.
    pub async_interface: *const c_void,
    /// None.
    pub graph_interface: *const c_void,
}

/// `LiteRtDispatchGetApi`.
///
/// # Safety
/// `api` is null or the runtime's writable `LiteRtDispatchApi`.
pub unsafe extern "C" fn get_api(api: *mut DispatchApi) -> Status {
    if api.is_null() {
        return lrt::INVALID_ARGUMENT;
    }
    let filled = DispatchApi {
        header: AbiHeader {
            struct_size: 56,
            major_version: 1,
            minor_version: 0,
            reserved: 0,
        },
        version: API_VERSION,
        interface: &INTERFACE,
        async_interface: std::ptr::null(),
        graph_interface: std::ptr::null(),
    };
    // SAFETY: the caller's promise: at least these leading fields are writable.
    unsafe { api.write(filled) };
    lrt::OK
}

/// Defines `LiteRtDispatchGetApi` in the crate that invokes it: the `litert/dispatch`
/// cdylib.
#[macro_export]
macro_rules! export_dispatch {
    () => {
        /// `LiteRtDispatchGetApi`: vnpu's dispatch interface, API version 0.1.0.
        ///
        /// # Safety
        /// As [`$crate::dispatch::get_api`].
        #[no_mangle]
        pub unsafe extern "C" fn LiteRtDispatchGetApi(
            api: *mut $crate::dispatch::DispatchApi,
        ) -> $crate::lrt::Status {
            // SAFETY: forwarded.
            unsafe { $crate::dispatch::get_api(api) }
        }
    };
}
