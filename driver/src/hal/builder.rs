//! Builds a model operand by operand: for generated models (an extension's reference
//! chain), tests and benches. Consumer counts are filled in when the model is built.

use super::types::{
    DataLocation, ExtensionNameAndPrefix, Model, Operand, OperandLifeTime, OperandType, Operation,
    OperationType, Subgraph,
};

/// A model under construction.
#[derive(Default)]
pub struct ModelBuilder {
    operands: Vec<Operand>,
    values: Vec<u8>,
    operations: Vec<Operation>,
    inputs: Vec<u32>,
    outputs: Vec<u32>,
}

impl ModelBuilder {
    /// An operand; returns its index.
    pub fn operand(&mut self, t: OperandType, dims: &[u32], lifetime: OperandLifeTime) -> u32 {
        self.operands.push(Operand {
            r#type: t,
            dimensions: dims.to_vec(),
            lifetime,
            ..Operand::default()
        });
        self.operands.len() as u32 - 1
    }

    /// A CONSTANT_COPY operand holding `bytes` (8-byte aligned in the operand values).
    pub fn constant(&mut self, t: OperandType, dims: &[u32], bytes: &[u8]) -> u32 {
        let offset = self.values.len().next_multiple_of(8);
        self.values.resize(offset, 0);
        self.values.extend_from_slice(bytes);
        let i = self.operand(t, dims, OperandLifeTime::CONSTANT_COPY);
        self.operands[i as usize].location = DataLocation {
            pool_index: 0,
            offset: offset as u32,
            length: bytes.len() as u32,
        };
        i
    }

    /// The next model input.
    pub fn input(&mut self, t: OperandType, dims: &[u32]) -> u32 {
        let i = self.operand(t, dims, OperandLifeTime::SUBGRAPH_INPUT);
        self.inputs.push(i);
        i
    }

    /// The next model output.
    pub fn output(&mut self, t: OperandType, dims: &[u32]) -> u32 {
        let i = self.operand(t, dims, OperandLifeTime::SUBGRAPH_OUTPUT);
        self.outputs.push(i);
        i
    }

    /// The operand at `index`, to set what the constructors do not (extraParams, scale).
    pub fn operand_mut(&mut self, index: u32) -> Option<&mut Operand> {
        self.operands.get_mut(index as usize)
    }

    /// A temporary.
    pub fn temp(&mut self, t: OperandType, dims: &[u32]) -> u32 {
        self.operand(t, dims, OperandLifeTime::TEMPORARY_VARIABLE)
    }

    /// An operation.
    pub fn op(&mut self, t: OperationType, inputs: &[u32], outputs: &[u32]) {
        self.operations.push(Operation {
            r#type: t,
            inputs: inputs.to_vec(),
            outputs: outputs.to_vec(),
        });
    }

    /// An operand referring to the model's referenced subgraph `index` (an IF's branch, a
    /// WHILE's condition or body).
    pub fn subgraph(&mut self, index: u32) -> u32 {
        let i = self.operand(OperandType::SUBGRAPH, &[], OperandLifeTime::SUBGRAPH);
        self.operands[i as usize].location = DataLocation {
            pool_index: 0,
            offset: index,
            length: 0,
        };
        i
    }

    /// The model, naming `extensions`, with every operand's consumer count.
    pub fn build(self, extensions: Vec<ExtensionNameAndPrefix>) -> Model {
        self.build_with(Vec::new(), extensions)
    }

    /// The model with `referenced` as its referenced subgraphs, in order (their constants
    /// join the model's operand values).
    pub fn build_with(
        self,
        referenced: Vec<ModelBuilder>,
        extensions: Vec<ExtensionNameAndPrefix>,
    ) -> Model {
        let mut values = Vec::new();
        let main = self.into_subgraph(&mut values);
        let referenced = referenced
            .into_iter()
            .map(|b| b.into_subgraph(&mut values))
            .collect();
        Model {
            main,
            referenced,
            operand_values: values,
            extension_name_to_prefix: extensions,
            ..Model::default()
        }
    }

    /// The subgraph, its constants moved to the end of `values`, with consumer counts.
    fn into_subgraph(mut self, values: &mut Vec<u8>) -> Subgraph {
        let base = values.len().next_multiple_of(8);
        values.resize(base, 0);
        values.extend_from_slice(&self.values);
        for o in &mut self.operands {
            if o.lifetime == OperandLifeTime::CONSTANT_COPY {
                o.location.offset += base as u32;
            }
        }
        for op in &self.operations {
            for &i in &op.inputs {
                if let Some(o) = self.operands.get_mut(i as usize) {
                    o.number_of_consumers += 1;
                }
            }
        }
        Subgraph {
            operands: self.operands,
            operations: self.operations,
            input_indexes: self.inputs,
            output_indexes: self.outputs,
        }
    }
}
