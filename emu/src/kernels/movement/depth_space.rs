//! NNAPI DEPTH_TO_SPACE and SPACE_TO_DEPTH, NHWC or NCHW. Any element type.
//!
//! Parameter words (both): block (>= 1), nchw.

use crate::kernels::kernel::{enc, Kernel, Words};
use crate::kernels::layout::{by_size, image_dims, layout_shape, with_nhwc};
use crate::kernels::movement::reshape::same_storage;
use crate::kernels::{bad_shape, KernelError, Result, Tensor, TensorMut};
use crate::tensor::{TensorType, View, ViewMut};

/// Moves `block x block` channel groups into spatial blocks.
#[derive(Debug, Clone, PartialEq)]
pub struct DepthToSpace {
    /// The block size.
    pub block: u32,
    /// NCHW layout (else NHWC).
    pub nchw: bool,
}

/// Moves spatial `block x block` blocks into channels.
#[derive(Debug, Clone, PartialEq)]
pub struct SpaceToDepth {
    /// The block size.
    pub block: u32,
    /// NCHW layout (else NHWC).
    pub nchw: bool,
}

impl Kernel for DepthToSpace {
    fn name(&self) -> &'static str {
        "DEPTH_TO_SPACE"
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        Ok(DepthToSpace {
            block: w.nonzero("block")?,
            nchw: w.bool("nchw")?,
        })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        w.extend([self.block, enc::b(self.nchw)]);
    }

    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        let b = self.block as usize;
        let (n, h, w, c) = image_dims(self.name(), &inputs[0].shape, self.nchw)?;
        let bb = b.checked_mul(b).ok_or(KernelError::TooLarge)?;
        if b == 0 || c % bb != 0 {
            return Err(bad_shape(
                self.name(),
                format!("channels {c} not divisible by block^2 = {bb}"),
            ));
        }
        let oh = h.checked_mul(b).ok_or(KernelError::TooLarge)?;
        let ow = w.checked_mul(b).ok_or(KernelError::TooLarge)?;
        Ok(vec![layout_shape(n, oh, ow, c / bb, self.nchw)])
    }

    fn check_outputs(&self, inputs: &[&TensorType], outputs: &[&TensorType]) -> Result<()> {
        same_storage(self.name(), inputs[0], outputs[0])
    }

    fn run(&self, inputs: &[View<'_>], outputs: &mut [ViewMut<'_>]) -> Result<()> {
        let (x, out) = (inputs[0], &mut outputs[0]);
        let (n, h, w, c) = image_dims(self.name(), x.shape(), self.nchw)?;
        let b = self.block as usize;
        let oc = c / (b * b);
        let shapes = (x.shape(), out.ty.shape.as_slice());
        by_size!(x.ty.dtype.size(), x.bytes, &mut *out.bytes, |s, d| {
            let xt = Tensor {
                shape: shapes.0,
                data: s,
            };
            let ot = TensorMut {
                shape: shapes.1,
                data: d,
            };
            with_nhwc(self.nchw, xt, ot, |src, dst| {
                let mut pos = 0;
                for bi in 0..n {
                    for y in 0..h {
                        for dy in 0..b {
                            for xx in 0..w {
                                for dx in 0..b {
                                    let at = ((bi * h + y) * w + xx) * c + (dy * b + dx) * oc;
                                    dst[pos..pos + oc].copy_from_slice(&src[at..at + oc]);
                                    pos += oc;
                                }
                            }
                        }
                    }
                }
                Ok(())
            })
        })
    }
}

impl Kernel for SpaceToDepth {
    fn name(&self) -> &'static str {
        "SPACE_TO_DEPTH"
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        Ok(SpaceToDepth {
            block: w.nonzero("block")?,
            nchw: w.bool("nchw")?,
        })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        w.extend([self.block, enc::b(self.nchw)]);
    }

    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        let b = self.block as usize;
        let (n, h, w, c) = image_dims(self.name(), &inputs[0].shape, self.nchw)?;
        if b == 0 || h % b != 0 || w % b != 0 {
            return Err(bad_shape(
                self.name(),
                format!("height {h} and width {w} must be multiples of block {b}"),
            ));
        }
        let bb = b.checked_mul(b).ok_or(KernelError::TooLarge)?;
        let oc = c.checked_mul(bb).ok_or(KernelError::TooLarge)?;
        Ok(vec![layout_shape(n, h / b, w / b, oc, self.nchw)])
    }

    fn check_outputs(&self, inputs: &[&TensorType], outputs: &[&TensorType]) -> Result<()> {
        same_storage(self.name(), inputs[0], outputs[0])
    }

    fn run(&self, inputs: &[View<'_>], outputs: &mut [ViewMut<'_>]) -> Result<()> {
        let (x, out) = (inputs[0], &mut outputs[0]);
        let (n, h, w, c) = image_dims(self.name(), x.shape(), self.nchw)?;
        let b = self.block as usize;
        let (oh, ow) = (h / b, w / b);
        let shapes = (x.shape(), out.ty.shape.as_slice());
        by_size!(x.ty.dtype.size(), x.bytes, &mut *out.bytes, |s, d| {
            let xt = Tensor {
                shape: shapes.0,
                data: s,
            };
            let ot = TensorMut {
                shape: shapes.1,
                data: d,
            };
            with_nhwc(self.nchw, xt, ot, |src, dst| {
                let mut pos = 0;
                for bi in 0..n {
                    for y in 0..oh {
                        for xx in 0..ow {
                            for dy in 0..b {
                                for dx in 0..b {
                                    let at = ((bi * h + y * b + dy) * w + xx * b + dx) * c;
                                    dst[pos..pos + c].copy_from_slice(&src[at..at + c]);
                                    pos += c;
                                }
                            }
                        }
                    }
                }
                Ok(())
            })
        })
    }
}
