//! The graph a TFLite runtime hands a delegate, read once into a `.tflite` FlatBuffer
//! (tensors with their constants and quantisation, nodes in execution order with their
//! options rebuilt from the C parameter structs), so the driver's one importer,
//! mapping table and partitioner read it as they read a file.

use std::ffi::{c_int, CStr};
use std::ptr;

use vnpu_driver::tflite::ops::{c_params, options_from_c};
use vnpu_driver::tflite::writer::{ModelDesc, OpDesc, TensorDesc};
use vnpu_driver::tflite::{SparseDim, Sparsity};

use crate::ffi::{self, TfLiteAffineQuantization, TfLiteContext, TfLiteNode, TfLiteRegistration};

/// The runtime's graph as a model file.
pub struct Snapshot {
    /// The `.tflite` bytes.
    pub bytes: Vec<u8>,
    /// The runtime's node index of each operator (operator `k` is node `nodes[k]`).
    pub nodes: Vec<i32>,
}

/// Why the graph could not be read.
#[derive(Debug, thiserror::Error)]
pub enum GraphError {
    /// A context function is missing or failed.
    #[error("the runtime's context: {0}")]
    Context(String),
}

/// `TfLiteType` to the file's `TensorType` (none for a type vnpu has no operand type for;
/// such a tensor is written with an unknown type, so its operators stay on the CPU).
pub(crate) fn file_type(t: c_int) -> i8 {
    match t {
        1 => 0,   // float32
        10 => 1,  // float16
        2 => 2,   // int32
        3 => 3,   // uint8
        4 => 4,   // int64
        6 => 6,   // bool
        7 => 7,   // int16
        9 => 9,   // int8
        _ => 100, // anything else: refused by the importer, by operator
    }
}

/// Reads the context's tensors and execution plan.
///
/// # Safety
/// `ctx` is the runtime's valid context, during the delegate's `Prepare`.
pub unsafe fn snapshot(ctx: *mut TfLiteContext) -> Result<Snapshot, GraphError> {
    let bad = |s: &str| GraphError::Context(s.to_string());
    // SAFETY: the caller promises a valid context; its function pointers are the runtime's.
    unsafe {
        let c = &*ctx;
        let plan_fn = c
            .get_execution_plan
            .ok_or_else(|| bad("no GetExecutionPlan"))?;
        let node_fn = c
            .get_node_and_registration
            .ok_or_else(|| bad("no GetNodeAndRegistration"))?;
        let mut plan: *mut ffi::TfLiteIntArray = ptr::null_mut();
        if plan_fn(ctx, &mut plan) != ffi::OK {
            return Err(bad("GetExecutionPlan failed"));
        }
        let nodes = ffi::ints(plan);
        let mut desc = ModelDesc::default();
        for k in 0..c.tensors_size {
            desc.tensors.push(tensor(&*c.tensors.add(k), k));
        }
        let n = desc.tensors.len() as i32;
        let valid = |v: Vec<i32>| -> Vec<i32> {
            v.into_iter()
                .map(|t| if (0..n).contains(&t) { t } else { -1 })
                .collect()
        };
        for &index in &nodes {
            let mut node: *mut TfLiteNode = ptr::null_mut();
            let mut reg: *mut TfLiteRegistration = ptr::null_mut();
            if node_fn(ctx, index, &mut node, &mut reg) != ffi::OK
                || node.is_null()
                || reg.is_null()
            {
                return Err(bad("GetNodeAndRegistration failed"));
            }
            let (node, reg) = (&*node, &*reg);
            let mut op = OpDesc {
                code: reg.builtin_code,
                ins: valid(ffi::ints(node.inputs)),
                outs: valid(ffi::ints(node.outputs)),
                ..OpDesc::default()
            };
            if reg.builtin_code == 32 {
                if !reg.custom_name.is_null() {
                    op.custom = CStr::from_ptr(reg.custom_name)
                        .to_string_lossy()
                        .into_owned();
                }
                let size = usize::try_from(node.custom_initial_data_size).unwrap_or(0);
                if !node.custom_initial_data.is_null() && size > 0 {
                    op.custom_options =
                        std::slice::from_raw_parts(node.custom_initial_data.cast::<u8>(), size)
                            .to_vec();
                }
            } else {
                let (_, len) = c_params(reg.builtin_code);
                if len > 0 && !node.builtin_data.is_null() {
                    let raw = std::slice::from_raw_parts(node.builtin_data.cast::<u8>(), len);
                    match options_from_c(reg.builtin_code, raw) {
                        Ok(o) => op.options = o,
                        // Parameters vnpu cannot read: the operator stays on the CPU, and
                        // the report says why.
                        Err(e) => {
                            op.custom = format!(
                                "{} with parameters vnpu cannot read ({e})",
                                vnpu_driver::tflite::ops::name(reg.builtin_code)
                            );
                            op.code = 32;
                        }
                    }
                }
            }
            desc.ops.push(op);
        }
        // The runtime does not show the delegate its graph's inputs and outputs: inputs are
        // the tensors read but never written (nor constant), outputs those written but never
        // read. Each kernel is given its real outputs when it is made.
        let mut read = vec![false; desc.tensors.len()];
        let mut written = vec![false; desc.tensors.len()];
        for o in &desc.ops {
            o.ins
                .iter()
                .filter(|&&t| t >= 0)
                .for_each(|&t| read[t as usize] = true);
            o.outs
                .iter()
                .filter(|&&t| t >= 0)
                .for_each(|&t| written[t as usize] = true);
        }
        for (t, x) in desc.tensors.iter().enumerate() {
            if read[t] && !written[t] && x.data.is_empty() {
                desc.inputs.push(t as i32);
            }
            if written[t] && !read[t] {
                desc.outputs.push(t as i32);
            }
        }
        Ok(Snapshot {
            bytes: desc.to_bytes(),
            nodes,
        })
    }
}

/// One tensor as the file describes it.
///
/// # Safety
/// `t` is a valid tensor of the runtime.
unsafe fn tensor(t: &ffi::TfLiteTensor, index: usize) -> TensorDesc {
    // SAFETY: the runtime's tensor fields are valid pointers or null.
    unsafe {
        let shape = ffi::ints(t.dims);
        let signature = ffi::ints(t.dims_signature);
        let data = if t.allocation_type == ffi::MMAP_RO && !t.data.is_null() && t.bytes > 0 {
            std::slice::from_raw_parts(t.data.cast::<u8>(), t.bytes).to_vec()
        } else {
            Vec::new()
        };
        let (mut scales, mut zero_points, mut axis) = (Vec::new(), Vec::new(), 0);
        if t.quantization.kind == ffi::AFFINE_QUANTIZATION && !t.quantization.params.is_null() {
            let q = &*t.quantization.params.cast::<TfLiteAffineQuantization>();
            if !q.scale.is_null() {
                let n = usize::try_from((*q.scale).size).unwrap_or(0);
                scales = std::slice::from_raw_parts((*q.scale).data.as_ptr(), n).to_vec();
            }
            zero_points = ffi::ints(q.zero_point).into_iter().map(i64::from).collect();
            axis = q.quantized_dimension;
        } else if t.params.scale != 0.0 {
            scales = vec![t.params.scale];
            zero_points = vec![i64::from(t.params.zero_point)];
        }
        let name = if t.name.is_null() {
            format!("tensor {index}")
        } else {
            CStr::from_ptr(t.name).to_string_lossy().into_owned()
        };
        TensorDesc {
            name,
            shape,
            signature,
            ty: file_type(t.kind),
            data,
            scales,
            zero_points,
            axis,
            sparsity: sparsity(t.sparsity),
        }
    }
}

/// A sparse tensor's format (null: a dense tensor).
///
/// # Safety
/// `s` is null or the runtime's valid `TfLiteSparsity`.
unsafe fn sparsity(s: *const ffi::TfLiteSparsity) -> Option<Sparsity> {
    if s.is_null() {
        return None;
    }
    // SAFETY: the caller's promise: the runtime's arrays are valid or null, and
    // `dim_metadata` holds `dim_metadata_size` entries (none when null or negative).
    unsafe {
        let s = &*s;
        let n = usize::try_from(s.dim_metadata_size).unwrap_or(0);
        let dims = match s.dim_metadata.is_null() {
            true => &[][..],
            false => std::slice::from_raw_parts(s.dim_metadata, n),
        };
        Some(Sparsity {
            traversal_order: ffi::ints(s.traversal_order),
            block_map: ffi::ints(s.block_map),
            dims: dims
                .iter()
                .map(|m| SparseDim {
                    csr: m.format == 1,
                    dense_size: m.dense_size,
                    segments: ffi::ints(m.array_segments),
                    indices: ffi::ints(m.array_indices),
                })
                .collect(),
        })
    }
}
