//! NNAPI FULLY_CONNECTED: input (rank >= 2, flattened to `[numel/K, K]`), weights `[N,K]`,
//! bias `[N]`; output `[B,N]`. float32 on the GEMM; float16 computes in float32; quantised
//! tensors run on the integer core [`qconv::fully_connected`](crate::kernels::qconv::fully_connected).
//!
//! Parameter words: act.

use crate::kernels::conv::{
    check_conv_types, conv_cost, conv_kernel_methods, qerr, ConvArgs, ConvCore, QStage,
};
use crate::kernels::gemm::{gemm_f32, gemm_packed, Mat, MatMut, Packed};
use crate::kernels::kernel::{Cost, Kernel, Words};
use crate::kernels::qconv::{self, FullyConnectedParams};
use crate::kernels::quant::QuantElem;
use crate::kernels::{bad_shape, checked_product, Activation, Result, Tensor, TensorMut};
use crate::tensor::TensorType;

/// A fully connected layer.
#[derive(Debug, Clone, PartialEq)]
pub struct FullyConnected {
    /// Fused activation.
    pub act: Activation,
}

impl Kernel for FullyConnected {
    crate::kernels::kernel::fused_activation_field!();

    fn name(&self) -> &'static str {
        "FULLY_CONNECTED"
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        Ok(FullyConnected { act: w.act()? })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        w.push(self.act as u32);
    }

    conv_kernel_methods!();

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
        conv_cost(outputs, inputs[1].shape.get(1..).unwrap_or_default())
    }
}

impl ConvCore for FullyConnected {
    const CHANNEL_AXIS: usize = 0;

    fn activation(&self) -> Activation {
        self.act
    }

    fn run_f32(&self, a: ConvArgs<'_>) -> Result<()> {
        let ConvArgs { x, f: w, bias, out } = a;
        fully_connected_f32(self.act, x, w, bias, out)
    }

    fn run_f32_packed(&self, a: ConvArgs<'_>) -> Result<()> {
        let ConvArgs { x, f: w, bias, out } = a;
        let (n, k) = (w.shape[0], w.shape[1]);
        let m = x.data.len() / k;
        let a = Mat {
            data: x.data,
            rs: k,
            cs: 1,
        };
        let panels = Packed { data: w.data, k, n };
        gemm_packed(
            m,
            a,
            panels,
            MatMut {
                data: out.data,
                rs: n,
            },
            Some(bias),
            self.act.clamp(),
        )?;
        Ok(())
    }

    /// The quantised layer on the integer core.
    fn run_quant<T: QuantElem + Default, F: QuantElem>(
        &self,
        stage: &QStage,
        a: ConvArgs<'_, T, F, i32>,
    ) -> Result<()> {
        let ConvArgs { x, f: w, bias, out } = a;
        let (n, k) = (w.shape[0], w.shape[1]);
        let p = FullyConnectedParams {
            batches: x.data.len() / k,
            input_size: k,
            output_size: n,
            quant: stage.params(),
        };
        qconv::fully_connected(&p, x.data, w.data, bias, out.data).map_err(qerr(self.name()))
    }
}

/// The float32 layer; shapes were validated by `output_shapes`.
pub(crate) fn fully_connected_f32(
    act: Activation,
    x: Tensor<'_>,
    w: Tensor<'_>,
    bias: &[f32],
    out: TensorMut<'_>,
) -> Result<()> {
    let (n, k) = (w.shape[0], w.shape[1]);
    let m = x.data.len() / k;
    gemm_f32(
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
        MatMut {
            data: out.data,
            rs: n,
        },
        Some(bias),
        act.clamp(),
    )?;
    Ok(())
}
