//! A driver-managed buffer: device DRAM holding one operand's value for the roles it was
//! allocated for, and its state machine.
//!
//! States: *uninitialised* (fresh, after a failed copyFrom, or after a device reset
//! cleared device memory) and *initialised in epoch e* (after a successful copyFrom or an
//! execution that wrote it as an output, in device epoch e). A buffer is readable
//! (copyTo, execution input) only while initialised in the device's current epoch: data
//! lost to a reset is reported as uninitialised (GENERAL_FAILURE), never read as zeros.

use std::sync::{Arc, Mutex};

use crate::hal::{ErrorStatus, Memory};
use crate::hw::Perm;
use crate::hw::{DramBlock, Hardware};
use crate::hwbuf::HwUse;
use crate::memory::open_pool;

use super::desc::{combine_dimensions, BufferSpec, Io, Role};
use super::transfer;

/// What changes over a buffer's life.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct State {
    /// The dimensions of the value held (the initial dimensions until written).
    dims: Vec<u32>,
    /// The device epoch the value was written in; `None` when uninitialised.
    written: Option<u64>,
}

/// A buffer in device DRAM (see the module doc).
#[derive(Debug)]
pub struct DriverBuffer {
    hw: Arc<Hardware>,
    spec: BufferSpec,
    mem: DramBlock,
    state: Mutex<State>,
}

impl DriverBuffer {
    /// Device memory for `spec`, uninitialised.
    pub fn new(hw: &Arc<Hardware>, spec: BufferSpec) -> Result<DriverBuffer, ErrorStatus> {
        let mem = hw.alloc_dram(spec.size).map_err(|e| e.status())?;
        Ok(DriverBuffer {
            hw: Arc::clone(hw),
            state: Mutex::new(State {
                dims: spec.dimensions.clone(),
                written: None,
            }),
            spec,
            mem,
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The buffer's size in bytes.
    pub fn size(&self) -> u64 {
        self.spec.size
    }

    /// Its device address.
    pub fn addr(&self) -> u64 {
        self.mem.addr
    }

    /// The checked description it was allocated from.
    pub fn spec(&self) -> &BufferSpec {
        &self.spec
    }

    /// The device epoch its value was written in, if it holds one in the current epoch.
    pub fn readable_epoch(&self) -> Option<u64> {
        let now = self.hw.epoch();
        self.state().written.filter(|&e| e == now)
    }

    /// The dimensions of the value it holds.
    pub fn dimensions(&self) -> Vec<u32> {
        self.state().dims.clone()
    }

    /// Records an execution's write of this buffer (as an output) in `epoch`.
    pub fn written(&self, dims: Vec<u32>, epoch: u64) {
        *self.state() = State {
            dims,
            written: Some(epoch),
        };
    }

    /// `IBuffer::copyFrom`: any failure leaves the buffer uninitialised.
    pub fn copy_from(&self, src: &Memory, dims: &[u32]) -> ErrorStatus {
        let mut state = self.state();
        state.written = None;
        let Ok(pool) = open_pool(src, Perm::READ, HwUse::Data) else {
            return ErrorStatus::GeneralFailure;
        };
        let dims = match self.check_copy_from(src, dims) {
            Ok(d) => d,
            Err(s) => return s,
        };
        let epoch = self.hw.epoch();
        match transfer::pool_to_dram(&self.hw, &pool, self.mem.addr, self.spec.size, epoch) {
            Ok(()) => {
                *state = State {
                    dims,
                    written: Some(epoch),
                };
                ErrorStatus::None
            }
            Err(s) => s,
        }
    }

    /// NN's `validateCopyFrom` (the memory already opened): the dimensions the value will
    /// have.
    fn check_copy_from(&self, src: &Memory, dims: &[u32]) -> Result<Vec<u32>, ErrorStatus> {
        if src.size != self.spec.size {
            return Err(ErrorStatus::InvalidArgument);
        }
        if self.spec.r#type.is_scalar() {
            return match dims.is_empty() {
                true => Ok(Vec::new()),
                false => Err(ErrorStatus::InvalidArgument),
            };
        }
        if dims.is_empty() {
            return Ok(self.spec.dimensions.clone());
        }
        if dims.contains(&0) {
            return Err(ErrorStatus::InvalidArgument);
        }
        combine_dimensions(&self.spec.dimensions, dims)
            .filter(|d| d.as_slice() == dims)
            .ok_or(ErrorStatus::InvalidArgument)
    }

    /// `IBuffer::copyTo`.
    pub fn copy_to(&self, dst: &Memory) -> ErrorStatus {
        let Ok(pool) = open_pool(dst, Perm::WRITE, HwUse::Data) else {
            return ErrorStatus::GeneralFailure;
        };
        if dst.size != self.spec.size {
            return ErrorStatus::InvalidArgument;
        }
        let state = self.state();
        let Some(epoch) = state.written.filter(|&e| e == self.hw.epoch()) else {
            return ErrorStatus::GeneralFailure;
        };
        match transfer::dram_to_pool(&self.hw, self.mem.addr, &pool, self.spec.size, epoch) {
            Ok(()) => ErrorStatus::None,
            Err(s) => s,
        }
    }

    /// NN's `HalManagedBuffer::validateRequest` for one argument: the role must have been
    /// given at allocation (INVALID_ARGUMENT); an input must be initialised in the current
    /// epoch (GENERAL_FAILURE); the argument's dimensions must be compatible with the
    /// value's (input) or the initial ones (output) (INVALID_ARGUMENT). Returns the
    /// dimensions the argument has.
    pub fn check_use(&self, role: Role, arg_dims: &[u32]) -> Result<Vec<u32>, ErrorStatus> {
        if !self.spec.roles.contains(&role) {
            return Err(ErrorStatus::InvalidArgument);
        }
        let state = self.state();
        let against = match role.io {
            Io::Input => {
                if state.written != Some(self.hw.epoch()) {
                    return Err(ErrorStatus::GeneralFailure);
                }
                &state.dims
            }
            Io::Output => &self.spec.dimensions,
        };
        combine_dimensions(against, arg_dims).ok_or(ErrorStatus::InvalidArgument)
    }
}
