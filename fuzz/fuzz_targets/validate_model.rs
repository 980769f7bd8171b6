//! Fuzz `validate::validate_model` (and `validate::validate_request` against the decoded
//! model) with models decoded from arbitrary bytes by a small structured decoder: every
//! byte string is a model, biased towards plausible values (known types, small indexes) so
//! that the fuzzer reaches the deep checks. Neither validator may panic.
//!
//! Extension models too: the prefix map names the supported extensions, a foreign one and
//! malformed names under small (sometimes repeated or 0) prefixes; operand and operation
//! types are often `prefix << 16 | type` with small prefixes and types, and extension
//! parameters are often a well-formed `{double scale, int64 zeroPoint}`. A model that
//! validates must stay valid once its extension types are rewritten to the driver's
//! internal prefixes, and getSupportedOperations' support check must not panic on it.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use vnpu_driver::extensions::{canonical_model, encode_type};
use vnpu_driver::hal::{
    DataLocation, ExtensionNameAndPrefix, ExtraParams, Memory,
    Model, NativeHandle, Operand, OperandLifeTime, OperandType, Operation, OperationType, Request,
    RequestArgument, RequestMemoryPool, Subgraph, SymmPerChannelQuantParams,
};
use vnpu_driver::validate::{validate_model, validate_request};

/// Reads values from the input; once exhausted, every read yields 0.
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
    fn small(&mut self, n: u32) -> u32 {
        u32::from(self.u8()) % n.max(1)
    }
    /// A u32 that is usually small, sometimes arbitrary.
    fn index(&mut self, n: usize) -> u32 {
        let tag = self.u8();
        if tag < 240 {
            u32::from(tag) % (n as u32 + 2)
        } else {
            self.u32()
        }
    }
    fn f32(&mut self) -> f32 {
        const SCALES: [f32; 8] = [0.0, 1.0, 0.5, -1.0, f32::NAN, f32::INFINITY, 1e-30, 2.0];
        let tag = self.u8();
        if tag < 248 {
            SCALES[usize::from(tag % 8)]
        } else {
            f32::from_bits(self.u32())
        }
    }
}

fn scratch_fd_memory() -> Option<Memory> {
    static MEM: OnceLock<Option<Memory>> = OnceLock::new();
    MEM.get_or_init(|| Memory::ashmem(64).ok()).clone()
}

fn memory(b: &mut Bytes) -> Memory {
    const NAMES: [&str; 5] = [
        "ashmem",
        "mmap_fd",
        "hardware_buffer_blob",
        "hardware_buffer",
        "bogus",
    ];
    let name = NAMES[usize::from(b.u8() % 5)].to_string();
    let fds = match scratch_fd_memory() {
        Some(m) => m
            .handle
            .fds
            .iter()
            .cloned()
            .cycle()
            .take(b.small(3) as usize)
            .collect(),
        None => Vec::new(),
    };
    let ints = (0..b.small(5)).map(|_| b.u32() as i32).collect();
    let size = if b.u8() < 250 {
        u64::from(b.u8()) * 16
    } else {
        u64::from(b.u32()) << 8
    };
    Memory {
        name,
        size,
        handle: NativeHandle { fds, ints },
    }
}

/// A prefix: usually one of the few the prefix map uses.
fn prefix(b: &mut Bytes) -> u16 {
    if b.u8() < 240 {
        u16::from(b.u8() % 5)
    } else {
        b.u32() as u16
    }
}

fn operand(b: &mut Bytes) -> Operand {
    let tag = b.u8();
    let r#type = if tag < 160 {
        OperandType::ALL[usize::from(tag) % OperandType::ALL.len()]
    } else if tag < 230 {
        let p = prefix(b);
        OperandType(encode_type(p, u16::from(b.u8() % 3)))
    } else {
        OperandType(b.u32() as i32)
    };
    let dimensions = (0..b.small(5))
        .map(|_| {
            if b.u8() < 250 {
                u32::from(b.u8() % 5)
            } else {
                b.u32()
            }
        })
        .collect();
    let extra_params = match b.small(4) {
        1 => ExtraParams::ChannelQuant(SymmPerChannelQuantParams {
            scales: (0..b.small(5)).map(|_| b.f32()).collect(),
            channel_dim: b.small(5),
        }),
        2 => ExtraParams::Extension((0..b.small(4)).map(|_| b.u8()).collect()),
        3 => {
            let scale = [1.0f64, 0.25, 0.0, -1.0, f64::NAN][usize::from(b.u8() % 5)];
            let zero_point = i64::from(b.u8()) - 8;
            let mut bytes = scale.to_le_bytes().to_vec();
            bytes.extend_from_slice(&zero_point.to_le_bytes());
            bytes.truncate(if b.u8() < 240 {
                16
            } else {
                usize::from(b.u8() % 16)
            });
            ExtraParams::Extension(bytes)
        }
        _ => ExtraParams::None,
    };
    Operand {
        r#type,
        dimensions,
        number_of_consumers: b.small(4),
        scale: b.f32(),
        zero_point: if b.u8() < 240 {
            i32::from(b.u8()) - 64
        } else {
            b.u32() as i32
        },
        lifetime: OperandLifeTime(if b.u8() < 250 {
            i32::from(b.u8() % 8)
        } else {
            b.u32() as i32
        }),
        location: DataLocation {
            pool_index: b.index(2),
            offset: b.index(64),
            length: b.index(64),
        },
        extra_params,
    }
}

fn subgraph(b: &mut Bytes) -> Subgraph {
    let n = b.small(12) as usize;
    let operands: Vec<Operand> = (0..n).map(|_| operand(b)).collect();
    let operations = (0..b.small(8))
        .map(|_| {
            let tag = b.u8();
            let r#type = if tag < 170 {
                OperationType(i32::from(tag % 110))
            } else if tag < 230 {
                let p = prefix(b);
                OperationType(encode_type(p, u16::from(b.u8() % 2)))
            } else {
                OperationType(b.u32() as i32)
            };
            Operation {
                r#type,
                inputs: (0..b.small(16)).map(|_| b.index(n)).collect(),
                outputs: (0..b.small(5)).map(|_| b.index(n)).collect(),
            }
        })
        .collect();
    Subgraph {
        operands,
        operations,
        input_indexes: (0..b.small(5)).map(|_| b.index(n)).collect(),
        output_indexes: (0..b.small(5)).map(|_| b.index(n)).collect(),
    }
}

fn request(b: &mut Bytes) -> Request {
    let arg = |b: &mut Bytes| RequestArgument {
        has_no_value: b.u8() & 1 == 1,
        location: DataLocation {
            pool_index: b.index(2),
            offset: b.index(64),
            length: b.index(64),
        },
        dimensions: (0..b.small(5)).map(|_| u32::from(b.u8() % 5)).collect(),
    };
    let inputs = (0..b.small(5)).map(|_| arg(b)).collect();
    let outputs = (0..b.small(5)).map(|_| arg(b)).collect();
    let pools = (0..b.small(3))
        .map(|_| {
            if b.u8() & 1 == 0 {
                RequestMemoryPool::HidlMemory(memory(b))
            } else {
                RequestMemoryPool::Token(b.small(3))
            }
        })
        .collect();
    Request {
        inputs,
        outputs,
        pools,
    }
}

fuzz_target!(|data: &[u8]| {
    let mut b = Bytes(data);
    let main = subgraph(&mut b);
    let referenced = (0..b.small(3)).map(|_| subgraph(&mut b)).collect();
    let operand_values = vec![0u8; usize::from(b.u8())];
    let pools = (0..b.small(3)).map(|_| memory(&mut b)).collect();
    const NAMES: [&str; 7] = [
        "com.example.fibonacci",
        "dev.vnpu.fused",
        "com.other.vendor",
        "",
        "Com.Example.x",
        "nodot",
        "com..x",
    ];
    let extension_name_to_prefix = (0..b.small(4))
        .map(|_| ExtensionNameAndPrefix {
            name: NAMES[usize::from(b.u8()) % NAMES.len()].to_string(),
            prefix: prefix(&mut b),
        })
        .collect();
    let model = Model {
        main,
        referenced,
        operand_values,
        pools,
        relax_computation_float32_to_float16: b.u8() & 1 == 1,
        extension_name_to_prefix,
    };
    let valid = validate_model(&model).is_ok();
    if valid {
        let canonical = canonical_model(&model).expect("a valid model has canonical types");
        assert!(
            validate_model(&canonical).is_ok(),
            "canonical types stay valid"
        );
        let _ = vnpu_driver::compile::supported_operations(&canonical);
    }
    let req = request(&mut b);
    if valid || b.u8() & 1 == 1 {
        let _ = validate_request(&req, &model, b.u8() & 1 == 1);
    }
});
