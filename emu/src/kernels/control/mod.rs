//! The sequencer's instructions: what the compiler turns IF and WHILE into. They share the
//! op stream's encoding with the compute kernels (opcode, tensors, parameter words) and the
//! program decoder validates them the same way, but the engine's sequencer executes them
//! itself: a branch on a device-resident condition, a jump (a backward jump is a loop's back
//! edge, where the loop timeout is checked) and a tensor copy that carries a value, with its
//! run-time shape, into another tensor (loop state, branch results).

pub mod branch;
pub mod copy;
