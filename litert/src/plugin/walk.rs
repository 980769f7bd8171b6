//! A LiteRT subgraph read through the compiler context into a `.tflite` description
//! (tensors with shapes, types, quantisation and constants; operators with their options),
//! so the driver's one importer, mapping table and partitioner read it as they read a file
//! or the delegate's graph.

use std::collections::HashMap;
use std::ffi::{c_char, c_void, CStr};

use vnpu_driver::tflite::ops::name;
use vnpu_driver::tflite::writer::{ModelDesc, OpDesc, TensorDesc};

use super::options;
use crate::graph::file_type;
use crate::lrt::{
    CompilerContext, Handle, QuantPerChannel, QuantPerTensor, RankedTensorType, OK,
    QUANT_PER_CHANNEL, QUANT_PER_TENSOR, RANKED,
};

/// The most channels a per-channel quantisation may claim.
const MAX_CHANNELS: u64 = 1 << 24;
/// `kLiteRtOpCodeTflCustom`.
const CUSTOM: i32 = 32;

/// A subgraph as read.
pub struct Walked {
    /// The description (graph inputs: the subgraph's non-constant inputs).
    pub desc: ModelDesc,
    /// The runtime's operators, in order (operator `k` of `desc` is `ops[k]`).
    pub ops: Vec<Handle>,
    /// The description's tensor of each subgraph input, in order.
    pub inputs: Vec<usize>,
    /// The description's tensor of each subgraph output, in order.
    pub outputs: Vec<usize>,
}

/// Calls a context function, turning a missing one or a failure into an error naming it.
macro_rules! call {
    ($ctx:expr, $f:ident ( $($a:expr),* )) => {
        match $ctx.$f {
            Some(f) => match f($($a),*) {
                OK => Ok(()),
                s => Err(format!(concat!(stringify!($f), " returned {}"), s)),
            },
            None => Err(concat!("the runtime has no ", stringify!($f)).to_string()),
        }
    };
}

/// Reads `subgraph`.
///
/// # Safety
/// `ctx` is the runtime's compiler context (the pinned table) and `subgraph` one of its
/// subgraphs, valid for the call.
pub unsafe fn walk(ctx: &CompilerContext, subgraph: Handle) -> Result<Walked, String> {
    let mut w = Walker {
        ctx,
        index: HashMap::new(),
        desc: ModelDesc::default(),
    };
    // SAFETY: the caller's promise; every out-pointer is a local.
    unsafe {
        let mut n = 0usize;
        call!(ctx, get_num_subgraph_inputs(subgraph, &mut n))?;
        let mut inputs = Vec::with_capacity(n);
        for i in 0..n {
            let mut t: Handle = std::ptr::null_mut();
            call!(ctx, get_subgraph_input(subgraph, i, &mut t))?;
            inputs.push(w.tensor(t)?.ok_or("a null subgraph input")?);
        }
        call!(ctx, get_num_subgraph_outputs(subgraph, &mut n))?;
        let mut outputs = Vec::with_capacity(n);
        for i in 0..n {
            let mut t: Handle = std::ptr::null_mut();
            call!(ctx, get_subgraph_output(subgraph, i, &mut t))?;
            outputs.push(w.tensor(t)?.ok_or("a null subgraph output")?);
        }
        call!(ctx, get_num_subgraph_ops(subgraph, &mut n))?;
        let mut ops = Vec::with_capacity(n);
        for k in 0..n {
            let mut op: Handle = std::ptr::null_mut();
            call!(ctx, get_subgraph_op(subgraph, k, &mut op))?;
            let desc = w.op(op)?;
            w.desc.ops.push(desc);
            ops.push(op);
        }
        w.desc.inputs = inputs
            .iter()
            .filter(|&&t| w.desc.tensors[t].data.is_empty())
            .map(|&t| t as i32)
            .collect();
        w.desc.outputs = outputs.iter().map(|&t| t as i32).collect();
        Ok(Walked {
            desc: w.desc,
            ops,
            inputs,
            outputs,
        })
    }
}

struct Walker<'c> {
    ctx: &'c CompilerContext,
    index: HashMap<usize, usize>,
    desc: ModelDesc,
}

/// A C string, or empty.
///
/// # Safety
/// `p` is null or a valid C string.
unsafe fn text(p: *const c_char) -> String {
    match p.is_null() {
        true => String::new(),
        // SAFETY: the caller's promise.
        false => unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned(),
    }
}

impl Walker<'_> {
    /// The description's index of tensor `t` (read on first sight); `None` for null.
    ///
    /// # Safety
    /// `t` is null or a tensor of the runtime.
    unsafe fn tensor(&mut self, t: Handle) -> Result<Option<usize>, String> {
        if t.is_null() {
            return Ok(None);
        }
        if let Some(&k) = self.index.get(&(t as usize)) {
            return Ok(Some(k));
        }
        let ctx = self.ctx;
        let k = self.desc.tensors.len();
        let mut d = TensorDesc {
            name: format!("tensor {k}"),
            ty: 100,
            ..TensorDesc::default()
        };
        // SAFETY: the runtime's tensor; out-pointers are locals; the slices it hands back
        // are read within the call, with their sizes bounded.
        unsafe {
            let mut p: *const c_char = std::ptr::null();
            if call!(ctx, get_tensor_name(t, &mut p)).is_ok() && !p.is_null() {
                d.name = text(p);
            }
            let mut id = -1;
            call!(ctx, get_tensor_type_id(t, &mut id))?;
            if id == RANKED {
                let mut r = RankedTensorType::default();
                call!(ctx, get_ranked_tensor_type(t, &mut r))?;
                d.ty = file_type(r.element_type);
                d.shape = r.layout.dims().to_vec();
                if d.shape.iter().any(|&x| x < 0) {
                    d.signature = d.shape.clone();
                    d.shape = d.shape.iter().map(|&x| x.max(1)).collect();
                }
            }
            let mut q = 0;
            if call!(ctx, get_quantization_type_id(t, &mut q)).is_ok() {
                if q == QUANT_PER_TENSOR {
                    let mut v = QuantPerTensor::default();
                    call!(ctx, get_per_tensor_quantization(t, &mut v))?;
                    d.scales = vec![v.scale];
                    d.zero_points = vec![v.zero_point];
                } else if q == QUANT_PER_CHANNEL {
                    let mut v = QuantPerChannel {
                        quantized_dimension: 0,
                        num_channels: 0,
                        scales: std::ptr::null(),
                        zero_points: std::ptr::null(),
                    };
                    call!(ctx, get_per_channel_quantization(t, &mut v))?;
                    if v.num_channels > MAX_CHANNELS
                        || v.scales.is_null()
                        || v.zero_points.is_null()
                    {
                        return Err(format!("tensor {}: per-channel quantisation", d.name));
                    }
                    let n = v.num_channels as usize;
                    d.scales = std::slice::from_raw_parts(v.scales, n).to_vec();
                    d.zero_points = std::slice::from_raw_parts(v.zero_points, n).to_vec();
                    d.axis = v.quantized_dimension;
                }
            }
            let mut weights: Handle = std::ptr::null_mut();
            if call!(ctx, get_tensor_weights(t, &mut weights)).is_ok() && !weights.is_null() {
                let (mut addr, mut size): (*const c_void, usize) = (std::ptr::null(), 0);
                if call!(ctx, get_weights_bytes(weights, &mut addr, &mut size)).is_ok()
                    && !addr.is_null()
                    && size > 0
                {
                    d.data = std::slice::from_raw_parts(addr.cast::<u8>(), size).to_vec();
                }
            }
        }
        self.desc.tensors.push(d);
        self.index.insert(t as usize, k);
        Ok(Some(k))
    }

    /// One operator.
    ///
    /// # Safety
    /// `op` is an operator of the runtime.
    unsafe fn op(&mut self, op: Handle) -> Result<OpDesc, String> {
        let ctx = self.ctx;
        // SAFETY: as for `tensor`.
        unsafe {
            let mut code = -1;
            call!(ctx, get_op_code(op, &mut code))?;
            let mut d = OpDesc {
                code,
                ..OpDesc::default()
            };
            let mut n = 0usize;
            call!(ctx, get_num_op_inputs(op, &mut n))?;
            for i in 0..n {
                let mut t: Handle = std::ptr::null_mut();
                let k = match call!(ctx, get_op_input(op, i, &mut t)) {
                    Ok(()) => self.tensor(t)?,
                    Err(_) => None,
                };
                d.ins.push(k.map_or(-1, |k| k as i32));
            }
            call!(ctx, get_num_op_outputs(op, &mut n))?;
            for i in 0..n {
                let mut t: Handle = std::ptr::null_mut();
                call!(ctx, get_op_output(op, i, &mut t))?;
                d.outs
                    .push(self.tensor(t)?.ok_or("a null operator output")? as i32);
            }
            if code == CUSTOM {
                let mut p: *const c_char = std::ptr::null();
                if call!(ctx, get_custom_code(op, &mut p)).is_ok() {
                    d.custom = text(p);
                }
                let (mut b, mut len): (*const u8, i32) = (std::ptr::null(), 0);
                if call!(ctx, get_custom_options(op, &mut b, &mut len)).is_ok() && !b.is_null() {
                    let len = usize::try_from(len).unwrap_or(0);
                    d.custom_options = std::slice::from_raw_parts(b, len).to_vec();
                }
            } else {
                match options::read(ctx, op, code) {
                    Ok(o) => d.options = o,
                    // The operator stays on the CPU, and the report says why.
                    Err(e) => {
                        d.custom = format!("{} ({e})", name(code));
                        d.code = CUSTOM;
                    }
                }
            }
            Ok(d)
        }
    }
}
