//! NNAPI SPACE_TO_BATCH_ND and BATCH_TO_SPACE_ND on rank-4 tensors, NHWC or NCHW. Any
//! element type; the padding of SPACE_TO_BATCH_ND is filled with a stored value (the zero
//! point for quantised tensors, 0 otherwise, as the NNAPI reference does).
//!
//! Parameter words: SPACE_TO_BATCH_ND: block height, block width (>= 1), pad top, pad
//! bottom, pad left, pad right, nchw, fill value (f32 bits). BATCH_TO_SPACE_ND: block
//! height, block width (>= 1), nchw.

use crate::kernels::kernel::{enc, Kernel, Words};
use crate::kernels::layout::{image_dims, layout_shape};
use crate::kernels::movement::pad::fill_bytes;
use crate::kernels::movement::reshape::same_storage;
use crate::kernels::movement::{copy_elems, unflatten};
use crate::kernels::{bad_shape, KernelError, Result};
use crate::tensor::{TensorType, View, ViewMut};

/// Moves spatial blocks of a (padded) image into the batch dimension.
#[derive(Debug, Clone, PartialEq)]
pub struct SpaceToBatch {
    /// Block height and width.
    pub block: [u32; 2],
    /// Padding top, bottom, left, right.
    pub pads: [u32; 4],
    /// NCHW layout (else NHWC).
    pub nchw: bool,
    /// The stored value the padding holds.
    pub value: f32,
}

/// Moves batch groups back into spatial blocks (the inverse of [`SpaceToBatch`] without
/// padding).
#[derive(Debug, Clone, PartialEq)]
pub struct BatchToSpace {
    /// Block height and width.
    pub block: [u32; 2],
    /// NCHW layout (else NHWC).
    pub nchw: bool,
}

/// Flat offset of `(n, h, w, c)` in a tensor of dims `(_, hh, ww, cc)` in the layout.
fn offset(
    nchw: bool,
    dims: (usize, usize, usize, usize),
    n: usize,
    h: usize,
    w: usize,
    c: usize,
) -> usize {
    let (_, hh, ww, cc) = dims;
    if nchw {
        ((n * cc + c) * hh + h) * ww + w
    } else {
        ((n * hh + h) * ww + w) * cc + c
    }
}

/// `(n, h, w, c)` of a multi-index in the layout.
fn nhwc_of(nchw: bool, idx: &[usize]) -> (usize, usize, usize, usize) {
    if nchw {
        (idx[0], idx[2], idx[3], idx[1])
    } else {
        (idx[0], idx[1], idx[2], idx[3])
    }
}

impl Kernel for SpaceToBatch {
    fn name(&self) -> &'static str {
        "SPACE_TO_BATCH_ND"
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        Ok(SpaceToBatch {
            block: [w.nonzero("block height")?, w.nonzero("block width")?],
            pads: [
                w.u32("pad top")?,
                w.u32("pad bottom")?,
                w.u32("pad left")?,
                w.u32("pad right")?,
            ],
            nchw: w.bool("nchw")?,
            value: w.f32("value")?,
        })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        w.extend(self.block);
        w.extend(self.pads);
        w.extend([enc::b(self.nchw), self.value.to_bits()]);
    }

    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        let x = inputs[0];
        let (n, h, w, c) = image_dims(self.name(), &x.shape, self.nchw)?;
        let [bh, bw] = self.block.map(|b| b as usize);
        let [pt, pb, pl, pr] = self.pads.map(|p| p as usize);
        let ph = h
            .checked_add(pt)
            .and_then(|v| v.checked_add(pb))
            .ok_or(KernelError::TooLarge)?;
        let pw = w
            .checked_add(pl)
            .and_then(|v| v.checked_add(pr))
            .ok_or(KernelError::TooLarge)?;
        if bh == 0 || bw == 0 || ph % bh != 0 || pw % bw != 0 {
            return Err(bad_shape(
                self.name(),
                format!("padded size {ph}x{pw} is not a multiple of block {bh}x{bw}"),
            ));
        }
        if fill_bytes(x.dtype, self.value).is_none() {
            return Err(bad_shape(
                self.name(),
                format!("pad value {} is not a {:?}", self.value, x.dtype),
            ));
        }
        let on = n
            .checked_mul(bh)
            .and_then(|v| v.checked_mul(bw))
            .ok_or(KernelError::TooLarge)?;
        Ok(vec![layout_shape(on, ph / bh, pw / bw, c, self.nchw)])
    }

    fn check_outputs(&self, inputs: &[&TensorType], outputs: &[&TensorType]) -> Result<()> {
        same_storage(self.name(), inputs[0], outputs[0])
    }

    fn run(&self, inputs: &[View<'_>], outputs: &mut [ViewMut<'_>]) -> Result<()> {
        let x = inputs[0];
        let out = &mut outputs[0];
        let es = x.ty.dtype.size() as usize;
        let fill = fill_bytes(x.ty.dtype, self.value)
            .ok_or_else(|| bad_shape(self.name(), "unrepresentable pad value"))?;
        let idims = image_dims(self.name(), x.shape(), self.nchw)?;
        let (n, h, w, _) = idims;
        let [bh, bw] = self.block.map(|b| b as usize);
        let [pt, _, pl, _] = self.pads.map(|p| p as usize);
        let oshape = out.ty.shape.clone();
        let mut idx = [0usize; 4];
        let nchw = self.nchw;
        copy_elems(es, x.bytes, out.bytes, &fill, |i| {
            unflatten(i, &oshape, &mut idx);
            let (ob, oy, ox, ch) = nhwc_of(nchw, &idx);
            let b = ob % n.max(1);
            let blk = ob / n.max(1);
            let (sh, sw) = (blk / bw, blk % bw);
            let py = (oy * bh + sh).checked_sub(pt)?;
            let px = (ox * bw + sw).checked_sub(pl)?;
            (py < h && px < w).then(|| offset(nchw, idims, b, py, px, ch))
        })
    }
}

impl Kernel for BatchToSpace {
    fn name(&self) -> &'static str {
        "BATCH_TO_SPACE_ND"
    }

    fn decode(w: &mut Words<'_>) -> Result<Self> {
        Ok(BatchToSpace {
            block: [w.nonzero("block height")?, w.nonzero("block width")?],
            nchw: w.bool("nchw")?,
        })
    }

    fn encode(&self, w: &mut Vec<u32>) {
        w.extend(self.block);
        w.push(enc::b(self.nchw));
    }

    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>> {
        let (n, h, w, c) = image_dims(self.name(), &inputs[0].shape, self.nchw)?;
        let [bh, bw] = self.block.map(|b| b as usize);
        let bb = bh.checked_mul(bw).ok_or(KernelError::TooLarge)?;
        if bb == 0 || n % bb != 0 {
            return Err(bad_shape(
                self.name(),
                format!("batch {n} is not a multiple of block {bh}x{bw}"),
            ));
        }
        let oh = h.checked_mul(bh).ok_or(KernelError::TooLarge)?;
        let ow = w.checked_mul(bw).ok_or(KernelError::TooLarge)?;
        Ok(vec![layout_shape(n / bb, oh, ow, c, self.nchw)])
    }

    fn check_outputs(&self, inputs: &[&TensorType], outputs: &[&TensorType]) -> Result<()> {
        same_storage(self.name(), inputs[0], outputs[0])
    }

    fn run(&self, inputs: &[View<'_>], outputs: &mut [ViewMut<'_>]) -> Result<()> {
        let x = inputs[0];
        let out = &mut outputs[0];
        let es = x.ty.dtype.size() as usize;
        let idims = image_dims(self.name(), x.shape(), self.nchw)?;
        let [bh, bw] = self.block.map(|b| b as usize);
        let n = idims.0 / (bh * bw).max(1);
        let oshape = out.ty.shape.clone();
        let mut idx = [0usize; 4];
        let nchw = self.nchw;
        copy_elems(es, x.bytes, out.bytes, &[], |i| {
            unflatten(i, &oshape, &mut idx);
            let (b, y, xx, ch) = nhwc_of(nchw, &idx);
            let ib = ((y % bh) * bw + xx % bw) * n + b;
            Some(offset(nchw, idims, ib, y / bh, xx / bw, ch))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_bytes<K: Kernel>(k: &K, shape: &[usize], data: &[u8]) -> (Vec<usize>, Vec<u8>) {
        let ty = TensorType::new(crate::tensor::DType::U8, shape);
        let oshape = k.output_shapes(&[&ty]).unwrap().remove(0);
        let oty = TensorType::new(crate::tensor::DType::U8, &oshape);
        let mut out = vec![0u8; oshape.iter().product()];
        k.run(
            &[View {
                ty: &ty,
                bytes: data,
            }],
            &mut [ViewMut {
                ty: &oty,
                bytes: &mut out,
            }],
        )
        .unwrap();
        (oshape, out)
    }

    #[test]
    fn space_to_batch_then_back_round_trips() {
        let data: Vec<u8> = (1..=16).collect();
        for nchw in [false, true] {
            let s2b = SpaceToBatch {
                block: [2, 2],
                pads: [0, 0, 0, 0],
                nchw,
                value: 0.0,
            };
            let ishape: &[usize] = if nchw { &[1, 1, 4, 4] } else { &[1, 4, 4, 1] };
            let (shape, mid) = run_bytes(&s2b, ishape, &data);
            let want = if nchw { [4, 1, 2, 2] } else { [4, 2, 2, 1] };
            assert_eq!(shape, want);
            assert_eq!(&mid[..4], &[1, 3, 9, 11]);
            let b2s = BatchToSpace {
                block: [2, 2],
                nchw,
            };
            let (_, back) = run_bytes(&b2s, &shape, &mid);
            assert_eq!(back, data);
        }
    }

    #[test]
    fn space_to_batch_pads_with_value() {
        // NNAPI example: [1,5,2,1] block [3,2], pads [1,0],[2,0].
        let data: Vec<u8> = (1..=10).collect();
        let k = SpaceToBatch {
            block: [3, 2],
            pads: [1, 0, 2, 0],
            nchw: false,
            value: 0.0,
        };
        let (shape, out) = run_bytes(&k, &[1, 5, 2, 1], &data);
        assert_eq!(shape, vec![6, 2, 2, 1]);
        assert_eq!(
            out,
            vec![0, 0, 0, 5, 0, 0, 0, 6, 0, 1, 0, 7, 0, 2, 0, 8, 0, 3, 0, 9, 0, 4, 0, 10]
        );
    }
}
