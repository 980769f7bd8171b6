//! Compilation and execution hints (`TokenValuePair`, token = extension prefix << 16 |
//! hint). The HAL says a driver validates the hints and ignores those it does not
//! understand; no extension vnpu supports defines hints, so every well-formed hint is
//! ignored (counted, and logged at debug level). What breaks the HAL's own rules is
//! INVALID_ARGUMENT: a token given twice, or a prefix map naming one prefix or one
//! extension twice.

use std::collections::HashSet;

use super::error::{AidlResult, INVALID};
use super::types::{ExtensionNameAndPrefix, TokenValuePair, EXTENSION_TYPE_LOW_BITS_TYPE};

/// What the hints of one call came to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Hints {
    /// Hints ignored: of an extension the map does not name or vnpu does not support, of a
    /// hint it does not define, or with the sign bit set (never a valid token).
    pub ignored: usize,
}

/// Checks `hints` against `prefixes` (see the module doc).
pub fn check(hints: &[TokenValuePair], prefixes: &[ExtensionNameAndPrefix]) -> AidlResult<Hints> {
    let mut names = HashSet::new();
    let mut seen_prefixes = HashSet::new();
    for p in prefixes {
        if !names.insert(p.name.as_str()) || !seen_prefixes.insert(p.prefix) {
            tracing::debug!(
                "hints: extension {} or prefix {} given twice",
                p.name,
                p.prefix
            );
            return Err(INVALID);
        }
    }
    let mut tokens = HashSet::new();
    let mut out = Hints::default();
    for h in hints {
        if !tokens.insert(h.token) {
            tracing::debug!("hints: token {:#x} given twice", h.token);
            return Err(INVALID);
        }
        let prefix = (h.token as u32 >> EXTENSION_TYPE_LOW_BITS_TYPE) as u16;
        let name = prefixes
            .iter()
            .find(|p| p.prefix == prefix)
            .map(|p| &p.name);
        tracing::debug!(
            "hints: ignoring hint {:#x} ({} bytes) of {:?}",
            h.token,
            h.value.len(),
            name
        );
        out.ignored += 1;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hint(token: i32) -> TokenValuePair {
        TokenValuePair {
            token,
            value: vec![1, 2],
        }
    }

    #[test]
    fn unknown_hints_are_ignored_duplicates_refused() {
        let map = vec![ExtensionNameAndPrefix {
            name: "vendor.test.test_extension".into(),
            prefix: 0x7AAA,
        }];
        assert_eq!(check(&[], &[]).unwrap().ignored, 0);
        let ok = check(&[hint(0x7AAA_000B), hint(0x1234_0001), hint(-1)], &map).unwrap();
        assert_eq!(ok.ignored, 3);
        assert_eq!(check(&[hint(5), hint(5)], &map).unwrap_err(), INVALID);
        let twice = vec![map[0].clone(), map[0].clone()];
        assert_eq!(check(&[], &twice).unwrap_err(), INVALID);
    }
}
