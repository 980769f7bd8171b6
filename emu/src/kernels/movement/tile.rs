//! NNAPI TILE: the input repeated `multiples[d]` times along each dimension `d`. Any
//! element type.
//!
//! Parameter words: multiples (a list, one per input dimension, each >= 1).

use crate::kernels::kernel::{enc, Kernel, Words};
use crate::kernels::movement::copy_by_axis;
use crate::kernels::movement::reshape::same_storage;
use crate::kernels::{bad_shape, KernelError, Result, MAX_RANK};
use crate::tensor::{TensorType, View, ViewMut};

/// Repeats the input along each dimension.
#[derive(Debug, Clone, PartialEq)]
pub struct Tile {
    /// Repetitions per dimension.
    pub multiples: Vec<u32>,
}

impl Kernel for Tile {
    fn name(&self) -> &'static str {
        "TILE"
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        let multiples = w.list("rank", MAX_RANK)?;
        if multiples.contains(&0) {
            return Err(w.err("multiples must be at least 1"));
        }
        Ok(Tile { multiples })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        enc::list(w, self.multiples.iter().copied());
    }

    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        let s = &inputs[0].shape;
        if s.len() != self.multiples.len() {
            return Err(bad_shape(
                self.name(),
                format!("{} multiples for rank {}", self.multiples.len(), s.len()),
            ));
        }
        let out = s
            .iter()
            .zip(&self.multiples)
            .map(|(&d, &m)| d.checked_mul(m as usize).ok_or(KernelError::TooLarge))
            .collect::<Result<_>>()?;
        Ok(vec![out])
    }

    fn check_outputs(&self, inputs: &[&TensorType], outputs: &[&TensorType]) -> Result<()> {
        same_storage(self.name(), inputs[0], outputs[0])
    }

    fn run(&self, inputs: &[View<'_>], outputs: &mut [ViewMut<'_>]) -> Result<()> {
        copy_by_axis(inputs[0], &mut outputs[0], |_, k, d| k % d.max(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::DType;

    #[test]
    fn tiles_rows_and_columns() {
        let ty = TensorType::new(DType::U8, &[2, 2]);
        let k = Tile {
            multiples: vec![1, 2],
        };
        let oshape = k.output_shapes(&[&ty]).unwrap().remove(0);
        let oty = TensorType::new(DType::U8, &oshape);
        let mut out = [0u8; 8];
        k.run(
            &[View {
                ty: &ty,
                bytes: &[1, 2, 3, 4],
            }],
            &mut [ViewMut {
                ty: &oty,
                bytes: &mut out,
            }],
        )
        .unwrap();
        assert_eq!(out, [1, 2, 1, 2, 3, 4, 3, 4]);
    }
}
