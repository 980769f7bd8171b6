//! NNAPI CHANNEL_SHUFFLE: the `axis` dimension, viewed as `[groups, size / groups]`, is
//! transposed to `[size / groups, groups]`. Any element type.
//!
//! Parameter words: groups (>= 1), axis (resolved, < input rank).

use crate::kernels::kernel::{Kernel, Words};
use crate::kernels::movement::reshape::same_storage;
use crate::kernels::{bad_shape, Result, MAX_RANK};
use crate::tensor::{TensorType, View, ViewMut};

/// Shuffles channel groups.
#[derive(Debug, Clone, PartialEq)]
pub struct ChannelShuffle {
    /// Number of groups.
    pub groups: u32,
    /// The axis (non-negative).
    pub axis: u32,
}

impl Kernel for ChannelShuffle {
    fn name(&self) -> &'static str {
        "CHANNEL_SHUFFLE"
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        let groups = w.nonzero("groups")?;
        let axis = w.u32("axis")?;
        if axis as usize >= MAX_RANK {
            return Err(w.err(format!("axis {axis} out of range")));
        }
        Ok(ChannelShuffle { groups, axis })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        w.extend([self.groups, self.axis]);
    }

    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        let s = &inputs[0].shape;
        let a = self.axis as usize;
        let g = self.groups as usize;
        match s.get(a) {
            Some(&c) if g > 0 && c % g == 0 => Ok(vec![s.clone()]),
            _ => Err(bad_shape(
                self.name(),
                format!("axis {a} of {s:?} not divisible into {g} groups"),
            )),
        }
    }

    fn check_outputs(&self, inputs: &[&TensorType], outputs: &[&TensorType]) -> Result<()> {
        same_storage(self.name(), inputs[0], outputs[0])
    }

    fn run(&self, inputs: &[View<'_>], outputs: &mut [ViewMut<'_>]) -> Result<()> {
        let x = inputs[0];
        let es = x.ty.dtype.size() as usize;
        let shape = x.shape();
        let a = self.axis as usize;
        let outer: usize = shape[..a].iter().product();
        let c = shape[a];
        let inner: usize = shape[a + 1..].iter().product::<usize>() * es;
        let g = self.groups as usize;
        let cpg = c / g;
        let out = &mut *outputs[0].bytes;
        for o in 0..outer {
            for oc in 0..c {
                // Output channel oc = j * groups + k reads input channel k * cpg + j.
                let ic = (oc % g) * cpg + oc / g;
                let from = (o * c + ic) * inner;
                let to = (o * c + oc) * inner;
                out[to..to + inner].copy_from_slice(&x.bytes[from..from + inner]);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::DType;

    #[test]
    fn shuffles_groups() {
        let ty = TensorType::new(DType::U8, &[1, 6]);
        let k = ChannelShuffle { groups: 2, axis: 1 };
        let data = [0u8, 1, 2, 3, 4, 5];
        let mut out = [0u8; 6];
        k.run(
            &[View {
                ty: &ty,
                bytes: &data,
            }],
            &mut [ViewMut {
                ty: &ty,
                bytes: &mut out,
            }],
        )
        .unwrap();
        assert_eq!(out, [0, 3, 1, 4, 2, 5]);
    }
}
