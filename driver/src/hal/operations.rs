//! Per-operation signatures (operand counts and types).

/// Operations with a full signature table (the rest get generic checks only).
pub const OPERATIONS_WITH_SIGNATURES: &[super::types::OperationType] = &[];
