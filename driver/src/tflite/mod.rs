//! Real models: a TFLite (LiteRT) `.tflite` file imported as an NN HAL model, as Android's
//! NNAPI delegate turns a TFLite graph into an NNAPI model, so it runs through the same
//! driver path (validate, prepare, execute) as everything else. The model is a 1.3 one
//! unless it needs a later operation (PACK, or DENSIFY for sparse weights): its `level`
//! says which interface to prepare it through.
//!
//! [`schema`] verifies the FlatBuffer and reads it with safe accessors; [`import`] turns the
//! main subgraph (or a partition of it) into a model; [`ops`] holds one mapping per builtin
//! or custom operator; [`partition`] splits a graph between vnpu and the CPU; [`npy`]
//! reads and writes the `.npy` files `vnpu run MODEL.tflite` takes and gives. A file is
//! hostile input: every error is an [`ImportError`], never a panic.

pub mod import;
pub mod npy;
pub mod ops;
pub mod partition;
pub mod run;
pub mod schema;
pub mod writer;

pub use import::{
    import_ops, import_ops_with_outputs, model_level, Graph, Imported, SparseDim, Sparsity,
    TensorInfo,
};

use crate::hal::HalVersion;

/// Why a file does not import.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ImportError {
    /// Not a well-formed TFLite FlatBuffer (truncated, wrong identifier, offsets out of
    /// range, ...).
    #[error("not a valid TFLite model: {0}")]
    Malformed(String),
    /// A tensor vnpu cannot represent, or whose data is inconsistent.
    #[error("tensor {index}: {reason}")]
    Tensor {
        /// The tensor's index.
        index: usize,
        /// What is wrong.
        reason: String,
    },
    /// An operator vnpu has no mapping for (`--partial` stops there instead).
    #[error("operator {index} ({op}) is not supported: {reason}")]
    Unsupported {
        /// The operator's index in the main subgraph.
        index: usize,
        /// Its builtin name.
        op: String,
        /// Why.
        reason: String,
    },
    /// An operator whose operands or options are invalid.
    #[error("operator {index} ({op}): {reason}")]
    Operator {
        /// The operator's index.
        index: usize,
        /// Its builtin name.
        op: String,
        /// What is wrong.
        reason: String,
    },
    /// The graph's structure (a cycle, a tensor written twice, an output never written).
    #[error("graph: {0}")]
    Graph(String),
    /// Creating the constants' memory failed.
    #[error("memory: {0}")]
    Io(String),
}

/// Imports the main subgraph of the `.tflite` file in `bytes`, using every operation vnpu
/// has (prepare the result at its [`Imported::level`]). With `partial`, an operator vnpu
/// cannot map ends the model there (its outputs are what the rest would have read) instead
/// of failing the import.
pub fn import(bytes: &[u8], partial: bool) -> Result<Imported, ImportError> {
    import_at(bytes, partial, HalVersion::Experimental)
}

/// [`import`] for an interface at `level`: no operation newer than it (see
/// [`Graph::at_level`]).
pub fn import_at(bytes: &[u8], partial: bool, level: HalVersion) -> Result<Imported, ImportError> {
    schema::verify(bytes)?;
    import::import_verified(bytes, partial, level)
}
