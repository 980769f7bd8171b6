//! The program format: the driver's compiled form of a model, stored in device DRAM,
//! which the compute engine validates in full before running any of it.
//!
//! ```text
//! header, 32 bytes:  u32 magic "VNPG" | u32 version | u32 tensor_count | u32 op_count
//!                    u32 total_len | u32 flags (0) | u64 reserved (0)
//! tensor table:      tensor_count x 48 bytes:
//!                    u32 dtype | u32 rank | u32 dims[6] | u64 dram_addr | u64 byte_len
//! op stream:         op_count records:
//!                    u32 opcode | u16 n_in | u16 n_out | u32 n_params |
//!                    u32 inputs[n_in] | u32 outputs[n_out] | u32 params[n_params]
//! ```
//! Tensor addresses are absolute device addresses in DRAM. `opcode` and `params` are
//! the kernel encoding of [`crate::kernels::KernelOp`].

use crate::error::ProgramError;
use crate::kernels::{KernelOp, MAX_RANK};

pub const MAGIC: u32 = u32::from_le_bytes(*b"VNPG");
pub const VERSION: u32 = 1;
pub const HEADER_SIZE: usize = 32;
pub const TENSOR_SIZE: usize = 48;
pub const MAX_TENSORS: u32 = 1 << 16;
pub const MAX_OPS: u32 = 1 << 16;
pub const MAX_PROGRAM_LEN: u64 = 64 << 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum DType {
    F32 = 1,
    I32 = 2,
}

impl DType {
    pub fn from_u32(v: u32) -> Option<DType> {
        match v {
            1 => Some(DType::F32),
            2 => Some(DType::I32),
            _ => None,
        }
    }

    pub fn size(self) -> u64 {
        4
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorDesc {
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub addr: u64,
    pub byte_len: u64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct OpDesc {
    pub op: KernelOp,
    pub inputs: Vec<u32>,
    pub outputs: Vec<u32>,
}

/// A decoded, validated program.
#[derive(Clone, Debug, PartialEq)]
pub struct Program {
    pub tensors: Vec<TensorDesc>,
    pub ops: Vec<OpDesc>,
}

impl Program {
    /// Encodes the program. Used by the driver's compiler and by tests.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Vec::new();
        let put = |w: &mut Vec<u8>, v: u32| w.extend_from_slice(&v.to_le_bytes());
        put(&mut w, MAGIC);
        put(&mut w, VERSION);
        put(&mut w, self.tensors.len() as u32);
        put(&mut w, self.ops.len() as u32);
        put(&mut w, 0); // total_len, patched below
        put(&mut w, 0);
        w.extend_from_slice(&0u64.to_le_bytes());
        for t in &self.tensors {
            put(&mut w, t.dtype as u32);
            put(&mut w, t.shape.len() as u32);
            for i in 0..MAX_RANK {
                put(&mut w, t.shape.get(i).copied().unwrap_or(0) as u32);
            }
            w.extend_from_slice(&t.addr.to_le_bytes());
            w.extend_from_slice(&t.byte_len.to_le_bytes());
        }
        for o in &self.ops {
            let params = o.op.encode_params();
            put(&mut w, o.op.opcode());
            w.extend_from_slice(&(o.inputs.len() as u16).to_le_bytes());
            w.extend_from_slice(&(o.outputs.len() as u16).to_le_bytes());
            put(&mut w, params.len() as u32);
            for &v in o.inputs.iter().chain(&o.outputs).chain(&params) {
                put(&mut w, v);
            }
        }
        let len = w.len() as u32;
        w[16..20].copy_from_slice(&len.to_le_bytes());
        w
    }

    /// Decodes and validates untrusted program bytes against a DRAM window
    /// `[dram_base, dram_base + dram_size)`.
    pub fn decode(bytes: &[u8], dram_base: u64, dram_size: u64) -> Result<Program, ProgramError> {
        let mut r = Reader { b: bytes, pos: 0 };
        let magic = r.u32("header")?;
        if magic != MAGIC {
            return Err(ProgramError::Header(format!("bad magic {magic:#x}")));
        }
        let version = r.u32("header")?;
        if version != VERSION {
            return Err(ProgramError::Header(format!(
                "unsupported version {version}"
            )));
        }
        let tensor_count = r.u32("header")?;
        let op_count = r.u32("header")?;
        let total_len = r.u32("header")?;
        let flags = r.u32("header")?;
        let reserved = r.u64("header")?;
        if flags != 0 || reserved != 0 {
            return Err(ProgramError::Header("reserved fields must be zero".into()));
        }
        if total_len as usize != bytes.len() {
            return Err(ProgramError::Header(format!(
                "total_len {total_len} does not match {} bytes",
                bytes.len()
            )));
        }
        if tensor_count > MAX_TENSORS || op_count > MAX_OPS {
            return Err(ProgramError::Header("too many tensors or ops".into()));
        }
        let table_len = tensor_count as usize * TENSOR_SIZE;
        if bytes.len() < HEADER_SIZE + table_len {
            return Err(ProgramError::Truncated("tensor table"));
        }
        let dram_end = dram_base.saturating_add(dram_size);
        let mut tensors = Vec::with_capacity(tensor_count as usize);
        for index in 0..tensor_count {
            let bad = |reason: String| ProgramError::Tensor { index, reason };
            let dtype_raw = r.u32("tensor")?;
            let dtype =
                DType::from_u32(dtype_raw).ok_or_else(|| bad(format!("dtype {dtype_raw}")))?;
            let rank = r.u32("tensor")? as usize;
            let mut dims = [0u32; MAX_RANK];
            for d in &mut dims {
                *d = r.u32("tensor")?;
            }
            let addr = r.u64("tensor")?;
            let byte_len = r.u64("tensor")?;
            if rank > MAX_RANK {
                return Err(bad(format!("rank {rank} > {MAX_RANK}")));
            }
            if dims[rank..].iter().any(|&d| d != 0) {
                return Err(bad("dims beyond rank must be zero".into()));
            }
            let shape: Vec<usize> = dims[..rank].iter().map(|&d| d as usize).collect();
            let numel = shape
                .iter()
                .try_fold(1u64, |a, &d| a.checked_mul(d as u64))
                .ok_or_else(|| bad("element count overflows".into()))?;
            if numel.checked_mul(dtype.size()) != Some(byte_len) {
                return Err(bad(format!(
                    "byte_len {byte_len} does not match shape {shape:?}"
                )));
            }
            let end = addr
                .checked_add(byte_len)
                .ok_or_else(|| bad("address overflows".into()))?;
            if addr < dram_base || end > dram_end || addr % 4 != 0 {
                return Err(bad(format!(
                    "[{addr:#x}, +{byte_len:#x}) is not aligned device DRAM"
                )));
            }
            tensors.push(TensorDesc {
                dtype,
                shape,
                addr,
                byte_len,
            });
        }
        let mut ops = Vec::with_capacity(op_count.min(4096) as usize);
        for index in 0..op_count {
            let bad = |reason: String| ProgramError::Op { index, reason };
            let opcode = r.u32("op")?;
            let n_in = r.u16("op")? as usize;
            let n_out = r.u16("op")? as usize;
            let n_params = r.u32("op")? as usize;
            let inputs = r.words(n_in, "op inputs")?;
            let outputs = r.words(n_out, "op outputs")?;
            let params = r.words(n_params, "op params")?;
            let op = KernelOp::decode(opcode, &params).map_err(|e| bad(e.to_string()))?;
            if !op.input_count().contains(&n_in) || n_out != op.output_count() {
                return Err(bad(format!("wrong operand counts {n_in}/{n_out}")));
            }
            let get = |id: u32| {
                tensors
                    .get(id as usize)
                    .ok_or_else(|| bad(format!("tensor id {id} out of range")))
            };
            let in_shapes: Vec<&[usize]> = inputs
                .iter()
                .map(|&i| get(i).map(|t| t.shape.as_slice()))
                .collect::<Result<_, _>>()?;
            let want = op
                .output_shapes(&in_shapes)
                .map_err(|e| bad(e.to_string()))?;
            for (k, &o) in outputs.iter().enumerate() {
                let t = get(o)?;
                if want.get(k) != Some(&t.shape) {
                    return Err(bad(format!(
                        "output {k} has shape {:?}, kernel produces {:?}",
                        t.shape,
                        want.get(k)
                    )));
                }
                if t.dtype != DType::F32 {
                    return Err(bad("outputs must be float32".into()));
                }
                for &i in &inputs {
                    let s = get(i)?;
                    if s.dtype != DType::F32 {
                        return Err(bad("inputs must be float32".into()));
                    }
                    if overlaps(s, t) {
                        return Err(bad(format!("output tensor {o} overlaps input tensor {i}")));
                    }
                }
            }
            ops.push(OpDesc {
                op,
                inputs,
                outputs,
            });
        }
        if r.pos != bytes.len() {
            return Err(ProgramError::Header("trailing bytes".into()));
        }
        Ok(Program { tensors, ops })
    }
}

fn overlaps(a: &TensorDesc, b: &TensorDesc) -> bool {
    a.byte_len > 0 && b.byte_len > 0 && a.addr < b.addr + b.byte_len && b.addr < a.addr + a.byte_len
}

struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&[u8], ProgramError> {
        let end = self
            .pos
            .checked_add(n)
            .ok_or(ProgramError::Truncated(what))?;
        let s = self
            .b
            .get(self.pos..end)
            .ok_or(ProgramError::Truncated(what))?;
        self.pos = end;
        Ok(s)
    }
    fn u16(&mut self, what: &'static str) -> Result<u16, ProgramError> {
        let s = self.take(2, what)?;
        Ok(u16::from_le_bytes([s[0], s[1]]))
    }
    fn u32(&mut self, what: &'static str) -> Result<u32, ProgramError> {
        let s = self.take(4, what)?;
        Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    }
    fn u64(&mut self, what: &'static str) -> Result<u64, ProgramError> {
        Ok(self.u32(what)? as u64 | (self.u32(what)? as u64) << 32)
    }
    fn words(&mut self, n: usize, what: &'static str) -> Result<Vec<u32>, ProgramError> {
        let bytes = self.take(n.checked_mul(4).ok_or(ProgramError::Truncated(what))?, what)?;
        Ok(bytes
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::{Activation, BinaryKind};
    use proptest::prelude::*;

    const BASE: u64 = crate::DRAM_BASE;

    fn t(shape: &[usize], addr: u64) -> TensorDesc {
        let n: usize = shape.iter().product();
        TensorDesc {
            dtype: DType::F32,
            shape: shape.to_vec(),
            addr: BASE + addr,
            byte_len: n as u64 * 4,
        }
    }

    fn add_program() -> Program {
        Program {
            tensors: vec![t(&[2, 3], 0), t(&[2, 3], 64), t(&[2, 3], 128)],
            ops: vec![OpDesc {
                op: KernelOp::Binary {
                    kind: BinaryKind::Add,
                    act: Activation::None,
                },
                inputs: vec![0, 1],
                outputs: vec![2],
            }],
        }
    }

    #[test]
    fn round_trip() {
        let p = add_program();
        assert_eq!(Program::decode(&p.encode(), BASE, 4096).unwrap(), p);
    }

    #[test]
    fn rejects_bad_programs() {
        let mut p = add_program();
        p.tensors[2].shape = vec![3, 2];
        assert!(
            Program::decode(&p.encode(), BASE, 4096).is_err(),
            "wrong output shape"
        );
        let mut p = add_program();
        p.tensors[2].addr = BASE + 8;
        assert!(
            Program::decode(&p.encode(), BASE, 4096).is_err(),
            "aliasing"
        );
        let p = add_program();
        assert!(
            Program::decode(&p.encode(), BASE, 100).is_err(),
            "outside DRAM"
        );
        let mut b = add_program().encode();
        b.push(0);
        assert!(Program::decode(&b, BASE, 4096).is_err(), "trailing");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = Program::decode(&bytes, BASE, 1 << 20);
        }

        #[test]
        fn corrupted_valid_program_never_panics(pos in 0usize..200, val in any::<u8>()) {
            let mut b = add_program().encode();
            let pos = pos % b.len();
            b[pos] = val;
            let _ = Program::decode(&b, BASE, 1 << 20);
        }
    }
}
