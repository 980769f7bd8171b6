//! "dev.vnpu.fused": operations the vnpu accelerator runs as one fused kernel where NNAPI
//! needs a chain of operations. GELU (`0.5 x (1 + erf(x / sqrt 2))`, or its tanh
//! approximation) takes nine NNAPI operations (MUL, MUL, MUL, ADD, MUL, TANH, ADD, MUL,
//! MUL), nine kernels each reading and writing a whole tensor; fused, it is one pass. The
//! operation's definition is `crate::ops::gelu`; it runs as the device's GELU kernel.
//! The extension declares no operand types of its own.

use super::{encode_type, no_operand_types, ExtensionDef};
use crate::hal::{Model, OperationType};

/// The extension's name.
pub const NAME: &str = "dev.vnpu.fused";
/// The driver's internal prefix for it.
pub const PREFIX: u16 = 2;

/// `VNPU_GELU` within the extension.
pub const VNPU_GELU: u16 = 0;

/// VNPU_GELU under the internal prefix.
pub const GELU: OperationType = OperationType(encode_type(PREFIX, VNPU_GELU));

/// The extension.
pub static EXTENSION: ExtensionDef = ExtensionDef {
    name: NAME,
    prefix: PREFIX,
    operand_types: &[],
    operations: &[(VNPU_GELU, "VNPU_GELU")],
    check_operand: no_operand_types,
};

/// GELU (tanh form) on a float32 tensor of `dims`, as two models with the same input (x,
/// the only input) and output: the fused VNPU_GELU (the model names the extension with
/// `prefix`), and the chain of nine NNAPI operations a client without the extension builds,
/// `y = x * (tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)) + 1) * 0.5`. For tests and benches
/// that compare the two.
pub fn gelu_models(dims: &[u32], prefix: u16) -> (Model, Model) {
    use crate::hal::builder::ModelBuilder;
    use crate::hal::{ExtensionNameAndPrefix, OperandType as T};
    let f = T::TENSOR_FLOAT32;

    let mut fused = ModelBuilder::default();
    let x = fused.input(f, dims);
    let flag = fused.constant(T::BOOL, &[], &[1]);
    let y = fused.output(f, dims);
    fused.op(
        OperationType(encode_type(prefix, VNPU_GELU)),
        &[x, flag],
        &[y],
    );
    let name = vec![ExtensionNameAndPrefix {
        name: NAME.into(),
        prefix,
    }];
    let fused = fused.build(name);

    let mut b = ModelBuilder::default();
    let x = b.input(f, dims);
    let none = b.constant(T::INT32, &[], &0i32.to_le_bytes());
    let scalar = |b: &mut ModelBuilder, v: f32| b.constant(f, &[1], &v.to_le_bytes());
    let c = scalar(&mut b, 0.044_715);
    let k = scalar(&mut b, (2.0f32 / std::f32::consts::PI).sqrt());
    let one = scalar(&mut b, 1.0);
    let half = scalar(&mut b, 0.5);
    let t: Vec<u32> = (0..8).map(|_| b.temp(f, dims)).collect();
    let y = b.output(f, dims);
    let (mul, add) = (OperationType::MUL, OperationType::ADD);
    b.op(mul, &[x, x, none], &[t[0]]); // x^2
    b.op(mul, &[t[0], x, none], &[t[1]]); // x^3
    b.op(mul, &[t[1], c, none], &[t[2]]); // c x^3
    b.op(add, &[x, t[2], none], &[t[3]]); // x + c x^3
    b.op(mul, &[t[3], k, none], &[t[4]]); // k (x + c x^3)
    b.op(OperationType::TANH, &[t[4]], &[t[5]]);
    b.op(add, &[t[5], one, none], &[t[6]]); // tanh + 1
    b.op(mul, &[x, t[6], none], &[t[7]]); // x (tanh + 1)
    b.op(mul, &[t[7], half, none], &[y]); // * 0.5
    (fused, b.build(Vec::new()))
}
