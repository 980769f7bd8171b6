//! `IBurst` V4 over the core's [`crate::interface::IMemoryTokenBurst`]: memories named by
//! the client's identifier tokens are mapped once and kept until released.

use std::sync::Arc;

use super::convert;
use super::error::{check, AidlResult};
use super::hints;
use super::traits::IBurst;
use super::types::{ExecutionConfig, ExecutionResult, Request};
use crate::interface::IMemoryTokenBurst;

/// The V4 face of a burst.
pub struct Burst {
    core: Arc<dyn IMemoryTokenBurst>,
}

impl Burst {
    /// The V4 face of `core`.
    pub fn new(core: Arc<dyn IMemoryTokenBurst>) -> Burst {
        Burst { core }
    }
}

impl IBurst for Burst {
    fn execute_synchronously(
        &self,
        request: &Request,
        memory_identifier_tokens: &[i64],
        measure_timing: bool,
        deadline_ns: i64,
        loop_timeout_duration_ns: i64,
    ) -> AidlResult<ExecutionResult> {
        let request = convert::request(request)?;
        let deadline = convert::deadline(deadline_ns)?;
        let loop_timeout = convert::loop_timeout(loop_timeout_duration_ns)?;
        convert::execution_result(self.core.execute_synchronously(
            &request,
            memory_identifier_tokens,
            convert::measure(measure_timing),
            deadline,
            loop_timeout,
        ))
    }

    fn release_memory_resource(&self, memory_identifier_token: i64) -> AidlResult<()> {
        check(self.core.release_memory_resource(memory_identifier_token))
    }

    fn execute_synchronously_with_config(
        &self,
        request: &Request,
        memory_identifier_tokens: &[i64],
        config: &ExecutionConfig,
        deadline_ns: i64,
    ) -> AidlResult<ExecutionResult> {
        hints::check(&config.execution_hints, &config.extension_name_to_prefix)?;
        self.execute_synchronously(
            request,
            memory_identifier_tokens,
            config.measure_timing,
            deadline_ns,
            config.loop_timeout_duration_ns,
        )
    }
}
