//! Every size and bound of the driver in one place: the device it powers up, its worker
//! pools and queues, the per-device limits, and the watchdog.

use std::path::PathBuf;
use std::time::Duration;

use vnpu_emu::DeviceConfig;

use crate::fileio::IoChoice;

/// How the driver's watchdog decides that the device stopped completing.
///
/// The device is hung when work is in flight and neither a completion nor an engine step
/// (the PROGRESS register) has been seen for `floor + slack × modelled time of the work in
/// flight` (the timing model's estimate of the batches waiting). The emulator runs slower
/// than the silicon it models, hence the slack factor.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WatchdogConfig {
    /// The least time without progress before the device is declared hung.
    pub floor: Duration,
    /// Multiple of the modelled device time of the work in flight added to `floor`.
    pub slack: u32,
    /// How often the interrupt thread looks (also its interrupt wait).
    pub period: Duration,
}

impl Default for WatchdogConfig {
    fn default() -> Self {
        Self {
            floor: Duration::from_secs(2),
            slack: 1000,
            period: Duration::from_millis(20),
        }
    }
}

/// Faults the driver injects into itself, to test its own guards (off by default).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DriverFaults {
    /// The next this-many preparations panic inside compilation.
    pub prepare_panics: u32,
}

/// The driver's configuration: every bound it keeps.
#[derive(Clone, Debug)]
pub struct DriverConfig {
    /// The emulated device to power up.
    pub device: DeviceConfig,
    /// Threads running asynchronous executions (default: the core count, 1 to 8).
    pub execution_workers: usize,
    /// Asynchronous executions queued beyond those running; a submitter blocks on a full
    /// queue (back-pressure) for up to `submit_wait`.
    pub execution_queue: usize,
    /// How long a submitter waits for queue room before RESOURCE_EXHAUSTED_TRANSIENT.
    pub submit_wait: Duration,
    /// Preparations queued (beyond the one running) before RESOURCE_EXHAUSTED_TRANSIENT.
    pub preparation_queue: usize,
    /// Prepared models alive at once on this device before RESOURCE_EXHAUSTED_TRANSIENT.
    pub max_prepared_models: usize,
    /// Compiled instances (one per distinct input-shape set) a prepared model keeps; the
    /// least recently used goes first.
    pub max_instances: usize,
    /// The hang detector.
    pub watchdog: WatchdogConfig,
    /// Self-inflicted faults, for tests.
    pub faults: DriverFaults,
    /// The compilation cache (key location, I/O path).
    pub cache: CacheConfig,
}

impl Default for DriverConfig {
    fn default() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Self {
            device: DeviceConfig::default(),
            execution_workers: cores.clamp(1, 8),
            execution_queue: 1024,
            submit_wait: Duration::from_secs(30),
            preparation_queue: 256,
            max_prepared_models: 1024,
            max_instances: 8,
            watchdog: WatchdogConfig::default(),
            faults: DriverFaults::default(),
            cache: CacheConfig::from_env(),
        }
    }
}

impl DriverConfig {
    /// The defaults around a given device configuration.
    pub fn with_device(device: DeviceConfig) -> Self {
        Self {
            device,
            ..Self::default()
        }
    }
}

/// The environment variable that forces the I/O fallback (`fallback`).
pub const IO_ENV: &str = "VNPU_CACHE_IO";

/// The environment variable naming the key file.
pub const KEY_ENV: &str = "VNPU_CACHE_KEY";

/// The key file used when none is configured: `$VNPU_CACHE_KEY`, else
/// `$XDG_DATA_HOME/vnpu/cache.key`, else `$HOME/.local/share/vnpu/cache.key`, else one in
/// the temporary directory.
pub fn default_key_path() -> PathBuf {
    if let Some(p) = std::env::var_os(KEY_ENV).filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    let base = std::env::var_os("XDG_DATA_HOME")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|p| !p.is_empty())
                .map(|h| PathBuf::from(h).join(".local/share"))
        })
        .unwrap_or_else(std::env::temp_dir);
    base.join("vnpu").join("cache.key")
}

/// Where the key lives and which I/O path to use.
#[derive(Clone, Debug)]
pub struct CacheConfig {
    /// The key file (created with mode 0600 on first use).
    pub key_path: PathBuf,
    /// io_uring when available, or the fallback forced.
    pub io: IoChoice,
}

impl CacheConfig {
    /// From the environment: `VNPU_CACHE_KEY` (see [`default_key_path`]) and
    /// `VNPU_CACHE_IO=fallback`.
    pub fn from_env() -> CacheConfig {
        let fallback = std::env::var(IO_ENV).is_ok_and(|v| v.eq_ignore_ascii_case("fallback"));
        CacheConfig {
            key_path: default_key_path(),
            io: if fallback {
                IoChoice::Fallback
            } else {
                IoChoice::Auto
            },
        }
    }
}
