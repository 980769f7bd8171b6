//! The cache handles a client passes: checked (counts, one fd each, read-write regular
//! files) and duplicated, so the driver owns what it keeps beyond the call.

use std::os::fd::{AsFd, OwnedFd};

use super::{CacheError, DATA_FILES, MODEL_FILES};
use crate::hal::NativeHandle;

/// The cache files of one preparation: the driver's own duplicates of the client's fds.
#[derive(Debug)]
pub struct CacheFiles {
    /// The model cache (program, model, MAC).
    pub model: OwnedFd,
    /// The data cache (constants in device layout).
    pub data: OwnedFd,
}

fn one_fd(h: &NativeHandle, what: &'static str) -> Result<OwnedFd, CacheError> {
    let [fd] = h.fds.as_slice() else {
        return Err(CacheError::Handles(format!(
            "a {what} handle holds {} fds, not 1",
            h.fds.len()
        )));
    };
    let flags = nix::fcntl::fcntl(fd.as_fd(), nix::fcntl::FcntlArg::F_GETFL)
        .map_err(|e| CacheError::AccessMode(format!("{what}: {e}")))?;
    if flags & libc::O_ACCMODE != libc::O_RDWR {
        return Err(CacheError::AccessMode(format!(
            "{what} fd is not read-write"
        )));
    }
    // Only a regular file (a memfd is one) is read and written at offsets: a pipe or a
    // socket would take writes as a stream (and could raise SIGPIPE).
    let stat = nix::sys::stat::fstat(fd.as_fd())
        .map_err(|e| CacheError::Handles(format!("{what}: {e}")))?;
    if stat.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(CacheError::Handles(format!(
            "the {what} fd is not a regular file"
        )));
    }
    fd.try_clone()
        .map_err(|e| CacheError::Handles(format!("dup of the {what} fd: {e}")))
}

/// Checks the handles of a save or a load and duplicates their fds.
pub fn take(model: &[NativeHandle], data: &[NativeHandle]) -> Result<CacheFiles, CacheError> {
    if model.len() != MODEL_FILES as usize || data.len() != DATA_FILES as usize {
        return Err(CacheError::Handles(format!(
            "{} model and {} data cache handles, want {MODEL_FILES} and {DATA_FILES}",
            model.len(),
            data.len()
        )));
    }
    Ok(CacheFiles {
        model: one_fd(&model[0], "model cache")?,
        data: one_fd(&data[0], "data cache")?,
    })
}
