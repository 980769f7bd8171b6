//! `IExecution` V4: a reusable execution over the core's
//! [`crate::interface::IReusableExecution`] (request validated and memory mapped once).

use std::sync::Arc;

use super::convert;
use super::error::AidlResult;
use super::traits::IExecution;
use super::types::{ExecutionResult, FencedExecutionResult, ParcelFileDescriptor};
use crate::interface::IReusableExecution;

/// The V4 face of a reusable execution.
pub struct Execution {
    core: Arc<dyn IReusableExecution>,
}

impl Execution {
    /// The V4 face of `core`.
    pub fn new(core: Arc<dyn IReusableExecution>) -> Execution {
        Execution { core }
    }
}

impl IExecution for Execution {
    fn execute_synchronously(&self, deadline_ns: i64) -> AidlResult<ExecutionResult> {
        let deadline = convert::deadline(deadline_ns)?;
        convert::execution_result(self.core.execute_synchronously(deadline))
    }

    fn execute_fenced(
        &self,
        wait_for: &[ParcelFileDescriptor],
        deadline_ns: i64,
        duration_ns: i64,
    ) -> AidlResult<FencedExecutionResult> {
        let deadline = convert::deadline(deadline_ns)?;
        let duration = convert::duration(duration_ns)?;
        convert::fenced_result(self.core.execute_fenced(
            &convert::fences(wait_for),
            deadline,
            duration,
        ))
    }
}
