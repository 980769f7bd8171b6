//! The compilation cache (NN HAL 1.2+ `prepareModel_1_3` cache handles and
//! `prepareModelFromCache_1_3`).
//!
//! - The **model cache** (1 file) holds everything security-sensitive: the model's
//!   structure, its scalar constants, the layout of its constant tensors and the program
//!   compiled for its input shapes, sealed by a keyed BLAKE3 MAC over the token, the
//!   driver build, the device identity and the contents, which include the XXH3-128 digest
//!   of the data cache ([`format`], [`mac`]). The key is a per-installation secret
//!   ([`key`]).
//! - The **data cache** (1 file) holds the constant tensors in the device's layout (float32
//!   convolution and fully connected filters pre-packed as the GEMM's panels), ready to be
//!   copied into device memory as they are.
//!
//! A save truncates both files and rewrites them with explicit offsets; a failed save
//! never fails the preparation, and a torn one makes a later load fail (the MAC or the
//! digest no longer match), never load wrong data. A load verifies everything before
//! anything is used. File I/O goes through io_uring where the probe finds it ([`io`]).

pub mod dir;
pub mod format;
pub mod handles;
mod helper;
pub mod key;
mod load;
pub use load::Restored;
pub mod mac;
mod save;
pub mod wire;

use std::sync::Mutex;

use thiserror::Error;

pub use crate::config::{CacheConfig, IO_ENV};
pub use crate::fileio as io;
pub use handles::CacheFiles;
pub use io::{CacheIo, IoChoice, IoPath};
pub use save::{image_of, seal, seal_body};

use crate::hal::ErrorStatus;
use crate::hw::HwError;

/// Model cache files the driver asks for.
pub const MODEL_FILES: u32 = 1;
/// Data cache files the driver asks for.
pub const DATA_FILES: u32 = 1;

/// What the cache files hold, for `vnpu info`.
pub const DESCRIPTION: &str = "model cache: model structure, scalar constants, constant layout \
and the compiled device program, sealed by a keyed BLAKE3 MAC (token, driver build, device, \
contents, data digest); data cache: the constant tensors in device layout (float32 \
CONV_2D/FULLY_CONNECTED filters pre-packed in GEMM panels)";

/// Why a cache operation failed.
#[derive(Debug, Error)]
pub enum CacheError {
    /// Wrong handle or fd counts, or an fd that cannot be duplicated.
    #[error("cache handles: {0}")]
    Handles(String),
    /// An fd that is not open read-write.
    #[error("cache fd access mode: {0}")]
    AccessMode(String),
    /// The key could not be read or created.
    #[error("cache key: {0}")]
    Key(String),
    /// No key file exists yet.
    #[error("no cache key yet")]
    KeyMissing,
    /// Reading or writing a cache file failed.
    #[error("cache I/O: {0}")]
    Io(#[from] std::io::Error),
    /// The model cache is not in the cache format.
    #[error("malformed cache: {0}")]
    Malformed(&'static str),
    /// The MAC does not verify: another token, build, device or key, or altered contents.
    #[error("the model cache's MAC does not verify")]
    Integrity,
    /// The data cache is not the length the model cache says.
    #[error("the data cache is {got} bytes, the model cache says {want}")]
    DataLength {
        /// Bytes found.
        got: u64,
        /// Bytes expected.
        want: u64,
    },
    /// The data cache's digest differs from the one the model cache holds.
    #[error("the data cache's digest does not match the model cache")]
    DataDigest,
    /// Host staging memory could not be had.
    #[error("staging memory: {0}")]
    Memory(String),
    /// The device refused an allocation, mapping or copy.
    #[error("device: {0}")]
    Hw(#[from] HwError),
    /// Installing the restored model failed.
    #[error("restoring the prepared model: {0}")]
    Restore(ErrorStatus),
    /// The deadline passed.
    #[error("deadline passed")]
    Deadline,
}

impl CacheError {
    /// The HAL status a failed load reports.
    pub fn status(&self) -> ErrorStatus {
        match self {
            CacheError::Handles(_) => ErrorStatus::InvalidArgument,
            CacheError::Deadline => ErrorStatus::MissedDeadlinePersistent,
            _ => ErrorStatus::GeneralFailure,
        }
    }
}

/// A token naming `model` by its contents (structure, operand values and pool bytes), for
/// clients such as the CLI that have no token of their own.
pub fn model_token(model: &crate::hal::Model) -> std::io::Result<[u8; 32]> {
    let structure = format::Image {
        model: crate::hal::Model {
            operand_values: Vec::new(),
            pools: Vec::new(),
            ..model.clone()
        },
        constants: Vec::new(),
        instance: None,
    };
    let mut h = blake3::Hasher::new();
    h.update(b"vnpu model token v1\0");
    h.update(&format::encode_body(&structure));
    h.update(&model.operand_values);
    for pool in &model.pools {
        let bytes = crate::memory::read_pool(pool).map_err(std::io::Error::other)?;
        h.update(&(bytes.len() as u64).to_le_bytes());
        h.update(&bytes);
    }
    Ok(*h.finalize().as_bytes())
}

/// The compilation cache of one device.
#[derive(Debug)]
pub struct Cache {
    config: CacheConfig,
    io: std::sync::Arc<CacheIo>,
    key: Mutex<Option<[u8; key::KEY_LEN]>>,
    /// The data cache staging buffer kept between loads.
    staging: Mutex<Option<load::Staging>>,
    /// The thread that reads data caches while loads parse their model caches.
    helper: helper::Helper,
}

impl Cache {
    /// A cache with this configuration (the I/O path is probed now, the key read or
    /// created on first use).
    pub fn new(config: CacheConfig) -> Cache {
        Cache {
            io: std::sync::Arc::new(CacheIo::new(config.io)),
            config,
            key: Mutex::new(None),
            staging: Mutex::new(None),
            helper: helper::Helper::default(),
        }
    }

    /// The I/O path in use.
    pub fn io_path(&self) -> IoPath {
        self.io.path()
    }

    /// The I/O layer (shared with request-pool staging, one ring per device).
    pub fn io(&self) -> &std::sync::Arc<CacheIo> {
        &self.io
    }

    /// The configuration.
    pub fn config(&self) -> &CacheConfig {
        &self.config
    }

    /// The key, read or created on first use.
    pub fn key(&self) -> Result<[u8; key::KEY_LEN], CacheError> {
        let mut k = self.key.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(k) = *k {
            return Ok(k);
        }
        let got = key::load_or_create(&self.config.key_path)?;
        *k = Some(got);
        Ok(got)
    }
}
