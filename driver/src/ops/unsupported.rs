//! Operations the device does not run yet, defined here by their signatures only so that
//! model validation checks them. Each moves to its family's file when it gains a lowering.
//! (None today: every operation with a definition runs on the device.)

use super::{OpDef, Signature};
use crate::hal::OperationType;

/// A definition that only validates (no lowering, runs on no type).
#[allow(dead_code)]
pub const fn validate_only(op: OperationType, signatures: &'static [Signature]) -> OpDef {
    OpDef {
        op,
        signatures,
        check: None,
        runs: &[],
        lower: None,
    }
}
