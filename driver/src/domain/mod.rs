//! Memory domains: driver-managed buffers in device memory (`IDevice::allocate`), their
//! tokens, roles and initialised state.
//!
//! - [`desc`] checks `allocate`'s arguments into a [`BufferSpec`].
//! - [`buffer`] is the buffer itself and its state machine (copyFrom, copyTo, use in an
//!   execution).
//! - [`transfer`] moves bytes between device memory and host pools.
//!
//! Tokens are drawn from one process-wide counter starting at 1 and are never reused, so
//! a token is valid only on the device (the "client" until a service exists) that issued
//! it and only until its [`IBuffer`] is dropped.

pub mod buffer;
pub mod desc;
pub mod transfer;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

pub use buffer::DriverBuffer;
pub use desc::{combine_dimensions, BufferSpec, DescError, Io, Role};

use crate::hal::{ErrorStatus, Memory};
use crate::interface::IBuffer;

/// The next token to hand out (0 is never valid).
static NEXT_TOKEN: AtomicU32 = AtomicU32::new(1);

/// The driver-managed buffers of one device, by token.
#[derive(Debug, Default)]
pub struct BufferRegistry {
    buffers: Mutex<HashMap<u32, Arc<DriverBuffer>>>,
}

impl BufferRegistry {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u32, Arc<DriverBuffer>>> {
        self.buffers.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The live buffer behind `token`, if this device issued it and it was not freed.
    pub fn get(&self, token: u32) -> Option<Arc<DriverBuffer>> {
        self.lock().get(&token).cloned()
    }

    /// Buffers alive.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no buffer is alive.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Registers `buffer` under a fresh token and returns the client's handle on it.
    /// `None` once the token space is used up.
    pub fn register(self: &Arc<Self>, buffer: DriverBuffer) -> Option<(Arc<VnpuBuffer>, u32)> {
        let token = NEXT_TOKEN
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |t| t.checked_add(1))
            .ok()?;
        let buffer = Arc::new(buffer);
        self.lock().insert(token, Arc::clone(&buffer));
        let handle = Arc::new(VnpuBuffer {
            token,
            buffer,
            registry: Arc::clone(self),
        });
        Some((handle, token))
    }
}

/// The client's `IBuffer`: dropping it frees the token (executions already holding the
/// buffer finish first; the device memory goes with the last of them).
#[derive(Debug)]
pub struct VnpuBuffer {
    token: u32,
    buffer: Arc<DriverBuffer>,
    registry: Arc<BufferRegistry>,
}

impl VnpuBuffer {
    /// The buffer's token.
    pub fn token(&self) -> u32 {
        self.token
    }
}

impl Drop for VnpuBuffer {
    fn drop(&mut self) {
        self.registry.lock().remove(&self.token);
    }
}

impl IBuffer for VnpuBuffer {
    fn copy_to(&self, dst: &Memory) -> ErrorStatus {
        self.buffer.copy_to(dst)
    }

    fn copy_from(&self, src: &Memory, dimensions: &[u32]) -> ErrorStatus {
        self.buffer.copy_from(src, dimensions)
    }
}
