//! Preparing through a cache directory, as an application (or the `vnpu` CLI, or the
//! LiteRT delegate) does with the compilation cache: the two cache files of a token are
//! `DIR/<token hex>.model` and `.data`; a load when they hold this token's model, else a
//! preparation that saves them.

use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use crate::device::{IDevice, IPreparedModel, PreparedModelSlot};
use crate::hal::{
    ErrorStatus, ExecutionPreference, Model, NativeHandle, OptionalTimePoint, Priority,
};

/// What preparing gave: the call's return status, the callback's status and model, and a
/// line saying what the cache did (`cache: hit (...)`, `cache: miss (...)`, `cache: off`).
pub struct DirPreparation {
    /// `prepareModel*`'s return value.
    pub ret: ErrorStatus,
    /// The callback's status.
    pub status: ErrorStatus,
    /// The prepared model.
    pub prepared: Option<Arc<dyn IPreparedModel>>,
    /// What the cache did.
    pub line: String,
}

/// Prepares `model` without cache files.
pub fn prepare_plain(dev: &dyn IDevice, model: &Model) -> DirPreparation {
    prepare(dev, model, &[], &[], &[0u8; 32], String::new())
}

fn prepare(
    dev: &dyn IDevice,
    model: &Model,
    m: &[NativeHandle],
    d: &[NativeHandle],
    token: &[u8; 32],
    line: String,
) -> DirPreparation {
    let slot = PreparedModelSlot::new();
    let ret = dev.prepare_model_1_3(
        model,
        ExecutionPreference::FAST_SINGLE_ANSWER,
        Priority::MEDIUM,
        OptionalTimePoint::NONE,
        m,
        d,
        token,
        Some(slot.clone()),
    );
    let (status, prepared) = slot.wait();
    DirPreparation {
        ret,
        status,
        prepared,
        line,
    }
}

/// Prepares `model` through the cache files of `token` in `dir` (created if missing).
pub fn prepare_in_dir(
    dev: &dyn IDevice,
    model: &Model,
    dir: &Path,
    token: &[u8; 32],
) -> DirPreparation {
    let name: String = token.iter().map(|b| format!("{b:02x}")).collect();
    let open = |ext: &str| -> std::io::Result<NativeHandle> {
        std::fs::create_dir_all(dir)?;
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(dir.join(format!("{name}.{ext}")))?;
        let filled = f.metadata()?.len() > 0;
        Ok(NativeHandle {
            fds: vec![Arc::new(OwnedFd::from(f))],
            ints: vec![filled as i32],
        })
    };
    let (m, d) = match (open("model"), open("data")) {
        (Ok(m), Ok(d)) => (vec![m], vec![d]),
        (Err(e), _) | (_, Err(e)) => {
            let mut p = prepare_plain(dev, model);
            p.line = format!("cache: off ({}: {e})", dir.display());
            return p;
        }
    };
    let ms = |t: Instant| t.elapsed().as_secs_f64() * 1e3;
    let mut why = String::from("no cache files yet");
    if m[0].ints == [1] {
        let start = Instant::now();
        let slot = PreparedModelSlot::new();
        let ret = dev.prepare_model_from_cache_1_3(
            OptionalTimePoint::NONE,
            &m,
            &d,
            token,
            Some(slot.clone()),
        );
        let (status, prepared) = slot.wait();
        if status == ErrorStatus::None {
            let line = format!(
                "cache: hit (prepare {:.2} ms, from {})",
                ms(start),
                dir.display()
            );
            return DirPreparation {
                ret,
                status,
                prepared,
                line,
            };
        }
        why = format!("the cached files did not load: {status}");
    }
    let start = Instant::now();
    let mut p = prepare(dev, model, &m, &d, token, String::new());
    p.line = format!(
        "cache: miss (prepare {:.2} ms, saved to {}; {why})",
        ms(start),
        dir.display()
    );
    p
}
