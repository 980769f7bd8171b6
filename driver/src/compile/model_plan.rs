//! The compiler's one entry per preparation: [`ModelPlan::new`] takes a validated,
//! canonical model through everything that does not depend on input shapes — support
//! check, control-flow flattening, constant values, folding, the constant block and the
//! deferred inputs — once. Per-shape programs ([`ModelPlan::instance`]) derive from the
//! plan, never from the model again.

use thiserror::Error;

use super::constants::{Constants, Values};
use super::{
    compile_grown, constant_block, constant_values, control, deferred_inputs, fold_constants,
    supported_operations, CompileError, Compiled, ConstantBlock, Growth,
};
use crate::hal::{ErrorStatus, Model};
use crate::memory::PoolError;

/// Why a model cannot be planned.
#[derive(Debug, Error)]
pub enum PlanError {
    /// An operation the device does not run.
    #[error("the model has operations the device does not run")]
    Unsupported,
    /// A model pool that cannot be read.
    #[error("model pool: {0}")]
    Pool(#[from] PoolError),
    /// The compiler refuses the model.
    #[error(transparent)]
    Compile(#[from] CompileError),
}

impl PlanError {
    /// The HAL status a preparation failing this way reports.
    pub fn status(&self) -> ErrorStatus {
        match self {
            PlanError::Unsupported => ErrorStatus::InvalidArgument,
            PlanError::Pool(e) => e.preparation_status(),
            PlanError::Compile(e) => e.status(),
        }
    }
}

/// A model ready for per-shape compilation: flattened, its constants folded and laid
/// out, its deferred inputs known.
pub struct ModelPlan {
    /// The model, IF and WHILE expanded into device control.
    pub model: Model,
    /// Every operand's constant bytes (folded results included), at hand or made on
    /// first use (a model restored from the cache).
    pub constants: Constants,
    /// The constant tensors as the device holds them (its bytes are empty in a model
    /// restored from the cache).
    pub block: ConstantBlock,
    /// Model inputs the host reads at execution (see [`deferred_inputs`]).
    pub deferred: Vec<bool>,
}

/// The constant values of the main subgraph, the model's pools read.
fn read_constants(model: &Model) -> Result<Values, PlanError> {
    let pools = model
        .pools
        .iter()
        .map(crate::memory::read_pool)
        .collect::<Result<Vec<_>, _>>()?;
    Ok(constant_values(model, &model.main, &pools)?)
}

impl ModelPlan {
    /// Plans a validated model whose extension types are canonical: refuses operations
    /// the device does not run, expands IF and WHILE, reads the constants, folds constant
    /// operations and lays out the constant block.
    pub fn new(model: Model) -> Result<ModelPlan, PlanError> {
        if supported_operations(&model).contains(&false) {
            return Err(PlanError::Unsupported);
        }
        let model = control::flatten(model)?;
        let mut constants = read_constants(&model)?;
        let deferred = deferred_inputs(&model.main);
        let folded = fold_constants(&model, &deferred, &mut constants);
        if folded > 0 {
            tracing::debug!("folded {folded} constant operations");
        }
        let block = constant_block(&model.main, &constants);
        Ok(ModelPlan {
            model,
            constants: Constants::ready(constants),
            block,
            deferred,
        })
    }

    /// A plan rebuilt from a verified compilation cache: the model as saved (flattened and
    /// folded), its constants made on first need, the layout of its constant block.
    pub fn restored(model: Model, constants: Constants, block: ConstantBlock) -> ModelPlan {
        let deferred = deferred_inputs(&model.main);
        ModelPlan {
            model,
            constants,
            block,
            deferred,
        }
    }

    /// getSupportedOperations over a validated, canonical model: which operations the
    /// device runs, once the model's pools are known to be readable (as at preparation).
    pub fn supported(model: &Model) -> Result<Vec<bool>, PlanError> {
        read_constants(model)?;
        Ok(supported_operations(model))
    }

    /// The model's input shapes when it fixes them all.
    pub fn known_input_shapes(&self) -> Option<Vec<Vec<usize>>> {
        self.model
            .main
            .input_indexes
            .iter()
            .map(|&i| {
                let d = &self.model.main.operands.get(i as usize)?.dimensions;
                (!d.contains(&0)).then(|| d.iter().map(|&x| x as usize).collect())
            })
            .collect()
    }

    /// The input shapes a program can be compiled for at preparation: the model fixes
    /// them all and reads no input value on the host.
    pub fn preparation_shapes(&self) -> Option<Vec<Vec<usize>>> {
        match self.deferred.contains(&true) {
            true => None,
            false => self.known_input_shapes(),
        }
    }

    /// The program for `input_shapes`, with the values of deferred inputs `values`
    /// (operand, bytes) and the inputs `omitted` leaves out. `larger_than`: an instance
    /// whose growing loop state outgrew its room, compiled again with twice the room.
    pub fn instance(
        &self,
        input_shapes: &[Vec<usize>],
        values: &[(u32, Vec<u8>)],
        omitted: &[u32],
        larger_than: Option<&Compiled>,
    ) -> Result<Compiled, CompileError> {
        let mut constants = std::borrow::Cow::Borrowed(self.constants.get());
        for (i, v) in values {
            if let Some(slot) = constants.to_mut().get_mut(*i as usize) {
                *slot = Some(v.clone());
            }
        }
        let mut omit = vec![false; self.model.main.operands.len()];
        for &i in omitted {
            if let Some(slot) = omit.get_mut(i as usize) {
                *slot = true;
            }
        }
        let grown =
            larger_than.map_or_else(Vec::new, |c| c.grown.iter().map(Growth::doubled).collect());
        compile_grown(
            &self.model,
            &constants,
            &self.deferred,
            input_shapes,
            &omit,
            grown,
        )
    }
}
