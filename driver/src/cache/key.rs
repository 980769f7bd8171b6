//! The per-installation secret that keys the model cache's MAC: 32 random bytes in a
//! file of mode 0600 the driver creates on first use. Where it lives is configurable
//! ([`crate::config::CacheConfig::key_path`]); a key file anyone else may read or write is refused.

use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use super::CacheError;

/// Bytes of the key.
pub const KEY_LEN: usize = 32;

pub use crate::config::{default_key_path, KEY_ENV};

fn key_error(path: &Path, what: impl std::fmt::Display) -> CacheError {
    CacheError::Key(format!("{}: {what}", path.display()))
}

/// Reads the key at `path`, creating it (and its directory, mode 0700) if absent. Two
/// processes creating it at once agree on one key: the file appears whole, by a hard link.
pub fn load_or_create(path: &Path) -> Result<[u8; KEY_LEN], CacheError> {
    match read_key(path) {
        Ok(k) => return Ok(k),
        Err(CacheError::KeyMissing) => {}
        Err(e) => return Err(e),
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| key_error(dir, e))?;
    }
    let mut key = [0u8; KEY_LEN];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut key))
        .map_err(|e| key_error(Path::new("/dev/urandom"), e))?;
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)
        .and_then(|mut f| {
            f.write_all(&key)?;
            f.sync_all()
        });
    let linked = written.and_then(|_| std::fs::hard_link(&tmp, path));
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(key),
        // Another process won the race: use its key.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => read_key(path),
        Err(e) => Err(key_error(path, e)),
    }
}

fn read_key(path: &Path) -> Result<[u8; KEY_LEN], CacheError> {
    let mut f = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(CacheError::KeyMissing),
        Err(e) => return Err(key_error(path, e)),
    };
    let meta = f.metadata().map_err(|e| key_error(path, e))?;
    if !meta.is_file() || meta.len() != KEY_LEN as u64 {
        return Err(key_error(path, "not a 32-byte regular file"));
    }
    if meta.permissions().mode() & 0o077 != 0 {
        return Err(key_error(
            path,
            "group or others may access it (want mode 0600)",
        ));
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    if meta.uid() != unsafe { libc::geteuid() } {
        return Err(key_error(path, "owned by another user"));
    }
    let mut key = [0u8; KEY_LEN];
    f.read_exact(&mut key).map_err(|e| key_error(path, e))?;
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_once_with_mode_0600_and_read_back() {
        let dir = std::env::temp_dir().join(format!("vnpu-key-{}", std::process::id()));
        let path = dir.join("sub/cache.key");
        let a = load_or_create(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(load_or_create(&path).unwrap(), a);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(load_or_create(&path).is_err(), "a readable key is refused");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
