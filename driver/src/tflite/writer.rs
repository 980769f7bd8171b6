//! Writes a TFLite FlatBuffer from a plain description of a graph: what a delegate does
//! with the graph a runtime hands it (tensors, nodes and their C parameter structs), so
//! the one importer and partitioner read it as they read a `.tflite` file. Only the
//! fields the importer reads are written (see [`super::schema`]).

use flatbuffers::{FlatBufferBuilder, WIPOffset};

use super::ops::OptValue;
use super::schema::slot;
use super::Sparsity;

/// One tensor.
#[derive(Clone, Debug, Default)]
pub struct TensorDesc {
    /// Its name.
    pub name: String,
    /// Its shape.
    pub shape: Vec<i32>,
    /// Its shape signature (-1 where only known at run time); empty for none.
    pub signature: Vec<i32>,
    /// Its FlatBuffer `TensorType` (FLOAT32 0, FLOAT16 1, INT32 2, UINT8 3, INT64 4, BOOL 6,
    /// INT16 7, INT8 9).
    pub ty: i8,
    /// Constant data (empty: not a constant).
    pub data: Vec<u8>,
    /// Quantisation scales (empty: none).
    pub scales: Vec<f32>,
    /// Quantisation zero points.
    pub zero_points: Vec<i64>,
    /// The quantised dimension of per-channel parameters.
    pub axis: i32,
    /// A sparse tensor's format (`data` then holds the stored values only).
    pub sparsity: Option<Sparsity>,
}

/// One operator.
#[derive(Clone, Debug, Default)]
pub struct OpDesc {
    /// Builtin code (32 for a custom operator).
    pub code: i32,
    /// A custom operator's name.
    pub custom: String,
    /// Input tensors (-1: an optional input left out).
    pub ins: Vec<i32>,
    /// Output tensors.
    pub outs: Vec<i32>,
    /// Options by slot.
    pub options: Vec<(u16, OptValue)>,
    /// A custom operator's options bytes.
    pub custom_options: Vec<u8>,
}

/// A one-subgraph model.
#[derive(Clone, Debug, Default)]
pub struct ModelDesc {
    /// Tensors.
    pub tensors: Vec<TensorDesc>,
    /// Operators in execution order.
    pub ops: Vec<OpDesc>,
    /// Graph inputs.
    pub inputs: Vec<i32>,
    /// Graph outputs.
    pub outputs: Vec<i32>,
}

impl ModelDesc {
    /// The `.tflite` bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = FlatBufferBuilder::new();
        let key = |o: &OpDesc| (o.code, o.custom.clone());
        let mut codes: Vec<(i32, String)> = Vec::new();
        for o in &self.ops {
            if !codes.contains(&key(o)) {
                codes.push(key(o));
            }
        }
        let code_tables: Vec<WIPOffset<_>> = codes
            .iter()
            .map(|(c, name)| {
                let name = (!name.is_empty()).then(|| b.create_string(name));
                let t = b.start_table();
                b.push_slot::<i8>(
                    slot::operator_code::DEPRECATED_BUILTIN_CODE,
                    (*c).clamp(0, 127) as i8,
                    0,
                );
                if let Some(name) = name {
                    b.push_slot_always(slot::operator_code::CUSTOM_CODE, name);
                }
                b.push_slot::<i32>(slot::operator_code::BUILTIN_CODE, *c, 0);
                b.end_table(t)
            })
            .collect();
        // Buffer 0 is empty, as converters write.
        let mut buffers = vec![{
            let t = b.start_table();
            b.end_table(t)
        }];
        let mut tensors = Vec::with_capacity(self.tensors.len());
        for x in &self.tensors {
            let buffer = if x.data.is_empty() {
                0
            } else {
                let d = b.create_vector(&x.data);
                let t = b.start_table();
                b.push_slot_always(slot::buffer::DATA, d);
                buffers.push(b.end_table(t));
                buffers.len() as u32 - 1
            };
            let q = (!x.scales.is_empty()).then(|| {
                let sc = b.create_vector(&x.scales);
                let z = b.create_vector(&x.zero_points);
                let q = b.start_table();
                b.push_slot_always(slot::quantization::SCALE, sc);
                b.push_slot_always(slot::quantization::ZERO_POINT, z);
                b.push_slot::<i32>(slot::quantization::QUANTIZED_DIMENSION, x.axis, 0);
                b.end_table(q)
            });
            let sparsity = x.sparsity.as_ref().map(|s| {
                use slot::dimension as d;
                let dims: Vec<WIPOffset<_>> = s
                    .dims
                    .iter()
                    .map(|m| {
                        // Both index vectors as Int32Vector (union member 1).
                        let mut vector = |v: &[i32]| {
                            let values = b.create_vector(v);
                            let t = b.start_table();
                            b.push_slot_always(slot::index_vector::VALUES, values);
                            b.end_table(t)
                        };
                        let (segments, indices) = (vector(&m.segments), vector(&m.indices));
                        let t = b.start_table();
                        b.push_slot::<i8>(d::FORMAT, i8::from(m.csr), 0);
                        b.push_slot::<i32>(d::DENSE_SIZE, m.dense_size, 0);
                        if m.csr {
                            b.push_slot::<u8>(d::SEGMENTS_TYPE, 1, 0);
                            b.push_slot_always(d::SEGMENTS, segments);
                            b.push_slot::<u8>(d::INDICES_TYPE, 1, 0);
                            b.push_slot_always(d::INDICES, indices);
                        }
                        b.end_table(t)
                    })
                    .collect();
                let order = b.create_vector(&s.traversal_order);
                let blocks = b.create_vector(&s.block_map);
                let dims = b.create_vector(&dims);
                let t = b.start_table();
                b.push_slot_always(slot::sparsity::TRAVERSAL_ORDER, order);
                b.push_slot_always(slot::sparsity::BLOCK_MAP, blocks);
                b.push_slot_always(slot::sparsity::DIM_METADATA, dims);
                b.end_table(t)
            });
            let shape = b.create_vector(&x.shape);
            let signature = (!x.signature.is_empty()).then(|| b.create_vector(&x.signature));
            let name = b.create_string(&x.name);
            let t = b.start_table();
            b.push_slot_always(slot::tensor::SHAPE, shape);
            b.push_slot::<i8>(slot::tensor::TYPE, x.ty, 0);
            b.push_slot::<u32>(slot::tensor::BUFFER, buffer, 0);
            b.push_slot_always(slot::tensor::NAME, name);
            if let Some(q) = q {
                b.push_slot_always(slot::tensor::QUANTIZATION, q);
            }
            if let Some(s) = signature {
                b.push_slot_always(slot::tensor::SHAPE_SIGNATURE, s);
            }
            if let Some(s) = sparsity {
                b.push_slot_always(slot::tensor::SPARSITY, s);
            }
            tensors.push(b.end_table(t));
        }
        let mut ops = Vec::with_capacity(self.ops.len());
        for o in &self.ops {
            let index = codes.iter().position(|c| *c == key(o)).unwrap_or(0) as u32;
            let ins = b.create_vector(&o.ins);
            let outs = b.create_vector(&o.outs);
            let vectors: Vec<(u16, WIPOffset<_>)> = o
                .options
                .iter()
                .filter_map(|(s, v)| match v {
                    OptValue::Ints(v) => Some((*s, b.create_vector(v))),
                    _ => None,
                })
                .collect();
            let options = (!o.options.is_empty()).then(|| {
                let t = b.start_table();
                for (s, v) in &o.options {
                    match v {
                        OptValue::I8(v) => b.push_slot_always::<i8>(*s, *v),
                        OptValue::I32(v) => b.push_slot_always::<i32>(*s, *v),
                        OptValue::F32(v) => b.push_slot_always::<f32>(*s, *v),
                        OptValue::Ints(_) => {}
                    }
                }
                for (s, v) in &vectors {
                    b.push_slot_always(*s, *v);
                }
                b.end_table(t)
            });
            let custom = (!o.custom_options.is_empty()).then(|| b.create_vector(&o.custom_options));
            let t = b.start_table();
            b.push_slot::<u32>(slot::operator::OPCODE_INDEX, index, 0);
            b.push_slot_always(slot::operator::INPUTS, ins);
            b.push_slot_always(slot::operator::OUTPUTS, outs);
            if let Some(options) = options {
                // The union's type: any member (the importer reads options by slot).
                b.push_slot::<u8>(slot::operator::OPTIONS_TYPE, 1, 0);
                b.push_slot_always(slot::operator::OPTIONS, options);
            }
            if let Some(c) = custom {
                b.push_slot_always(slot::operator::CUSTOM_OPTIONS, c);
            }
            ops.push(b.end_table(t));
        }
        let tensors = b.create_vector(&tensors);
        let ops = b.create_vector(&ops);
        let ins = b.create_vector(&self.inputs);
        let outs = b.create_vector(&self.outputs);
        let sg = b.start_table();
        b.push_slot_always(slot::subgraph::TENSORS, tensors);
        b.push_slot_always(slot::subgraph::INPUTS, ins);
        b.push_slot_always(slot::subgraph::OUTPUTS, outs);
        b.push_slot_always(slot::subgraph::OPERATORS, ops);
        let sg = b.end_table(sg);
        let subgraphs = b.create_vector(&[sg]);
        let codes = b.create_vector(&code_tables);
        let buffers = b.create_vector(&buffers);
        let m = b.start_table();
        // Model.version (slot 4) = 3.
        b.push_slot::<u32>(4, 3, 0);
        b.push_slot_always(slot::model::OPERATOR_CODES, codes);
        b.push_slot_always(slot::model::SUBGRAPHS, subgraphs);
        b.push_slot_always(slot::model::BUFFERS, buffers);
        let m = b.end_table(m);
        b.finish(m, Some("TFL3"));
        b.finished_data().to_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tflite::import;

    /// `relu(x + c)` with ADD's options rebuilt from its C struct: the importer reads what
    /// the writer wrote.
    #[test]
    fn a_written_graph_imports() {
        let f = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        let t = |name: &str, data: Vec<u8>| TensorDesc {
            name: name.into(),
            shape: vec![1, 4],
            data,
            ..TensorDesc::default()
        };
        let add_c = 1i32.to_le_bytes(); // kTfLiteActRelu
        let m = ModelDesc {
            tensors: vec![
                t("x", vec![]),
                t("c", f(&[1.0, 2.0, 3.0, 4.0])),
                t("y", vec![]),
            ],
            ops: vec![OpDesc {
                code: 0,
                ins: vec![0, 1],
                outs: vec![2],
                options: crate::tflite::ops::options_from_c(0, &add_c).unwrap(),
                ..OpDesc::default()
            }],
            inputs: vec![0],
            outputs: vec![2],
        };
        let imported = import(&m.to_bytes(), false).unwrap();
        let add = &imported.model.main.operations[0];
        let act = &imported.model.main.operands[add.inputs[2] as usize];
        let v = &imported.model.operand_values[act.location.offset as usize..][..4];
        assert_eq!(v, 1i32.to_le_bytes());
    }

    #[test]
    fn c_parameters_become_options() {
        use crate::tflite::ops::{c_params, options_from_c};
        // TfLiteConvParams: padding VALID (2), strides 2x3, activation RELU6 (3),
        // dilations 1x1.
        let c: Vec<u8> = [2i32, 2, 3, 3, 1, 1, 0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        assert_eq!(c_params(3).1, 24);
        let o = options_from_c(3, &c).unwrap();
        assert_eq!(
            o,
            [
                (4, OptValue::I8(1)),
                (6, OptValue::I32(2)),
                (8, OptValue::I32(3)),
                (10, OptValue::I8(3)),
                (12, OptValue::I32(1)),
                (14, OptValue::I32(1)),
            ]
        );
        assert!(options_from_c(3, &c[..20]).is_err());
        // TfLiteReshapeParams: a count over the array's 8 is refused.
        let mut r = vec![0u8; 36];
        r[32..].copy_from_slice(&9i32.to_le_bytes());
        assert!(options_from_c(22, &r).is_err());
        r[32..].copy_from_slice(&2i32.to_le_bytes());
        r[..4].copy_from_slice(&7i32.to_le_bytes());
        assert_eq!(
            options_from_c(22, &r).unwrap(),
            [(4, OptValue::Ints(vec![7, 0]))]
        );
    }
}
