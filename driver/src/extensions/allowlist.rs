//! The runtime-side extensions allowlist (`/vendor/etc/nnapi_extensions_app_allowlist` on
//! Android): which native binaries and app packages may use vendor extensions.
//!
//! **Advisory.** The allowlist is the NN *runtime's* policy: the runtime library reads it
//! in the client's process and refuses extension types to clients not on it. A driver
//! cannot enforce it: the HAL does not tell the driver who its client is, and a client that
//! talks to the HAL directly bypasses the runtime altogether. This driver therefore never
//! consults it when validating or running a model; this module gives a runtime (or a
//! test, or `vnpu`) the parser and the check.
//!
//! Format: one entry per line, either an absolute native binary path (starting with '/',
//! e.g. `/data/local/tmp/bench`) or an app package name (e.g. `com.foo.bar`). Blank lines
//! are skipped; a trailing '\r' is dropped. Anything else is an error naming the line:
//! the file is configuration written by a vendor, and a silently skipped typo would
//! silently lock a client out.

use std::collections::BTreeSet;
use std::io::Read;
use std::path::Path;

/// The largest allowlist file read (bytes).
pub const MAX_FILE_BYTES: u64 = 1 << 20;
/// The largest entry (bytes): `PATH_MAX`.
pub const MAX_ENTRY_BYTES: usize = 4096;

/// Why an allowlist could not be read.
#[derive(Debug, thiserror::Error)]
pub enum AllowlistError {
    /// The file could not be read.
    #[error("cannot read the allowlist: {0}")]
    Io(#[from] std::io::Error),
    /// The file is larger than [`MAX_FILE_BYTES`].
    #[error("the allowlist is larger than {MAX_FILE_BYTES} bytes")]
    TooLarge,
    /// The file is not UTF-8 text.
    #[error("the allowlist is not UTF-8 text (line {line})")]
    NotText {
        /// 1-based line number.
        line: usize,
    },
    /// A line is neither an absolute binary path nor a package name.
    #[error("allowlist line {line}: {reason}")]
    InvalidEntry {
        /// 1-based line number.
        line: usize,
        /// What is wrong with it.
        reason: String,
    },
}

/// One allowlist entry.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Entry {
    /// An absolute native binary path.
    Binary(String),
    /// An app package name.
    Package(String),
}

/// Who asks to use extensions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Client<'a> {
    /// A native binary, by its absolute path.
    Binary(&'a str),
    /// An app, by its package name.
    App(&'a str),
}

/// The answer of [`Allowlist::check`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// The client is on the allowlist.
    Allowed,
    /// A native binary on the system partition: never allowed, listed or not.
    SystemPartition,
    /// The client is not on the allowlist.
    NotListed,
}

/// A parsed allowlist.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Allowlist {
    entries: BTreeSet<Entry>,
}

fn check_path(p: &str) -> Result<(), String> {
    if p.len() < 2 {
        return Err("a binary path names no file".into());
    }
    if p.ends_with('/') {
        return Err(format!("binary path {p:?} names a directory"));
    }
    for comp in p[1..].split('/') {
        match comp {
            "" => return Err(format!("binary path {p:?} has an empty component")),
            "." | ".." => return Err(format!("binary path {p:?} is not normalised")),
            _ => {}
        }
    }
    if let Some(c) = p.chars().find(|c| c.is_control() || c.is_whitespace()) {
        return Err(format!("binary path {p:?} contains {c:?}"));
    }
    Ok(())
}

/// An Android package name: two or more '.'-separated parts, each a letter followed by
/// letters, digits or '_'.
fn check_package(p: &str) -> Result<(), String> {
    let parts: Vec<&str> = p.split('.').collect();
    if parts.len() < 2 {
        return Err(format!(
            "{p:?} is neither an absolute binary path nor a package name"
        ));
    }
    for part in parts {
        let mut b = part.bytes();
        let first_ok = b.next().is_some_and(|c| c.is_ascii_alphabetic());
        if !first_ok || !b.all(|c| c.is_ascii_alphanumeric() || c == b'_') {
            return Err(format!("{p:?} is not a valid package name"));
        }
    }
    Ok(())
}

impl Allowlist {
    /// Parses allowlist text (untrusted: every failure is an [`AllowlistError`]).
    pub fn parse(bytes: &[u8]) -> Result<Allowlist, AllowlistError> {
        if bytes.len() as u64 > MAX_FILE_BYTES {
            return Err(AllowlistError::TooLarge);
        }
        let mut entries = BTreeSet::new();
        for (i, raw) in bytes.split(|&b| b == b'\n').enumerate() {
            let line = i + 1;
            let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
            let text = std::str::from_utf8(raw).map_err(|_| AllowlistError::NotText { line })?;
            if text.trim().is_empty() {
                continue;
            }
            let invalid = |reason: String| AllowlistError::InvalidEntry { line, reason };
            if text.len() > MAX_ENTRY_BYTES {
                return Err(invalid(format!("longer than {MAX_ENTRY_BYTES} bytes")));
            }
            let entry = if text.starts_with('/') {
                check_path(text).map_err(invalid)?;
                Entry::Binary(text.to_string())
            } else {
                check_package(text).map_err(invalid)?;
                Entry::Package(text.to_string())
            };
            entries.insert(entry);
        }
        Ok(Allowlist { entries })
    }

    /// Reads and parses an allowlist file (at most [`MAX_FILE_BYTES`]).
    pub fn load(path: &Path) -> Result<Allowlist, AllowlistError> {
        let file = std::fs::File::open(path)?;
        let mut bytes = Vec::new();
        file.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes)?;
        Self::parse(&bytes)
    }

    /// The entries, sorted.
    pub fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.entries.iter()
    }

    /// Whether `client` may use vendor extensions by this allowlist (advisory: see the
    /// module documentation). A native binary under `/system/` never may.
    pub fn check(&self, client: Client<'_>) -> Decision {
        let listed = match client {
            Client::Binary(path) => {
                if path.starts_with("/system/") {
                    return Decision::SystemPartition;
                }
                self.entries.contains(&Entry::Binary(path.to_string()))
            }
            Client::App(package) => self.entries.contains(&Entry::Package(package.to_string())),
        };
        if listed {
            Decision::Allowed
        } else {
            Decision::NotListed
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_paths_and_packages() {
        let a =
            Allowlist::parse(b"/data/local/tmp/bench\r\n\ncom.foo.bar\n  \n/vendor/bin/x").unwrap();
        assert_eq!(a.entries().count(), 3);
        assert_eq!(
            a.check(Client::Binary("/data/local/tmp/bench")),
            Decision::Allowed
        );
        assert_eq!(a.check(Client::Binary("/vendor/bin/x")), Decision::Allowed);
        assert_eq!(a.check(Client::App("com.foo.bar")), Decision::Allowed);
        assert_eq!(a.check(Client::App("com.foo.baz")), Decision::NotListed);
        // A package name is not a path, nor the reverse.
        assert_eq!(a.check(Client::Binary("com.foo.bar")), Decision::NotListed);
        assert_eq!(
            a.check(Client::Binary("/data/local/tmp/other")),
            Decision::NotListed
        );
        let s = Allowlist::parse(b"/system/bin/tool").unwrap();
        assert_eq!(
            s.check(Client::Binary("/system/bin/tool")),
            Decision::SystemPartition
        );
        assert_eq!(Allowlist::parse(b"").unwrap(), Allowlist::default());
    }

    #[test]
    fn hostile_files_are_typed_errors() {
        let line = |r: Result<Allowlist, AllowlistError>| match r {
            Err(AllowlistError::InvalidEntry { line, .. })
            | Err(AllowlistError::NotText { line }) => line,
            other => panic!("{other:?}"),
        };
        assert_eq!(line(Allowlist::parse(b"com.foo.bar\nfoo")), 2);
        assert_eq!(line(Allowlist::parse(b"relative/path")), 1);
        assert_eq!(line(Allowlist::parse(b"/data/../system/bin/sh")), 1);
        assert_eq!(line(Allowlist::parse(b"/data//x")), 1);
        assert_eq!(line(Allowlist::parse(b"/data/x/")), 1);
        assert_eq!(line(Allowlist::parse(b"/")), 1);
        assert_eq!(line(Allowlist::parse(b"/data/a b")), 1);
        assert_eq!(line(Allowlist::parse(b"com.1foo.bar")), 1);
        assert_eq!(line(Allowlist::parse(b"com..bar")), 1);
        assert_eq!(line(Allowlist::parse(b"ok.pkg\n\xff\xfe")), 2);
        assert_eq!(line(Allowlist::parse(b"/data/\0x")), 1);
        let long = format!("/{}", "a".repeat(MAX_ENTRY_BYTES));
        assert_eq!(line(Allowlist::parse(long.as_bytes())), 1);
        let huge = vec![b'\n'; MAX_FILE_BYTES as usize + 1];
        assert!(matches!(
            Allowlist::parse(&huge),
            Err(AllowlistError::TooLarge)
        ));
        assert!(matches!(
            Allowlist::load(Path::new("/nonexistent/vnpu/allowlist")),
            Err(AllowlistError::Io(_))
        ));
    }

    proptest! {
        /// Any bytes parse to an allowlist or a typed error, never a panic; what parses
        /// allows exactly its entries.
        #[test]
        fn any_bytes_parse_or_fail_cleanly(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            if let Ok(a) = Allowlist::parse(&bytes) {
                for e in a.entries() {
                    let d = match e {
                        Entry::Binary(p) => a.check(Client::Binary(p)),
                        Entry::Package(p) => a.check(Client::App(p)),
                    };
                    prop_assert!(d == Decision::Allowed || d == Decision::SystemPartition);
                }
            }
        }
    }
}
