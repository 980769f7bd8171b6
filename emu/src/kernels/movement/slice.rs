//! NNAPI SLICE whose `begin` and `size` are tensors computed on the device (a loop
//! counter's slice of a growing state, say), so the output shape depends on their values:
//! per dimension, `size` elements from `begin` (`size` -1: to the end). The output's
//! capacity is the input's shape; the kernel reports the real shape. Any element type.
//!
//! When the sizes are known when compiling (only `begin` moves), the output shape is
//! static: `size` given in the parameters, which the run-time `size` must then equal.
//!
//! Inputs: input, begin (int32 `[rank]`), size (int32 `[rank]`). Parameter words: a
//! flag (0: sizes known at run time only; 1: static), then for a static one the output
//! shape (a list).

use crate::kernels::kernel::{Kernel, Words};
use crate::kernels::layout::strides;
use crate::kernels::movement::reshape::same_storage;
use crate::kernels::movement::{copy_elems, unflatten};
use crate::kernels::{bad_shape, KernelError, Result};
use crate::tensor::{DType, TensorType, View, ViewMut};

/// SLICE with run-time begin and size.
#[derive(Debug, Clone, PartialEq)]
pub struct RuntimeSlice {
    /// The output shape, when the sizes are known in advance.
    pub shape: Option<Vec<u32>>,
}

impl RuntimeSlice {
    /// Per dimension, the first index and the count, checked against `shape`.
    fn window(&self, shape: &[usize], begin: &[i32], size: &[i32]) -> Result<Vec<(usize, usize)>> {
        shape
            .iter()
            .zip(begin.iter().zip(size))
            .map(|(&d, (&b, &s))| {
                let d = d as i64;
                let (b, s) = (i64::from(b), i64::from(s));
                let count = if s == -1 { d - b } else { s };
                if b < 0 || count < 0 || b + count > d {
                    return Err(bad_shape(
                        self.name(),
                        format!("slice begin {b} size {s} of a dimension {d}"),
                    ));
                }
                Ok((b as usize, count as usize))
            })
            .collect()
    }
}

impl Kernel for RuntimeSlice {
    fn name(&self) -> &'static str {
        "SLICE"
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        let shape = match w.bool("static")? {
            true => Some(w.list("rank", crate::kernels::MAX_RANK)?),
            false => None,
        };
        Ok(RuntimeSlice { shape })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        match &self.shape {
            Some(s) => {
                w.push(1);
                crate::kernels::kernel::enc::list(w, s.iter().copied());
            }
            None => w.push(0),
        }
    }

    fn input_count(&self) -> std::ops::RangeInclusive<usize> {
        3..=3
    }

    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        let rank = inputs[0].shape.len();
        for t in &inputs[1..] {
            if t.dtype != DType::I32 {
                return Err(KernelError::DType {
                    expected: DType::I32,
                    got: t.dtype,
                });
            }
            if t.shape != [rank] {
                return Err(bad_shape(
                    self.name(),
                    "begin and size must hold one value per dimension",
                ));
            }
        }
        match &self.shape {
            Some(s) if s.len() != rank => Err(bad_shape(
                self.name(),
                "the output shape's rank differs from the input's",
            )),
            Some(s) => Ok(vec![s.iter().map(|&d| d as usize).collect()]),
            None => Ok(vec![inputs[0].shape.clone()]),
        }
    }

    fn check_outputs(&self, inputs: &[&TensorType], outputs: &[&TensorType]) -> Result<()> {
        same_storage(self.name(), inputs[0], outputs[0])
    }

    fn shapes_depend_on_values(&self) -> bool {
        self.shape.is_none()
    }

    fn run(&self, inputs: &[View<'_>], outputs: &mut [ViewMut<'_>]) -> Result<()> {
        self.run_sized(inputs, outputs).map(|_| ())
    }

    fn run_sized(
        &self,
        inputs: &[View<'_>],
        outputs: &mut [ViewMut<'_>],
    ) -> Result<Option<Vec<Vec<usize>>>> {
        let x = inputs[0];
        let shape = x.shape();
        let win = self.window(shape, inputs[1].i32s()?, inputs[2].i32s()?)?;
        let real: Vec<usize> = win.iter().map(|&(_, c)| c).collect();
        if let Some(s) = &self.shape {
            if !s.iter().map(|&d| d as usize).eq(real.iter().copied()) {
                return Err(bad_shape(
                    self.name(),
                    "size differs from the compiled shape",
                ));
            }
        }
        let n: usize = real.iter().product();
        let es = x.ty.dtype.size() as usize;
        let from = strides(shape);
        let mut idx = vec![0usize; shape.len()];
        let out = outputs[0]
            .bytes
            .get_mut(..n * es)
            .ok_or(KernelError::TooLarge)?;
        copy_elems(es, x.bytes, out, &[], |i| {
            unflatten(i, &real, &mut idx);
            Some(
                idx.iter()
                    .zip(&win)
                    .zip(&from)
                    .map(|((&k, &(b, _)), &s)| (b + k) * s)
                    .sum(),
            )
        })?;
        Ok(self.shape.is_none().then(|| vec![real]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::{execute, KernelOp};
    use crate::tensor::Staged;

    #[test]
    fn slices_by_runtime_values_and_reports_the_shape() {
        let x: Vec<f32> = (0..12).map(|v| v as f32).collect();
        let tys = [
            TensorType::new(DType::F32, &[3, 4]),
            TensorType::new(DType::I32, &[2]),
            TensorType::new(DType::I32, &[2]),
        ];
        let bytes = [
            bytemuck::cast_slice::<f32, u8>(&x).to_vec(),
            bytemuck::cast_slice::<i32, u8>(&[1, 1]).to_vec(),
            bytemuck::cast_slice::<i32, u8>(&[2, -1]).to_vec(),
        ];
        let views: Vec<View<'_>> = tys
            .iter()
            .zip(&bytes)
            .map(|(ty, b)| View { ty, bytes: b })
            .collect();
        let out_ty = TensorType::new(DType::F32, &[3, 4]);
        let mut out = Staged::zeroed(48);
        let op = KernelOp::from(RuntimeSlice { shape: None });
        let real = execute(
            &op,
            &views,
            &mut [ViewMut {
                ty: &out_ty,
                bytes: out.bytes_mut(),
            }],
        )
        .unwrap();
        assert_eq!(real, Some(vec![vec![2, 3]]));
        let got: &[f32] = bytemuck::cast_slice(&out.bytes()[..24]);
        assert_eq!(got, [5.0, 6.0, 7.0, 9.0, 10.0, 11.0]);
    }

    #[test]
    fn a_window_past_the_input_is_an_error() {
        let k = RuntimeSlice { shape: None };
        assert!(k.window(&[3], &[2], &[2]).is_err());
        assert!(k.window(&[3], &[-1], &[1]).is_err());
    }
}
