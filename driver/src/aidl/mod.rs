//! The AIDL NN HAL V4 face (`android.hardware.neuralnetworks` V4, NNAPI feature level 8):
//! its types and traits mirror the .aidl files one to one, so a HAL developer can read
//! them side by side. It is a second face over the one driver: each call converts its
//! arguments to the HAL 1.3 values ([`convert`]), calls the same device, preparation and
//! execution core as the 1.3 face (models validated at [`HalVersion::AidlV4`], or
//! `Experimental` when the client enables experimental features) and converts the answer
//! back. Errors are the AIDL service-specific errors ([`ServiceSpecific`]).
//!
//! [`types`] holds the parcelables, [`traits`] the interfaces, [`hints`] the compilation
//! and execution hints; [`device`], [`prepared`], [`execution`] and [`burst`] implement
//! the interfaces over any 1.3 [`crate::interface::IDevice`] (the local device or a
//! remote client).
//!
//! [`HalVersion::AidlV4`]: crate::hal::HalVersion::AidlV4

pub mod burst;
pub mod callback;
pub mod convert;
pub mod device;
pub mod error;
pub mod execution;
pub mod hints;
pub mod prepared;
pub mod traits;
pub mod types;

pub use burst::Burst;
pub use callback::{PrepareResult, PreparedModelSlot};
pub use device::AidlDevice;
pub use error::{AidlResult, ServiceSpecific};
pub use execution::Execution;
pub use prepared::AidlPreparedModel;
pub use traits::{
    IBuffer, IBurst, IDevice, IExecution, IFencedExecutionCallback, IPreparedModel,
    IPreparedModelCallback,
};
pub use types::*;
