//! `IPreparedModel` V4 over a 1.3 prepared model: every execution converts its request and
//! configuration, then runs on the same execution core as the 1.3 face.

use std::sync::Arc;

use super::burst::Burst;
use super::convert;
use super::error::AidlResult;
use super::execution::Execution;
use super::hints;
use super::traits::{IBurst, IExecution, IPreparedModel};
use super::types::{
    ExecutionConfig, ExecutionResult, FencedExecutionResult, ParcelFileDescriptor, Request,
};
use super::ServiceSpecific;
use crate::interface;

/// The V4 face of a prepared model.
pub struct AidlPreparedModel {
    core: Arc<dyn interface::IPreparedModel>,
}

impl AidlPreparedModel {
    /// The V4 face of `core`.
    pub fn new(core: Arc<dyn interface::IPreparedModel>) -> AidlPreparedModel {
        AidlPreparedModel { core }
    }
}

impl IPreparedModel for AidlPreparedModel {
    fn execute_synchronously(
        &self,
        request: &Request,
        measure_timing: bool,
        deadline_ns: i64,
        loop_timeout_duration_ns: i64,
    ) -> AidlResult<ExecutionResult> {
        let request = convert::request(request)?;
        let deadline = convert::deadline(deadline_ns)?;
        let loop_timeout = convert::loop_timeout(loop_timeout_duration_ns)?;
        convert::execution_result(self.core.execute_synchronously_1_3(
            &request,
            convert::measure(measure_timing),
            deadline,
            loop_timeout,
        ))
    }

    fn execute_fenced(
        &self,
        request: &Request,
        wait_for: &[ParcelFileDescriptor],
        measure_timing: bool,
        deadline_ns: i64,
        loop_timeout_duration_ns: i64,
        duration_ns: i64,
    ) -> AidlResult<FencedExecutionResult> {
        let request = convert::request(request)?;
        let deadline = convert::deadline(deadline_ns)?;
        let loop_timeout = convert::loop_timeout(loop_timeout_duration_ns)?;
        let duration = convert::duration(duration_ns)?;
        convert::fenced_result(self.core.execute_fenced(
            &request,
            &convert::fences(wait_for),
            convert::measure(measure_timing),
            deadline,
            loop_timeout,
            duration,
        ))
    }

    fn configure_execution_burst(&self) -> AidlResult<Arc<dyn IBurst>> {
        let core = self
            .core
            .configure_memory_token_burst()
            .map_err(ServiceSpecific)?;
        Ok(Arc::new(Burst::new(core)))
    }

    fn create_reusable_execution(
        &self,
        request: &Request,
        config: &ExecutionConfig,
    ) -> AidlResult<Arc<dyn IExecution>> {
        hints::check(&config.execution_hints, &config.extension_name_to_prefix)?;
        let request = convert::request(request)?;
        let loop_timeout = convert::loop_timeout(config.loop_timeout_duration_ns)?;
        let core = self
            .core
            .create_reusable_execution(
                &request,
                convert::measure(config.measure_timing),
                loop_timeout,
            )
            .map_err(ServiceSpecific)?;
        Ok(Arc::new(Execution::new(core)))
    }

    fn execute_synchronously_with_config(
        &self,
        request: &Request,
        config: &ExecutionConfig,
        deadline_ns: i64,
    ) -> AidlResult<ExecutionResult> {
        hints::check(&config.execution_hints, &config.extension_name_to_prefix)?;
        self.execute_synchronously(
            request,
            config.measure_timing,
            deadline_ns,
            config.loop_timeout_duration_ns,
        )
    }

    fn execute_fenced_with_config(
        &self,
        request: &Request,
        wait_for: &[ParcelFileDescriptor],
        config: &ExecutionConfig,
        deadline_ns: i64,
        duration_ns: i64,
    ) -> AidlResult<FencedExecutionResult> {
        hints::check(&config.execution_hints, &config.extension_name_to_prefix)?;
        self.execute_fenced(
            request,
            wait_for,
            config.measure_timing,
            deadline_ns,
            config.loop_timeout_duration_ns,
            duration_ns,
        )
    }

    fn core(&self) -> Option<Arc<dyn interface::IPreparedModel>> {
        Some(Arc::clone(&self.core))
    }
}
