//! NNAPI FULLY_CONNECTED: input (rank >= 2, flattened to `[numel/K, K]`), weights `[N,K]`,
//! bias `[N]`; output `[B,N]`. float32 on the GEMM; float16 computes in float32; quantised
//! tensors run on the integer core [`qconv::fully_connected`](crate::kernels::qconv::fully_connected).
//!
//! Parameter words: act.

use crate::kernels::conv::{check_conv_types, qerr, quant_dispatch, QStage};
use crate::kernels::gemm::{fill_bias, gemm, Mat, MatMut};
use crate::kernels::kernel::default_check;
use crate::kernels::kernel::{Cost, Kernel, Words};
use crate::kernels::qconv::{self, FullyConnectedParams};
use crate::kernels::quant::QuantElem;
use crate::kernels::{bad_shape, checked_product, Activation, Result, Tensor, TensorMut};
use crate::tensor::{widen_f16, TensorType, View, ViewMut};

/// A fully connected layer.
#[derive(Debug, Clone, PartialEq)]
pub struct FullyConnected {
    /// Fused activation.
    pub act: Activation,
}

impl Kernel for FullyConnected {
    fn name(&self) -> &'static str {
        "FULLY_CONNECTED"
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        Ok(FullyConnected { act: w.act()? })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        w.push(self.act as u32);
    }

    fn input_count(&self) -> std::ops::RangeInclusive<usize> {
        3..=3
    }

    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        let name = self.name();
        check_conv_types(name, inputs[0], inputs[1], inputs[2])?;
        let (x, wt, bias) = (&inputs[0].shape, &inputs[1].shape, &inputs[2].shape);
        if x.len() < 2 {
            return Err(bad_shape(name, format!("input rank {} < 2", x.len())));
        }
        let &[n, k] = wt.as_slice() else {
            return Err(bad_shape(
                name,
                format!("weights must be [N,K], got {wt:?}"),
            ));
        };
        if n == 0 || k == 0 {
            return Err(bad_shape(
                name,
                format!("weights {wt:?} have a zero dimension"),
            ));
        }
        if bias.as_slice() != [n] {
            return Err(bad_shape(name, format!("bias {bias:?} must be [{n}]")));
        }
        let numel = checked_product(x)?;
        if numel % k != 0 {
            return Err(bad_shape(
                name,
                format!("input {x:?} has {numel} elements, not a multiple of K={k}"),
            ));
        }
        Ok(vec![vec![numel / k, n]])
    }

    fn cost(&self, inputs: &[&TensorType], outputs: &[Vec<usize>]) -> Cost {
        let out: u64 = outputs[0].iter().map(|&d| d as u64).product();
        let k = inputs[1].shape.get(1).copied().unwrap_or(1) as u64;
        Cost {
            macs: out.saturating_mul(k),
            elems: out,
        }
    }

    fn check_outputs(&self, inputs: &[&TensorType], outputs: &[&TensorType]) -> Result<()> {
        if inputs[0].dtype.is_float() {
            return default_check(inputs, outputs);
        }
        let n = inputs[1].shape.first().copied().unwrap_or(0);
        QStage::new(
            self.name(),
            self.act,
            [inputs[0], inputs[1], inputs[2], outputs[0]],
            n,
            0,
        )
        .map(|_| ())
    }

    fn run(&self, inputs: &[View<'_>], outputs: &mut [ViewMut<'_>]) -> Result<()> {
        quant_dispatch!(
            inputs,
            outputs,
            |x, f, bias, out, ty| self.run_quant(inputs, ty, x, f, bias, out),
            widen_f16(inputs, outputs, |ins, outs| {
                let (x, w, b) = (
                    Tensor::f32(&ins[0])?,
                    Tensor::f32(&ins[1])?,
                    Tensor::f32(&ins[2])?,
                );
                fully_connected_f32(self.act, x, w, b, TensorMut::f32(&mut outs[0])?)
            })
        )
    }
}

impl FullyConnected {
    /// The quantised layer on the integer core (NNAPI reference rounding).
    fn run_quant<T: QuantElem, F: QuantElem>(
        &self,
        inputs: &[View<'_>],
        out_ty: &TensorType,
        x: Tensor<'_, T>,
        w: &[F],
        bias: &[i32],
        out: TensorMut<'_, T>,
    ) -> Result<()> {
        let name = self.name();
        let ws = inputs[1].shape();
        let (n, k) = (ws[0], ws[1]);
        let stage = QStage::new(
            name,
            self.act,
            [inputs[0].ty, inputs[1].ty, inputs[2].ty, out_ty],
            n,
            0,
        )?;
        let p = FullyConnectedParams {
            batches: x.data.len() / k,
            input_size: k,
            output_size: n,
            quant: stage.params(),
        };
        qconv::fully_connected(&p, x.data, w, bias, out.data).map_err(qerr(name))
    }
}

/// The float32 layer; shapes were validated by `output_shapes`.
pub(crate) fn fully_connected_f32(
    act: Activation,
    x: Tensor<'_>,
    w: Tensor<'_>,
    bias: Tensor<'_>,
    out: TensorMut<'_>,
) -> Result<()> {
    let (n, k) = (w.shape[0], w.shape[1]);
    let m = x.data.len() / k;
    fill_bias(out.data, bias.data);
    gemm(
        m,
        k,
        n,
        Mat {
            data: x.data,
            rs: k,
            cs: 1,
        },
        Mat {
            data: w.data,
            rs: 1,
            cs: k,
        },
        1.0,
        MatMut {
            data: out.data,
            rs: n,
        },
    )?;
    act.apply_slice(out.data);
    Ok(())
}
