//! A compilation cache kept in a directory, as the `vnpu` CLI keeps one: `TOKEN.model` and
//! `TOKEN.data` (the token in hex).
//!
//! The files in the directory are only ever complete. A preparation saves into two
//! memfds ([`Staged`]), not into the directory; [`CacheDir::commit`] then copies each to a
//! temporary name beside its final one and renames it into place, the data first and the
//! model last. A write that fails (a full disk, a file size limit) removes the temporary
//! files and says why; the names in the directory keep what they held, and a model file is
//! never there without the data it was saved with (a data file without its model is never
//! loaded, and a model with another data file fails the digest check).
//! Over a service this works unchanged: the memfds travel to it with the call.

use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use std::time::Instant;

use crate::hal::{ErrorStatus, HalVersion, Model, NativeHandle};
use crate::interface::{
    IDevice, IPreparedModel, PrepareArgs, PrepareFromCacheArgs, PreparedModelSlot,
};

/// Why a save into the directory failed.
#[derive(Debug, thiserror::Error)]
pub enum SaveError {
    /// The driver left the staged model cache empty: it did not save (the reason is in the
    /// driver's log, e.g. `VNPU_LOG=warn`).
    #[error("the driver did not save the prepared model")]
    NotSaved,
    /// Reading a staged file or writing a file of the directory failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// The two files of one token in a cache directory.
#[derive(Clone, Debug)]
pub struct CacheDir {
    dir: PathBuf,
    name: String,
}

/// The memfds a preparation saves into (model cache, data cache).
pub struct Staged {
    model: Arc<OwnedFd>,
    data: Arc<OwnedFd>,
}

impl Staged {
    /// Two empty memfds.
    pub fn new() -> std::io::Result<Staged> {
        let memfd = |name: &str| -> std::io::Result<Arc<OwnedFd>> {
            let fd = nix::sys::memfd::memfd_create(name, nix::sys::memfd::MFdFlags::MFD_CLOEXEC)
                .map_err(std::io::Error::from)?;
            Ok(Arc::new(fd))
        };
        Ok(Staged {
            model: memfd("vnpu-cache-model")?,
            data: memfd("vnpu-cache-data")?,
        })
    }

    /// The handles to pass to `prepareModel_1_3` (model cache, data cache).
    pub fn handles(&self) -> (Vec<NativeHandle>, Vec<NativeHandle>) {
        let handle = |fd: &Arc<OwnedFd>| NativeHandle {
            fds: vec![fd.clone()],
            ints: Vec::new(),
        };
        (vec![handle(&self.model)], vec![handle(&self.data)])
    }
}

impl CacheDir {
    /// The files of `token` in `dir`.
    pub fn new(dir: &Path, token: &[u8; 32]) -> CacheDir {
        CacheDir {
            dir: dir.to_path_buf(),
            name: token.iter().map(|b| format!("{b:02x}")).collect(),
        }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The path of the file with extension `ext` (`model` or `data`).
    pub fn path(&self, ext: &str) -> PathBuf {
        self.dir.join(format!("{}.{ext}", self.name))
    }

    /// The handles of the saved files for a load (opened read-write, as the HAL asks),
    /// or `None` when the model file is absent or empty.
    pub fn open(&self) -> std::io::Result<Option<(Vec<NativeHandle>, Vec<NativeHandle>)>> {
        let open = |ext: &str| -> std::io::Result<Option<NativeHandle>> {
            let f = match std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(self.path(ext))
            {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(e),
            };
            if f.metadata()?.len() == 0 && ext == "model" {
                return Ok(None);
            }
            Ok(Some(NativeHandle {
                fds: vec![Arc::new(OwnedFd::from(f))],
                ints: Vec::new(),
            }))
        };
        Ok(match (open("model")?, open("data")?) {
            (Some(m), Some(d)) => Some((vec![m], vec![d])),
            _ => None,
        })
    }

    /// Moves what the driver saved into `staged` into the directory, each file complete
    /// or not at all (see the module's documentation).
    pub fn commit(&self, staged: &Staged) -> Result<(), SaveError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| SaveError::Io { path, source }
        };
        let size = |fd: &OwnedFd| -> std::io::Result<u64> {
            Ok(nix::sys::stat::fstat(fd.as_fd())
                .map_err(std::io::Error::from)?
                .st_size as u64)
        };
        if size(&staged.model).map_err(io(Path::new("(staged model cache)")))? == 0 {
            return Err(SaveError::NotSaved);
        }
        std::fs::create_dir_all(&self.dir).map_err(io(&self.dir))?;
        let mut written: Vec<(PathBuf, PathBuf)> = Vec::new();
        for (fd, ext) in [(&staged.data, "data"), (&staged.model, "model")] {
            let fin = self.path(ext);
            let tmp = self
                .dir
                .join(format!(".{}.{ext}.tmp-{}", self.name, std::process::id()));
            if let Err(e) = copy_to_new(fd, &tmp) {
                let _ = std::fs::remove_file(&tmp);
                for (t, _) in &written {
                    let _ = std::fs::remove_file(t);
                }
                return Err(SaveError::Io {
                    path: tmp,
                    source: e,
                });
            }
            written.push((tmp, fin));
        }
        // Data first, model last: a model file in place always has its data beside it.
        for (k, (tmp, fin)) in written.iter().enumerate() {
            if let Err(e) = std::fs::rename(tmp, fin) {
                for (t, _) in &written[k..] {
                    let _ = std::fs::remove_file(t);
                }
                return Err(SaveError::Io {
                    path: fin.clone(),
                    source: e,
                });
            }
        }
        Ok(())
    }
}

/// Copies all of `from` (from offset 0) to a new file at `to` (mode 0600), synced.
fn copy_to_new(from: &OwnedFd, to: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(to)?;
    let mut buf = vec![0u8; 1 << 20];
    let mut at = 0i64;
    loop {
        let n = nix::sys::uio::pread(from.as_fd(), &mut buf, at).map_err(std::io::Error::from)?;
        if n == 0 {
            break;
        }
        out.write_all(&buf[..n])?;
        at += n as i64;
    }
    out.sync_all()
}

/// What preparing through a cache directory gave: the call's return status, the
/// callback's status and model, and a line saying what the cache did (`cache: hit (...)`,
/// `cache: miss (...)`, `cache: off (...)`).
pub struct DirPreparation {
    /// `prepareModel*`'s return value.
    pub ret: ErrorStatus,
    /// The callback's status.
    pub status: ErrorStatus,
    /// The prepared model.
    pub prepared: Option<Arc<dyn IPreparedModel>>,
    /// What the cache did.
    pub line: String,
    /// Why the save into the directory failed, when it did (the model is prepared all the
    /// same; a face says this on its error stream).
    pub save_error: Option<String>,
}

/// Prepares `model` without cache files, validated as an interface at `level` does
/// (`IDevice::prepare_model_at`).
pub fn prepare_plain(dev: &dyn IDevice, model: &Model, level: HalVersion) -> DirPreparation {
    prepare(dev, model, level, &[], &[], &[0u8; 32])
}

fn prepare(
    dev: &dyn IDevice,
    model: &Model,
    level: HalVersion,
    m: &[NativeHandle],
    d: &[NativeHandle],
    token: &[u8; 32],
) -> DirPreparation {
    let slot = PreparedModelSlot::new();
    let ret = dev.prepare_model_at(
        level,
        PrepareArgs {
            model_cache: m,
            data_cache: d,
            token,
            ..PrepareArgs::new(model, Some(slot.clone()))
        },
    );
    let (status, prepared) = slot.wait();
    DirPreparation {
        ret,
        status,
        prepared,
        line: String::new(),
        save_error: None,
    }
}

/// Prepares `model` through the cache files of `token` in `dir` (created if missing): a
/// load when they hold this token's model, else a preparation at `level` whose save is
/// moved into `dir` complete or not at all ([`CacheDir::commit`]).
pub fn prepare_in_dir(
    dev: &dyn IDevice,
    model: &Model,
    level: HalVersion,
    dir: &Path,
    token: &[u8; 32],
) -> DirPreparation {
    let cache = CacheDir::new(dir, token);
    let ms = |t: Instant| t.elapsed().as_secs_f64() * 1e3;
    let off = |e: std::io::Error| {
        let mut p = prepare_plain(dev, model, level);
        p.line = format!("cache: off ({}: {e})", dir.display());
        p
    };
    let mut why = String::from("no cache files yet");
    match cache.open() {
        Ok(Some((m, d))) => {
            let start = Instant::now();
            let slot = PreparedModelSlot::new();
            let args = PrepareFromCacheArgs::new(&m, &d, token, Some(slot.clone()));
            let ret = dev.prepare_model_from_cache_1_3(args);
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
                    save_error: None,
                };
            }
            why = format!("the cached files did not load: {status}");
        }
        Ok(None) => {}
        Err(e) => return off(e),
    }
    let staged = match Staged::new() {
        Ok(s) => s,
        Err(e) => return off(e),
    };
    let (m, d) = staged.handles();
    let start = Instant::now();
    let mut p = prepare(dev, model, level, &m, &d, token);
    let prepare_ms = ms(start);
    let saved = match (p.status, cache.commit(&staged)) {
        (ErrorStatus::None, Ok(())) => format!("saved to {}", dir.display()),
        (ErrorStatus::None, Err(e)) => {
            let failed = format!("the save to {} failed: {e}", dir.display());
            p.save_error = Some(failed.clone());
            failed
        }
        (s, _) => format!("not saved: {s}"),
    };
    p.line = format!("cache: miss (prepare {prepare_ms:.2} ms, {saved}; {why})");
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fill(fd: &OwnedFd, bytes: &[u8]) {
        nix::sys::uio::pwrite(fd.as_fd(), bytes, 0).unwrap();
    }

    #[test]
    fn commit_moves_complete_files_and_refuses_an_empty_save() {
        let dir = std::env::temp_dir().join(format!("vnpu-cachedir-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let cache = CacheDir::new(&dir, &[0xAB; 32]);
        assert!(cache.open().unwrap().is_none());
        let staged = Staged::new().unwrap();
        assert!(matches!(cache.commit(&staged), Err(SaveError::NotSaved)));
        assert!(!dir.exists() || std::fs::read_dir(&dir).unwrap().count() == 0);
        fill(&staged.model, b"model bytes");
        fill(&staged.data, b"data");
        cache.commit(&staged).unwrap();
        assert_eq!(std::fs::read(cache.path("model")).unwrap(), b"model bytes");
        assert_eq!(std::fs::read(cache.path("data")).unwrap(), b"data");
        assert_eq!(
            std::fs::read_dir(&dir).unwrap().count(),
            2,
            "no temporary left"
        );
        assert!(cache.open().unwrap().is_some());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
