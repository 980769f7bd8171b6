//! NNAPI MIRROR_PAD (feature level 7): each dimension padded with a mirror image of the
//! input's edge, `(before, after)` elements on each side. REFLECT mirrors about the edge
//! element (it is not repeated, so a pad is at most `dim - 1`); SYMMETRIC mirrors about
//! the edge itself (the edge element repeats, so a pad is at most `dim`). Any element
//! type: elements are only moved.
//!
//! Parameter words: mode (0 REFLECT, 1 SYMMETRIC), pads (list of `(before, after)`
//! pairs, `2*rank` words after the count `rank`).

use crate::kernels::kernel::{Kernel, Words};
use crate::kernels::movement::copy_by_axis;
use crate::kernels::movement::reshape::same_storage;
use crate::kernels::{bad_shape, KernelError, Result, MAX_RANK};
use crate::tensor::{TensorType, View, ViewMut};

/// Mirror padding of every dimension.
#[derive(Debug, Clone, PartialEq)]
pub struct MirrorPad {
    /// SYMMETRIC (the edge element repeats) rather than REFLECT.
    pub symmetric: bool,
    /// `(before, after)` per dimension.
    pub pads: Vec<(u32, u32)>,
}

impl MirrorPad {
    /// The input coordinate output coordinate `k` of a dimension of `dim` elements reads,
    /// `before` of them padded on the left (shapes checked: every pad fits the mode).
    fn source(&self, k: usize, before: usize, dim: usize) -> usize {
        let skip = usize::from(!self.symmetric);
        if k < before {
            // Left pad: mirrored from the left edge.
            before - 1 - k + skip
        } else if k - before < dim {
            k - before
        } else {
            // Right pad: mirrored from the right edge.
            let past = k - before - dim;
            dim - 1 - past - skip
        }
    }
}

impl Kernel for MirrorPad {
    fn name(&self) -> &'static str {
        "MIRROR_PAD"
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        let symmetric = match w.u32("mode")? {
            0 => false,
            1 => true,
            m => return Err(w.err(format!("mode {m} is neither REFLECT (0) nor SYMMETRIC (1)"))),
        };
        let n = w.len("rank", MAX_RANK)?;
        if n == 0 {
            return Err(w.err("rank must be at least 1"));
        }
        let mut pads = Vec::with_capacity(n);
        for _ in 0..n {
            pads.push((w.u32("pad before")?, w.u32("pad after")?));
        }
        Ok(MirrorPad { symmetric, pads })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        w.push(u32::from(self.symmetric));
        w.push(self.pads.len() as u32);
        for (before, after) in &self.pads {
            w.extend([*before, *after]);
        }
    }

    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        let s = &inputs[0].shape;
        if s.len() != self.pads.len() {
            return Err(bad_shape(
                self.name(),
                format!("{} pads for rank {}", self.pads.len(), s.len()),
            ));
        }
        let most = |d: usize| {
            if self.symmetric {
                d
            } else {
                d.saturating_sub(1)
            }
        };
        s.iter()
            .zip(&self.pads)
            .map(|(&d, &(b, a))| {
                let (b, a) = (b as usize, a as usize);
                if b > most(d) || a > most(d) {
                    return Err(bad_shape(
                        self.name(),
                        format!("pads ({b}, {a}) of a dimension of {d} exceed {}", most(d)),
                    ));
                }
                d.checked_add(b)
                    .and_then(|n| n.checked_add(a))
                    .ok_or(KernelError::TooLarge)
            })
            .collect::<Result<Vec<usize>>>()
            .map(|out| vec![out])
    }

    fn check_outputs(&self, inputs: &[&TensorType], outputs: &[&TensorType]) -> Result<()> {
        same_storage(self.name(), inputs[0], outputs[0])
    }

    fn run(&self, inputs: &[View<'_>], outputs: &mut [ViewMut<'_>]) -> Result<()> {
        copy_by_axis(inputs[0], &mut outputs[0], |a, k, d| {
            self.source(k, self.pads[a].0 as usize, d)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::KernelOp;
    use crate::tensor::DType;

    fn pad(symmetric: bool, pads: Vec<(u32, u32)>, shape: &[usize], x: &[u8]) -> Result<Vec<u8>> {
        let k = MirrorPad { symmetric, pads };
        let ty = TensorType::new(DType::U8, shape);
        let oshape = k.output_shapes(&[&ty])?.remove(0);
        let oty = TensorType::new(DType::U8, &oshape);
        let mut out = vec![0u8; oty.shape.iter().product()];
        k.run(
            &[View { ty: &ty, bytes: x }],
            &mut [ViewMut {
                ty: &oty,
                bytes: &mut out,
            }],
        )?;
        Ok(out)
    }

    #[test]
    fn reflect_and_symmetric_rows() {
        // numpy.pad([1, 2, 3], (2, 2), mode="reflect") and mode="symmetric".
        assert_eq!(
            pad(false, vec![(2, 2)], &[3], &[1, 2, 3]).unwrap(),
            [3, 2, 1, 2, 3, 2, 1]
        );
        assert_eq!(
            pad(true, vec![(2, 2)], &[3], &[1, 2, 3]).unwrap(),
            [2, 1, 1, 2, 3, 3, 2]
        );
        assert_eq!(
            pad(true, vec![(3, 3)], &[3], &[1, 2, 3]).unwrap(),
            [3, 2, 1, 1, 2, 3, 3, 2, 1]
        );
    }

    #[test]
    fn pads_both_dimensions() {
        // numpy.pad([[1, 2], [3, 4]], ((1, 0), (0, 1)), mode="reflect").
        assert_eq!(
            pad(false, vec![(1, 0), (0, 1)], &[2, 2], &[1, 2, 3, 4]).unwrap(),
            [3, 4, 3, 1, 2, 1, 3, 4, 3]
        );
    }

    #[test]
    fn oversized_pads_are_refused() {
        assert!(pad(false, vec![(3, 0)], &[3], &[1, 2, 3]).is_err());
        assert!(pad(true, vec![(0, 4)], &[3], &[1, 2, 3]).is_err());
        assert!(pad(false, vec![(1, 0)], &[1], &[1]).is_err());
    }

    #[test]
    fn encodes_and_decodes() {
        let k = MirrorPad {
            symmetric: true,
            pads: vec![(1, 2), (0, 3)],
        };
        let op = KernelOp::from(k.clone());
        let mut w = Vec::new();
        op.kernel().encode(&mut w);
        assert_eq!(KernelOp::decode(op.opcode(), &w).unwrap(), op);
        assert!(KernelOp::decode(op.opcode(), &[2, 1, 0, 0]).is_err());
    }
}
