//! Cuts `.tflite` models into one-operator models: small, valid seeds for the
//! `tflite_import` fuzz target (a whole model costs milliseconds an execution; one
//! operator, microseconds, so the fuzzer explores each mapping instead of re-reading
//! megabytes of weights).
//!
//!   cargo run --release -p vnpu-driver --example tflite_seeds -- OUT_DIR MODEL.tflite...
//!
//! One seed per distinct (operator, tensor types, options) of each model, at most
//! `MAX_SEED` bytes each. Options are carried for the slots the importer reads (the same
//! table the LiteRT delegate rebuilds them from).

use std::collections::BTreeSet;
use std::path::Path;

use vnpu_driver::tflite::ops::{c_params, CField, OptValue};
use vnpu_driver::tflite::schema::{slot, Table};
use vnpu_driver::tflite::writer::{ModelDesc, OpDesc, TensorDesc};

/// The largest seed written (larger operators are left out: their weights dominate).
const MAX_SEED: usize = 32 << 10;

type Error = Box<dyn std::error::Error>;

fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((out, models)) = args.split_first() else {
        return Err("usage: tflite_seeds OUT_DIR MODEL.tflite...".into());
    };
    std::fs::create_dir_all(out)?;
    let mut written = 0;
    for path in models {
        let bytes = std::fs::read(path)?;
        let stem = Path::new(path)
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        for (k, seed) in one_op_models(&bytes)?.into_iter().enumerate() {
            std::fs::write(Path::new(out).join(format!("op-{stem}-{k}.tflite")), seed)?;
            written += 1;
        }
    }
    println!("{written} seeds in {out}");
    Ok(())
}

/// The distinct one-operator models of `bytes`' main subgraph.
fn one_op_models(bytes: &[u8]) -> Result<Vec<Vec<u8>>, Error> {
    let root = Table::root(bytes)?;
    let codes = root.tables(slot::model::OPERATOR_CODES)?;
    let buffers = root.tables(slot::model::BUFFERS)?;
    let Some(subgraph) = root.tables(slot::model::SUBGRAPHS)?.into_iter().next() else {
        return Ok(Vec::new());
    };
    let tensors = subgraph.tables(slot::subgraph::TENSORS)?;
    let mut seen = BTreeSet::new();
    let mut seeds = Vec::new();
    for op in subgraph.tables(slot::subgraph::OPERATORS)? {
        let Some(code_table) =
            codes.get(op.scalar::<u32>(slot::operator::OPCODE_INDEX, 0)? as usize)
        else {
            continue;
        };
        let deprecated =
            i32::from(code_table.scalar::<i8>(slot::operator_code::DEPRECATED_BUILTIN_CODE, 0)?);
        let code = code_table
            .scalar::<i32>(slot::operator_code::BUILTIN_CODE, 0)?
            .max(deprecated);
        let custom = code_table.string(slot::operator_code::CUSTOM_CODE)?;
        let mut desc = ModelDesc::default();
        let remap = |t: i32, desc: &mut ModelDesc| -> Result<i32, Error> {
            if t < 0 {
                return Ok(-1);
            }
            let table = tensors.get(t as usize).ok_or("tensor index")?;
            desc.tensors.push(tensor(table, &buffers)?);
            Ok(desc.tensors.len() as i32 - 1)
        };
        let mut ins = Vec::new();
        for t in op.scalars::<i32>(slot::operator::INPUTS)? {
            ins.push(remap(t, &mut desc)?);
        }
        let mut outs = Vec::new();
        for t in op.scalars::<i32>(slot::operator::OUTPUTS)? {
            outs.push(remap(t, &mut desc)?);
        }
        desc.inputs = ins
            .iter()
            .copied()
            .filter(|&t| t >= 0 && desc.tensors[t as usize].data.is_empty())
            .collect();
        desc.outputs = outs.clone();
        let options = options(code, op.table(slot::operator::OPTIONS)?)?;
        let key = format!(
            "{code} {custom} {:?} {options:?}",
            desc.tensors.iter().map(|t| t.ty).collect::<Vec<_>>()
        );
        desc.ops.push(OpDesc {
            code,
            custom,
            ins,
            outs,
            options,
            custom_options: op.bytes(slot::operator::CUSTOM_OPTIONS)?.to_vec(),
        });
        let seed = desc.to_bytes();
        if seed.len() <= MAX_SEED && seen.insert(key) {
            seeds.push(seed);
        }
    }
    Ok(seeds)
}

/// Tensor `table` as the writer takes it (its constant data copied from `buffers`).
fn tensor(table: &Table, buffers: &[Table]) -> Result<TensorDesc, Error> {
    let buffer = table.scalar::<u32>(slot::tensor::BUFFER, 0)? as usize;
    let data = match buffers.get(buffer) {
        // Data outside the FlatBuffer (offset 0 and 1 mean none): `size` bytes at `offset`.
        Some(b) if b.scalar::<u64>(slot::buffer::OFFSET, 0)? > 1 => {
            let at = b.scalar::<u64>(slot::buffer::OFFSET, 0)? as usize;
            let size = b.scalar::<u64>(slot::buffer::SIZE, 0)? as usize;
            b.file()
                .get(at..at + size)
                .ok_or("buffer outside the file")?
                .to_vec()
        }
        Some(b) => b.bytes(slot::buffer::DATA)?.to_vec(),
        None => Vec::new(),
    };
    let quant = table.table(slot::tensor::QUANTIZATION)?;
    let (scales, zero_points, axis) = match quant {
        Some(q) => (
            q.scalars::<f32>(slot::quantization::SCALE)?,
            q.scalars::<i64>(slot::quantization::ZERO_POINT)?,
            q.scalar::<i32>(slot::quantization::QUANTIZED_DIMENSION, 0)?,
        ),
        None => (Vec::new(), Vec::new(), 0),
    };
    Ok(TensorDesc {
        name: table.string(slot::tensor::NAME)?,
        shape: table.scalars::<i32>(slot::tensor::SHAPE)?,
        signature: table.scalars::<i32>(slot::tensor::SHAPE_SIGNATURE)?,
        ty: table.scalar::<i8>(slot::tensor::TYPE, 0)?,
        data,
        scales,
        zero_points,
        axis,
        sparsity: match table.table(slot::tensor::SPARSITY)? {
            Some(p) => Some(vnpu_driver::tflite::import::read_sparsity(&p)?),
            None => None,
        },
    })
}

/// The options of builtin `code` the importer reads, from its options table: the fields
/// present (an absent one keeps the schema's default, which the importer knows).
fn options(code: i32, table: Option<Table>) -> Result<Vec<(u16, OptValue)>, Error> {
    let Some(table) = table else {
        return Ok(Vec::new());
    };
    let (params, _) = c_params(code);
    let mut options = Vec::new();
    for p in params {
        // A field is absent when two different defaults both come back.
        let v = match p.field {
            CField::I32(_) => {
                let (a, b) = (
                    table.scalar(p.slot, i32::MIN)?,
                    table.scalar(p.slot, i32::MAX)?,
                );
                (a == b).then_some(OptValue::I32(a))
            }
            CField::F32(_) => {
                let (a, b) = (
                    table.scalar(p.slot, f32::MIN)?,
                    table.scalar(p.slot, f32::MAX)?,
                );
                (a == b).then_some(OptValue::F32(a))
            }
            CField::Enum(_) | CField::Bool(_) | CField::Padding(_) => {
                let (a, b) = (
                    table.scalar(p.slot, i8::MIN)?,
                    table.scalar(p.slot, i8::MAX)?,
                );
                (a == b).then_some(OptValue::I8(a))
            }
            CField::Ints { .. } => {
                let v = table.scalars::<i32>(p.slot)?;
                (!v.is_empty()).then_some(OptValue::Ints(v))
            }
        };
        if let Some(v) = v {
            options.push((p.slot, v));
        }
    }
    Ok(options)
}
