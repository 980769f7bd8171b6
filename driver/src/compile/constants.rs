//! The constant values of a prepared model, either at hand (a fresh compilation) or
//! produced on first use (a model restored from the compilation cache, whose constants
//! are already in device memory and are needed on the host only if another set of input
//! shapes must be compiled).

use std::sync::{Mutex, OnceLock};

/// Every operand's constant bytes, by operand index.
pub type Values = Vec<Option<Vec<u8>>>;

type Source = Box<dyn FnOnce() -> Values + Send>;

/// Constant values, at hand or made on first use.
pub struct Constants {
    ready: OnceLock<Values>,
    source: Mutex<Option<Source>>,
}

impl Constants {
    /// Values at hand.
    pub fn ready(values: Values) -> Constants {
        Constants {
            ready: OnceLock::from(values),
            source: Mutex::new(None),
        }
    }

    /// Values `make` produces when first asked for.
    pub fn lazy(make: impl FnOnce() -> Values + Send + 'static) -> Constants {
        Constants {
            ready: OnceLock::new(),
            source: Mutex::new(Some(Box::new(make))),
        }
    }

    /// The values.
    pub fn get(&self) -> &Values {
        self.ready.get_or_init(|| {
            let make = self.source.lock().unwrap_or_else(|p| p.into_inner()).take();
            make.map(|f| f()).unwrap_or_default()
        })
    }
}

impl std::fmt::Debug for Constants {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.ready.get() {
            Some(v) => write!(f, "Constants({} operands)", v.len()),
            None => f.write_str("Constants(not made yet)"),
        }
    }
}
