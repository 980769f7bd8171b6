//! Per-invoke overhead of LiteRT's NPU route: the dispatch library's `invoke` (through its
//! C functions, on host tensor buffers of a synthetic runtime context: lock, copy in,
//! execute, copy out, unlock) against the driver's in-process synchronous execute on the
//! same prepared model (what `vnpu run` times: inputs already in the request's pool).
//! Group `litert_dispatch`, ids `<model>/execute` and `<model>/dispatch_invoke`, for the
//! face models and a 1-op model (ADD of 1024 floats). Issue 24's goals: dispatch at most
//! 1.1x execute on the face models, at most 2x on the 1-op model.

use std::ffi::{c_int, c_void};
use std::path::PathBuf;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion};
use vnpu_delegate::bytecode;
use vnpu_delegate::dispatch::{self, DeviceContext, InvocationContext};
use vnpu_delegate::lrt::{self, AbiHeader, Handle, MemBuffer, RuntimeContext, Status};
use vnpu_driver::device::{IPreparedModel, VnpuDevice};
use vnpu_driver::hal::{ErrorStatus, MeasureTiming, OptionalTimePoint, OptionalTimeoutDuration};
use vnpu_driver::tflite::npy::Array;
use vnpu_driver::tflite::writer::{ModelDesc, OpDesc, TensorDesc};
use vnpu_driver::tflite::{import, run, Imported};

const MODELS: &[&str] = &[
    "face_detection_short_range",
    "face_detection_full_range",
    "face_landmark",
];

/// A host tensor buffer of the synthetic runtime.
struct Buf {
    data: Vec<u8>,
}

unsafe extern "C" fn packed_size(tb: Handle, out: *mut usize) -> Status {
    // SAFETY: `tb` is a Buf of this bench; `out` is the library's local.
    unsafe { *out = (*tb.cast::<Buf>()).data.len() };
    lrt::OK
}
unsafe extern "C" fn lock(tb: Handle, addr: *mut *mut c_void, _mode: c_int) -> Status {
    // SAFETY: as above.
    unsafe { *addr = (*tb.cast::<Buf>()).data.as_mut_ptr().cast() };
    lrt::OK
}
unsafe extern "C" fn unlock(_tb: Handle) -> Status {
    lrt::OK
}

/// `.tflite` of one ADD of a 1024-float input and a constant.
fn one_op() -> Vec<u8> {
    let t = |name: &str, data: Vec<u8>| TensorDesc {
        name: name.into(),
        shape: vec![1, 1024],
        ty: 0,
        data,
        ..TensorDesc::default()
    };
    ModelDesc {
        tensors: vec![
            t("x", Vec::new()),
            t("c", vec![0; 4096]),
            t("y", Vec::new()),
        ],
        ops: vec![OpDesc {
            code: 0,
            ins: vec![0, 1],
            outs: vec![2],
            ..OpDesc::default()
        }],
        inputs: vec![0],
        outputs: vec![2],
    }
    .to_bytes()
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The dispatch route set up for `imported`, its buffers alive beside it.
struct Route {
    /// The runtime context the library's contexts point to.
    _rt: Box<RuntimeContext>,
    dc: *mut DeviceContext,
    ic: *mut InvocationContext,
    /// The buffers registered (not moved after registration).
    _bufs: Vec<Buf>,
}

impl Route {
    fn new(imported: &Imported, inputs: &[Array]) -> Route {
        let n_in = imported.inputs.len();
        let n_out = imported.outputs.len();
        let code = bytecode::encode(
            &imported.model,
            &(0..n_in as u32).map(Some).collect::<Vec<_>>(),
            &(0..n_out as u32).collect::<Vec<_>>(),
        )
        .expect("byte code");
        // SAFETY: zero is valid for every field (integers, pointers, Options).
        let mut rt: Box<RuntimeContext> = Box::new(unsafe { std::mem::zeroed() });
        rt.header = AbiHeader {
            struct_size: 416,
            major_version: 1,
            minor_version: 2,
            reserved: 0,
        };
        rt.get_tensor_buffer_packed_size = Some(packed_size);
        rt.lock_tensor_buffer = Some(lock);
        rt.unlock_tensor_buffer = Some(unlock);
        let null = std::ptr::null_mut();
        let mut bufs: Vec<Buf> = inputs
            .iter()
            .map(|a| Buf {
                data: a.data.clone(),
            })
            .collect();
        for o in &imported.outputs {
            let n = run::tensor_bytes(o).expect("output size");
            bufs.push(Buf { data: vec![0; n] });
        }
        let (mut dc, mut ic) = (std::ptr::null_mut(), std::ptr::null_mut());
        // SAFETY: live objects of this bench and local out-pointers, in LiteRT's order.
        unsafe {
            assert_eq!(dispatch::initialize(&*rt, null, null), lrt::OK);
            assert_eq!(dispatch::device_create(&*rt, null, &mut dc), lrt::OK);
            let m = MemBuffer {
                fd: -1,
                base_addr: code.as_ptr().cast(),
                offset: 0,
                size: code.len(),
                alloc_base_file_offset: 0,
            };
            let s = dispatch::invocation_create(
                &*rt,
                dc,
                lrt::EXEC_ML_MODEL,
                &m,
                c"bench".as_ptr(),
                n_in as c_int,
                n_out as c_int,
                &mut ic,
            );
            assert_eq!(s, lrt::OK);
            for (k, b) in bufs.iter_mut().enumerate() {
                let mut h = 0u64;
                assert_eq!(
                    dispatch::register(dc, (b as *mut Buf).cast(), &mut h),
                    lrt::OK
                );
                let s = match k < n_in {
                    true => dispatch::attach_input(ic, k as c_int, h),
                    false => dispatch::attach_output(ic, (k - n_in) as c_int, h),
                };
                assert_eq!(s, lrt::OK);
            }
        }
        Route {
            _rt: rt,
            dc,
            ic,
            _bufs: bufs,
        }
    }

    fn invoke(&self) {
        // SAFETY: a context this route made, its buffers alive.
        assert_eq!(unsafe { dispatch::invoke(self.ic) }, lrt::OK);
    }
}

impl Drop for Route {
    fn drop(&mut self) {
        // SAFETY: made by this route, destroyed once, the invocation context first.
        unsafe {
            dispatch::invocation_destroy(self.ic);
            dispatch::device_destroy(self.dc);
        }
    }
}

fn bench(c: &mut Criterion) {
    let dev = VnpuDevice::new().expect("device");
    let mut g = c.benchmark_group("litert_dispatch");
    let mut cases: Vec<(String, Vec<u8>)> = MODELS
        .iter()
        .map(|m| {
            let path = root().join("models").join(format!("{m}.tflite"));
            (m.to_string(), std::fs::read(path).expect("model"))
        })
        .collect();
    cases.push(("one_op_add".into(), one_op()));
    for (name, bytes) in &cases {
        let imported = import(bytes, false).expect("import");
        let arrays = run::random_inputs(&imported.inputs, 1).expect("inputs");
        let p =
            vnpu_driver::cache::dir::prepare_plain(dev.as_ref(), &imported.model, imported.level);
        assert_eq!((p.ret, p.status), (ErrorStatus::None, ErrorStatus::None));
        let prepared: Arc<dyn IPreparedModel> = p.prepared.expect("prepared");
        let (request, _pool) = run::request(&imported, &arrays).expect("request");
        g.bench_function(format!("{name}/execute"), |b| {
            b.iter(|| {
                let (status, _, _) = prepared.execute_synchronously_1_3(
                    &request,
                    MeasureTiming::NO,
                    OptionalTimePoint::NONE,
                    OptionalTimeoutDuration(None),
                );
                assert_eq!(status, ErrorStatus::None);
            })
        });
        let route = Route::new(&imported, &arrays);
        g.bench_function(format!("{name}/dispatch_invoke"), |b| {
            b.iter(|| route.invoke())
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
