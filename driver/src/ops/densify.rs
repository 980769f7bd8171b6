//! DENSIFY (NNAPI experimental, operation 20000; only an interface with experimental
//! features knows it): a sparse tensor (TACO-style format: traversal order, block map,
//! per-dimension DENSE or SPARSE_CSR format with segments and indices) expanded to a dense
//! one. The compiler walks the metadata, which it reads (constants, or model inputs at
//! execution), into the flat output position of each stored value, exactly as the NNAPI
//! reference visits them; the device's SCATTER fills the output with zero (the zero point
//! of an asymmetric type) and places the values.
//!
//! Inputs: values (rank 1), traversal order, block map, dimension formats, dimensions,
//! then one (segments, indices) pair per traversed dimension (empty for a DENSE one).

use vnpu_emu::kernels::{Scatter, MAX_ELEMENTS, MAX_RANK};

use super::{arg, Arg, Args, HalVersion::*, OpDef, Signature, Ty};
use super::{CompileError, Lowered};
use crate::hal::{Operand, OperandType as T, OperationType};

/// The element types the HAL allows.
const TYPES: &[T] = &[
    T::TENSOR_FLOAT16,
    T::TENSOR_FLOAT32,
    T::TENSOR_QUANT8_SYMM,
    T::TENSOR_QUANT8_ASYMM,
    T::TENSOR_QUANT8_ASYMM_SIGNED,
    T::TENSOR_BOOL8,
    T::TENSOR_INT32,
    T::TENSOR_QUANT16_SYMM,
    T::TENSOR_QUANT16_ASYMM,
];

const INPUTS: &[Arg] = &[
    arg("values", Ty::T),
    arg("traversal_order", Ty::Ints),
    arg("block_map", Ty::Ints),
    arg("dim_format", Ty::Ints),
    arg("dimensions", Ty::Ints),
];

const PAIR: &[Arg] = &[arg("segments", Ty::Ints), arg("indices", Ty::Ints)];

/// One pair per traversed dimension: at most a full rank of dimensions, each blocked.
const PAIRS: &[&[Arg]] = &[PAIR; 2 * MAX_RANK];

/// SPARSE_CSR in the dimension formats (DENSE is 0).
const SPARSE_CSR: i32 = 1;

/// What the NNAPI validator checks: one metadata pair per traversed dimension, every
/// input a vector.
fn check(ins: &[&Operand], _outs: &[&Operand]) -> Result<(), String> {
    let traversed = match ins[1].dimensions[..] {
        [n] => n as usize,
        ref d => {
            return Err(format!(
                "traversal order has dimensions {d:?}, not a vector"
            ))
        }
    };
    if ins.len() != INPUTS.len() + 2 * traversed {
        return Err(format!(
            "{} inputs for {traversed} traversed dimensions (needs {})",
            ins.len(),
            INPUTS.len() + 2 * traversed
        ));
    }
    if let Some(k) = ins.iter().position(|o| o.dimensions.len() != 1) {
        return Err(format!(
            "input {k} has dimensions {:?}, not a vector",
            ins[k].dimensions
        ));
    }
    Ok(())
}

/// The sparse format's metadata, read and checked: every index the walk uses is in range.
struct Format {
    traversal: Vec<usize>,
    block_map: Vec<usize>,
    /// Per traversed dimension: `None` for DENSE, else (segments, indices).
    levels: Vec<Option<(Vec<i32>, Vec<i32>)>>,
    dims: Vec<usize>,
    /// The dense output's shape.
    shape: Vec<usize>,
    /// Each block dimension's size (the reference's `blockSize`).
    block_size: Vec<usize>,
}

impl Format {
    fn read(a: &Args<'_>) -> Result<Format, CompileError> {
        // A metadata tensor the request leaves out is empty (a DENSE dimension's pair).
        let ints = |i: Option<u32>| i.map_or(Ok(Vec::new()), |i| a.operands.tensor_i32(i));
        let index = |v: i32, below: usize, what: &str| {
            usize::try_from(v)
                .ok()
                .filter(|&v| v < below)
                .ok_or_else(|| a.invalid(format!("{what} {v} outside 0..{below}")))
        };
        let traversal = a.ints("traversal_order")?;
        let block_map = ints(a.get("block_map"))?;
        let format = a.ints("dim_format")?;
        let dims = a.ints("dimensions")?;
        let nk = traversal.len();
        let k = block_map.len();
        if nk == 0 || nk > 2 * MAX_RANK || k > nk / 2 || format.len() != nk || dims.len() != nk {
            return Err(a.invalid(format!(
                "traversal order {traversal:?}, block map {block_map:?}, formats {format:?}, \
                 dimensions {dims:?} do not agree"
            )));
        }
        let n = nk - k;
        if n > MAX_RANK {
            return Err(a.invalid(format!("a dense tensor of rank {n}")));
        }
        let traversal = traversal
            .iter()
            .map(|&t| index(t, nk, "traversal order entry"))
            .collect::<Result<Vec<_>, _>>()?;
        let mut seen = vec![false; nk];
        for (i, &t) in traversal.iter().enumerate() {
            // The first n entries order the tensor's dimensions, the rest the block's.
            if (i < n) != (t < n) || std::mem::replace(&mut seen[t], true) {
                return Err(a.invalid(format!("traversal order {traversal:?} for rank {n}")));
            }
        }
        let block_map = block_map
            .iter()
            .map(|&b| index(b, n, "block map entry"))
            .collect::<Result<Vec<_>, _>>()?;
        let dims = dims
            .iter()
            .map(|&d| index(d, MAX_ELEMENTS + 1, "dimension"))
            .collect::<Result<Vec<_>, _>>()?;
        let (segments, indices) = (a.all("segments"), a.all("indices"));
        if segments.len() != nk || indices.len() != nk {
            return Err(a.invalid(format!(
                "{} metadata pairs for {nk} dimensions",
                segments.len()
            )));
        }
        let mut levels = Vec::with_capacity(nk);
        for (level, &f) in format.iter().enumerate() {
            levels.push(match f {
                0 => None,
                SPARSE_CSR => {
                    let given = |i: u32| (!a.operands.omitted(i)).then_some(i);
                    Some((ints(given(segments[level]))?, ints(given(indices[level]))?))
                }
                f => return Err(a.invalid(format!("dimension format {f} (0 DENSE, 1 SPARSE_CSR)"))),
            });
        }
        // The output's shape as the reference derives it.
        let mut shape = vec![0usize; n];
        for i in 0..n {
            shape[traversal[i]] = dims[i];
        }
        for i in n..nk {
            let d = block_map[traversal[i] - n];
            shape[d] = shape[d]
                .checked_mul(dims[i])
                .filter(|&s| s <= MAX_ELEMENTS)
                .ok_or_else(|| a.invalid("output too large"))?;
        }
        let block_size = (0..k).map(|j| dims[traversal[n + j]]).collect();
        Ok(Format {
            traversal,
            block_map,
            levels,
            dims,
            shape,
            block_size,
        })
    }

    /// The flat output position of each of `count` values (`Scatter::SKIP`: a value no
    /// path reaches), visiting paths in the reference's order.
    fn positions(&self, count: usize) -> Result<Vec<u32>, String> {
        // Every level of a well-formed format has at most as many paths as there are
        // values or segments.
        let metadata: usize = self
            .levels
            .iter()
            .flatten()
            .map(|(s, i)| s.len() + i.len())
            .sum();
        let budget = (count + metadata + 1)
            .saturating_mul(self.traversal.len() + 1)
            .min(MAX_ELEMENTS);
        let mut walk = Walk {
            f: self,
            indices: vec![0; self.traversal.len()],
            positions: vec![Scatter::SKIP; count],
            budget,
        };
        walk.visit(0, 0)?;
        Ok(walk.positions)
    }
}

/// The reference's recursive `populate`, writing positions instead of values.
struct Walk<'f> {
    f: &'f Format,
    indices: Vec<usize>,
    positions: Vec<u32>,
    /// Steps left: metadata can describe far more paths than any output holds.
    budget: usize,
}

impl Walk<'_> {
    fn visit(&mut self, level: usize, prev: usize) -> Result<(), String> {
        self.budget = self
            .budget
            .checked_sub(1)
            .ok_or("the sparse format describes more paths than it stores values")?;
        let f = self.f;
        if level == f.traversal.len() {
            return self.place(prev);
        }
        match &f.levels[level] {
            None => {
                let size = f.dims[level];
                for i in 0..size {
                    self.indices[level] = i;
                    let next = prev
                        .checked_mul(size)
                        .and_then(|p| p.checked_add(i))
                        .ok_or("value index overflows")?;
                    self.visit(level + 1, next)?;
                }
            }
            Some((segments, indices)) => {
                let bound = |i: usize| {
                    segments
                        .get(i)
                        .and_then(|&s| usize::try_from(s).ok())
                        .ok_or_else(|| format!("segment {i} of dimension {level} out of range"))
                };
                let (from, to) = (bound(prev)?, bound(prev + 1)?);
                for i in from..to {
                    let at = indices
                        .get(i)
                        .and_then(|&x| usize::try_from(x).ok())
                        .ok_or_else(|| format!("index {i} of dimension {level} out of range"))?;
                    self.indices[level] = at;
                    self.visit(level + 1, i)?;
                }
            }
        }
        Ok(())
    }

    /// Records where value `value` goes, from the indices along the path.
    fn place(&mut self, value: usize) -> Result<(), String> {
        let f = self.f;
        let n = f.shape.len();
        let mut orig = vec![0usize; n];
        for i in 0..n {
            orig[f.traversal[i]] = self.indices[i];
        }
        for i in n..f.traversal.len() {
            let b = f.traversal[i] - n;
            let d = f.block_map[b];
            orig[d] = orig[d]
                .checked_mul(f.block_size[b])
                .and_then(|v| v.checked_add(self.indices[i]))
                .ok_or("index overflows")?;
        }
        let mut flat = 0usize;
        for (&x, &d) in orig.iter().zip(&f.shape) {
            if x >= d {
                return Err(format!("index {orig:?} outside the shape {:?}", f.shape));
            }
            flat = flat * d + x;
        }
        let stored = self.positions.len();
        let slot = self
            .positions
            .get_mut(value)
            .ok_or_else(|| format!("value {value} read, of {stored} stored"))?;
        if *slot != Scatter::SKIP {
            return Err(format!("value {value} placed twice"));
        }
        *slot = flat as u32;
        Ok(())
    }
}

fn lower(a: &Args<'_>) -> Result<Lowered, CompileError> {
    let count = match a.shape("values")? {
        [n] => *n,
        s => return Err(a.invalid(format!("values of shape {s:?}, not a vector"))),
    };
    let format = Format::read(a)?;
    let positions = format.positions(count).map_err(|e| a.invalid(e))?;
    let values = a.operands.operand(a.input("values")?)?;
    // The reference fills with the zero point of the asymmetric types, 0 otherwise.
    let fill = match values.r#type {
        T::TENSOR_QUANT8_ASYMM | T::TENSOR_QUANT8_ASYMM_SIGNED | T::TENSOR_QUANT16_ASYMM => {
            values.zero_point as f32
        }
        _ => 0.0,
    };
    let op = Scatter {
        fill,
        shape: format.shape.iter().map(|&d| d as u32).collect(),
        positions,
    };
    a.kernel(op, &["values"])
}

/// DENSIFY.
pub const DENSIFY: OpDef = OpDef {
    op: OperationType::DENSIFY,
    signatures: &[
        Signature::new(Experimental, TYPES, INPUTS, &[arg("output", Ty::T)]).optional(PAIRS),
    ],
    check: Some(check),
    runs: TYPES,
    lower: Some(lower),
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hal::builder::ModelBuilder;
    use crate::hal::HalVersion;
    use crate::ops::testing::{check, ints};

    /// densify_1's model: a dense 3x4 float32 matrix stored row by row; `pairs` metadata
    /// pairs after the five fixed inputs.
    fn model(traversal_dims: &[u32], pairs: usize) -> crate::hal::Model {
        let mut b = ModelBuilder::default();
        let values = b.input(T::TENSOR_FLOAT32, &[12]);
        let traversal = ints(
            &mut b,
            traversal_dims,
            &[0, 1][..traversal_dims.iter().product::<u32>() as usize],
        );
        let block_map = b.input(T::TENSOR_INT32, &[0]);
        let format = ints(&mut b, &[2], &[0, 0]);
        let dims = ints(&mut b, &[2], &[3, 4]);
        let mut ins = vec![values, traversal, block_map, format, dims];
        for _ in 0..2 * pairs {
            ins.push(b.input(T::TENSOR_INT32, &[0]));
        }
        let o = b.output(T::TENSOR_FLOAT32, &[3, 4]);
        b.op(OperationType::DENSIFY, &ins, &[o]);
        b.build(Vec::new())
    }

    #[test]
    fn valid_with_experimental_features_only() {
        let m = model(&[2], 2);
        check(&m, HalVersion::Experimental).unwrap();
        for level in [HalVersion::V1_3, HalVersion::AidlV4] {
            assert!(check(&m, level).unwrap_err().contains("newer than"));
        }
    }

    #[test]
    fn metadata_pairs_must_match_the_traversal() {
        let at = HalVersion::Experimental;
        assert!(check(&model(&[2], 1), at).unwrap_err().contains("7 inputs"));
        assert!(check(&model(&[2], 3), at)
            .unwrap_err()
            .contains("11 inputs"));
        assert!(check(&model(&[1, 2], 2), at)
            .unwrap_err()
            .contains("not a vector"));
    }
}
