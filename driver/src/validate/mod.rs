//! Validation of the models and requests a client sends, following what NN's
//! `ValidateHal.cpp` checks for a HAL 1.3 model and request. Every failure is
//! INVALID_ARGUMENT ([`crate::hal::ValidationError`]).
//!
//! It sits above the registries its checks read: the operation definitions
//! (`crate::ops`, signatures) and the vendor extensions (`crate::extensions`, prefixes,
//! extension operand types and their sizes). The checks that need neither (parameters,
//! memory pools, fundamental operand sizes) are `crate::hal::validate`.
//!
//! Model (`validate_model`), for the main subgraph and each referenced one:
//! - extensions (`crate::extensions::canonical_model`): the prefix map is one-to-one with
//!   well-formed names and no prefix 0; every extension type's prefix is in it and, for an
//!   extension the driver supports, the type is one the extension declares; the rest of
//!   the checks run on the model with the driver's internal prefixes;
//! - operands: type known (fundamental, or extension); OEM and TENSOR_OEM_BYTE are
//!   deprecated and refused; scalars have rank 0; constant tensors have a rank;
//!   scale and zero point per type; per-channel parameters; lifetime known and location
//!   consistent with it (CONSTANT_COPY within `operand_values`, CONSTANT_REFERENCE within
//!   its pool, SUBGRAPH indexing `referenced`, others all zero); SUBGRAPH type iff SUBGRAPH
//!   lifetime; constant lengths equal the operand's size; extension operands have scale
//!   and zero point 0, extra parameters none or extension, and pass their extension's own
//!   validator (`crate::extensions::check_operand`);
//! - operations: type known at the interface's level (`validate_model_at`: an operation
//!   newer than the level is as invalid as an unknown value; OEM_OPERATION is deprecated
//!   and refused; an extension operation is checked against its definition like any
//!   other), operand indexes in range, signature (see `crate::ops`; only the
//!   forms whose `since` is at or below the level), each input written before it is read,
//!   each output a temporary or subgraph output written exactly once, every temporary and
//!   output written, and `number_of_consumers` equal to the real count (which, with
//!   write-before-read, also rules out cycles);
//! - input/output indexes: in range, no duplicates, lifetimes SUBGRAPH_INPUT/OUTPUT, and
//!   every operand with such a lifetime listed;
//! - no subgraph references itself directly or indirectly; pools are valid memories.
//!
//! Not checked here (left to preparation): IF/WHILE operand compatibility with the
//! referenced subgraphs, and values of constant parameters.

mod model;
mod request;
mod sizes;

pub use model::{validate_model, validate_model_at, validate_prepare};
pub use request::validate_request;
pub use sizes::{has_unspecified_dimensions, is_scalar_type, known_byte_size};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hal::*;

    type Mutation<T> = Box<dyn Fn(&mut T)>;

    fn tensor(t: OperandType, dims: &[u32], lifetime: OperandLifeTime) -> Operand {
        Operand {
            r#type: t,
            dimensions: dims.to_vec(),
            lifetime,
            ..Default::default()
        }
    }

    /// out = in0 + in1 (float32 [2]), activation a CONSTANT_COPY.
    fn add_model() -> Model {
        let f = OperandType::TENSOR_FLOAT32;
        let mut a = tensor(f, &[2], OperandLifeTime::SUBGRAPH_INPUT);
        a.number_of_consumers = 1;
        let b = a.clone();
        let mut act = tensor(OperandType::INT32, &[], OperandLifeTime::CONSTANT_COPY);
        act.number_of_consumers = 1;
        act.location = DataLocation {
            pool_index: 0,
            offset: 0,
            length: 4,
        };
        let out = tensor(f, &[2], OperandLifeTime::SUBGRAPH_OUTPUT);
        Model {
            main: Subgraph {
                operands: vec![a, b, act, out],
                operations: vec![Operation {
                    r#type: OperationType::ADD,
                    inputs: vec![0, 1, 2],
                    outputs: vec![3],
                }],
                input_indexes: vec![0, 1],
                output_indexes: vec![3],
            },
            operand_values: vec![0; 4],
            ..Default::default()
        }
    }

    fn request(m: &Model) -> Request {
        let pool = Memory::ashmem(64).unwrap();
        let arg = |offset| RequestArgument {
            has_no_value: false,
            location: DataLocation {
                pool_index: 0,
                offset,
                length: 8,
            },
            dimensions: vec![],
        };
        let _ = m;
        Request {
            inputs: vec![arg(0), arg(8)],
            outputs: vec![arg(16)],
            pools: vec![RequestMemoryPool::HidlMemory(pool)],
        }
    }

    #[test]
    fn valid_model_and_request() {
        let m = add_model();
        validate_model(&m).unwrap();
        validate_request(&request(&m), &m, false).unwrap();
    }

    #[test]
    fn model_mutations() {
        let cases: Vec<(&str, Mutation<Model>)> = vec![
            (
                "type",
                Box::new(|m| m.main.operands[0].r#type = OperandType(16)),
            ),
            (
                "ext type",
                Box::new(|m| m.main.operands[0].r#type = OperandType(-1)),
            ),
            (
                "scalar rank",
                Box::new(|m| m.main.operands[2].dimensions = vec![1]),
            ),
            ("scale", Box::new(|m| m.main.operands[0].scale = 1.0)),
            (
                "zero point",
                Box::new(|m| m.main.operands[0].zero_point = 1),
            ),
            (
                "consumers",
                Box::new(|m| m.main.operands[0].number_of_consumers = 2),
            ),
            (
                "copy oob",
                Box::new(|m| m.main.operands[2].location.offset = 1),
            ),
            (
                "copy pool",
                Box::new(|m| m.main.operands[2].location.pool_index = 1),
            ),
            (
                "length",
                Box::new(|m| {
                    m.operand_values.resize(8, 0);
                    m.main.operands[2].location.length = 8;
                }),
            ),
            (
                "lifetime",
                Box::new(|m| m.main.operands[2].lifetime = OperandLifeTime(9)),
            ),
            (
                "temp location",
                Box::new(|m| m.main.operands[3].location.length = 1),
            ),
            (
                "op type",
                Box::new(|m| m.main.operations[0].r#type = OperationType(102)),
            ),
            ("op index", Box::new(|m| m.main.operations[0].inputs[0] = 4)),
            ("never written", Box::new(|m| m.main.operations.clear())),
            (
                "inputs dup",
                Box::new(|m| m.main.input_indexes = vec![0, 0, 1]),
            ),
            (
                "input missing",
                Box::new(|m| m.main.input_indexes = vec![0]),
            ),
            (
                "bad pool",
                Box::new(|m| {
                    m.pools.push(Memory {
                        name: "nope".into(),
                        size: 0,
                        handle: Default::default(),
                    })
                }),
            ),
            (
                "subgraph type",
                Box::new(|m| m.main.operands[2].r#type = OperandType::SUBGRAPH),
            ),
            (
                "self reference",
                Box::new(|m| {
                    let mut s = m.main.clone();
                    s.operands.push(Operand {
                        r#type: OperandType::SUBGRAPH,
                        lifetime: OperandLifeTime::SUBGRAPH,
                        ..Default::default()
                    });
                    m.referenced.push(s);
                }),
            ),
        ];
        for (name, mutate) in cases {
            let mut m = add_model();
            mutate(&mut m);
            let e = validate_model(&m).expect_err(name);
            assert_eq!(e.status(), ErrorStatus::InvalidArgument);
        }
    }

    #[test]
    fn request_mutations() {
        let m = add_model();
        let cases: Vec<(&str, Mutation<Request>)> = vec![
            ("remove input", Box::new(|r| drop(r.inputs.pop()))),
            ("remove output", Box::new(|r| drop(r.outputs.pop()))),
            (
                "pool index",
                Box::new(|r| r.inputs[0].location.pool_index = 1),
            ),
            ("oob", Box::new(|r| r.inputs[0].location.offset = 60)),
            (
                "overflow",
                Box::new(|r| r.inputs[0].location.offset = u32::MAX),
            ),
            ("rank", Box::new(|r| r.inputs[0].dimensions = vec![2, 1])),
            ("dim", Box::new(|r| r.inputs[0].dimensions = vec![3])),
            (
                "unspecified input",
                Box::new(|r| r.inputs[0].dimensions = vec![0]),
            ),
            (
                "token 0",
                Box::new(|r| r.pools.push(RequestMemoryPool::Token(0))),
            ),
            (
                "token with offset",
                Box::new(|r| {
                    r.pools.push(RequestMemoryPool::Token(5));
                    r.outputs[0].location.pool_index = 1;
                }),
            ),
            (
                "no value with location",
                Box::new(|r| r.inputs[0].has_no_value = true),
            ),
        ];
        for (name, mutate) in cases {
            let mut r = request(&m);
            mutate(&mut r);
            assert!(validate_request(&r, &m, true).is_err(), "{name}");
        }
        // Unspecified output dims: fine unless disallowed.
        let mut m2 = m.clone();
        m2.main.operands[3].dimensions = vec![0];
        let r = request(&m2);
        validate_request(&r, &m2, true).unwrap();
        assert!(validate_request(&r, &m2, false).is_err());
        // Token pool with zero location is fine.
        let mut r = request(&m);
        r.pools.push(RequestMemoryPool::Token(5));
        r.outputs[0].location = DataLocation {
            pool_index: 1,
            offset: 0,
            length: 0,
        };
        validate_request(&r, &m, false).unwrap();
    }

    #[test]
    fn errors_say_what_failed() {
        let kind = |m: &Model| validate_model(m).unwrap_err().kind();
        let mut m = add_model();
        m.main.operands[2].dimensions = vec![1];
        assert_eq!(kind(&m), ValidationKind::Operand);
        let mut m = add_model();
        m.main.operations[0].inputs.pop();
        assert_eq!(kind(&m), ValidationKind::Signature);
        let mut m = add_model();
        m.main.input_indexes.push(0);
        assert_eq!(kind(&m), ValidationKind::IoIndexes);
        let m = add_model();
        let mut r = request(&m);
        r.inputs.pop();
        assert_eq!(
            validate_request(&r, &m, true).unwrap_err().kind(),
            ValidationKind::Request
        );
        assert_eq!(
            validate_priority(Priority(3)).unwrap_err().kind(),
            ValidationKind::Parameter
        );
    }
}
