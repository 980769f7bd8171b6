//! A V4 preparation callback a client can wait on (as [`crate::interface::PreparedModelSlot`]
//! is for 1.3).

use std::sync::Arc;

use super::traits::{IPreparedModel, IPreparedModelCallback};
use super::types::ErrorStatus;
use crate::interface::Notified;

/// The outcome of a V4 preparation.
pub type PrepareResult = (ErrorStatus, Option<Arc<dyn IPreparedModel>>);

/// A V4 preparation callback a client can wait on: counts notifications, keeps the first.
pub type PreparedModelSlot = Notified<PrepareResult>;

impl IPreparedModelCallback for Notified<PrepareResult> {
    fn notify(&self, status: ErrorStatus, prepared_model: Option<Arc<dyn IPreparedModel>>) {
        self.deliver((status, prepared_model));
    }
}
