//! Fuzz prepareModelFromCache_1_3 with arbitrary bytes as the model and data cache files.
//! Input: one mode byte, a u32 model-cache length, the model cache, then the data cache.
//! Mode even: the bytes go in as they are (the MAC must refuse them). Mode odd: the model
//! cache bytes are a *body* the harness seals with the installation's key and the data's
//! digest, so the fuzzer reaches the decoder, the structural checks and the restore. No
//! input may crash or hang the driver; a call notifies exactly once.
#![no_main]

use std::os::fd::OwnedFd;
use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use vnpu_driver::cache::{seal_body, Cache, CacheConfig, IoChoice};
use vnpu_driver::device::{IDevice, PrepareFromCacheArgs, PreparedModelSlot, VnpuDevice};
use vnpu_driver::hal::NativeHandle;
use vnpu_emu::DeviceConfig;

const TOKEN: [u8; 32] = [3; 32];

fn device() -> &'static Arc<VnpuDevice> {
    static DEV: OnceLock<Arc<VnpuDevice>> = OnceLock::new();
    DEV.get_or_init(|| {
        let key_path = std::env::temp_dir()
            .join(format!("vnpu-fuzz-cache-{}", std::process::id()))
            .join("cache.key");
        let config = DeviceConfig {
            dram_size: 64 << 20,
            ..DeviceConfig::default()
        };
        let cache = CacheConfig {
            key_path,
            io: IoChoice::Auto,
        };
        VnpuDevice::with_cache(config, cache).expect("device")
    })
}

fn file(bytes: &[u8]) -> NativeHandle {
    use nix::sys::memfd::{memfd_create, MFdFlags};
    let fd: OwnedFd = memfd_create(c"vnpu-fuzz-cache", MFdFlags::MFD_CLOEXEC).expect("memfd");
    let mut off = 0;
    while off < bytes.len() {
        off += nix::sys::uio::pwrite(&fd, &bytes[off..], off as i64).expect("pwrite");
    }
    NativeHandle {
        fds: vec![Arc::new(fd)],
        ints: Vec::new(),
    }
}

fuzz_target!(|input: &[u8]| {
    let Some((&mode, rest)) = input.split_first() else {
        return;
    };
    if rest.len() < 4 {
        return;
    }
    let (len, rest) = rest.split_at(4);
    let len = (u32::from_le_bytes([len[0], len[1], len[2], len[3]]) as usize).min(rest.len());
    let (model, data) = rest.split_at(len);
    let dev = device();
    let model = if mode % 2 == 1 {
        let Ok(key) = dev.cache().key() else {
            return;
        };
        let binding = Cache::binding(dev.hardware(), &TOKEN);
        seal_body(&key, &binding, model, data)
    } else {
        model.to_vec()
    };
    let slot = PreparedModelSlot::new();
    let (model_cache, data_cache) = ([file(&model)], [file(data)]);
    let ret = dev.prepare_model_from_cache_1_3(PrepareFromCacheArgs::new(
        &model_cache,
        &data_cache,
        &TOKEN,
        Some(slot.clone()),
    ));
    let (status, prepared) = slot.wait();
    assert_eq!(ret, status);
    assert_eq!(slot.notifications(), 1);
    assert_eq!(prepared.is_some(), status == vnpu_driver::hal::ErrorStatus::None);
});
