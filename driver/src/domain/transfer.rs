//! Moving a driver-managed buffer's bytes between device DRAM and a host pool: one DMA,
//! straight through the IOMMU when the pool's file cannot shrink, through a sealed
//! staging region of the driver's otherwise (see [`crate::execute::staging`]).

use std::sync::Arc;

use crate::hal::ErrorStatus;
use crate::hw::{Hardware, Perm};
use crate::memory::{read_range, write_range, PoolRange};

fn pool_error(e: crate::memory::PoolError) -> ErrorStatus {
    tracing::debug!("buffer copy: {e}");
    ErrorStatus::GeneralFailure
}

/// Copies the first `len` bytes of `pool` to device address `dst`, in device epoch `epoch`.
pub fn pool_to_dram(
    hw: &Arc<Hardware>,
    pool: &PoolRange<'_>,
    dst: u64,
    len: u64,
    epoch: u64,
) -> Result<(), ErrorStatus> {
    if !pool.perm.allows(Perm::READ) {
        return Err(ErrorStatus::GeneralFailure);
    }
    if pool.mappable() {
        let map = hw
            .map(pool.fd, pool.offset, len, Perm::READ)
            .map_err(|e| e.status())?;
        hw.copy(map.iova, dst, len, epoch).map_err(|e| e.status())?;
        return Ok(());
    }
    let bytes = read_range(pool, 0, len as usize).map_err(pool_error)?;
    bytes_to_dram(hw, &bytes, dst, epoch)
}

/// Copies `bytes` to device address `dst` through a staging region, in epoch `epoch`.
pub fn bytes_to_dram(
    hw: &Arc<Hardware>,
    bytes: &[u8],
    dst: u64,
    epoch: u64,
) -> Result<(), ErrorStatus> {
    hw.write_dram(bytes, dst, epoch).map_err(|e| e.status())
}

/// Copies `len` bytes from device address `src` to the start of `pool`, in epoch `epoch`.
pub fn dram_to_pool(
    hw: &Arc<Hardware>,
    src: u64,
    pool: &PoolRange<'_>,
    len: u64,
    epoch: u64,
) -> Result<(), ErrorStatus> {
    if !pool.perm.allows(Perm::WRITE) {
        return Err(ErrorStatus::GeneralFailure);
    }
    if pool.mappable() {
        let map = hw
            .map(pool.fd, pool.offset, len, Perm::WRITE)
            .map_err(|e| e.status())?;
        hw.copy(src, map.iova, len, epoch).map_err(|e| e.status())?;
        return Ok(());
    }
    let bytes = dram_to_bytes(hw, src, len, epoch)?;
    write_range(pool, 0, &bytes).map_err(pool_error)
}

/// Reads `len` bytes at device address `src` through a staging region, in epoch `epoch`.
pub fn dram_to_bytes(
    hw: &Arc<Hardware>,
    src: u64,
    len: u64,
    epoch: u64,
) -> Result<Vec<u8>, ErrorStatus> {
    hw.read_dram(src, len, epoch).map_err(|e| e.status())
}
