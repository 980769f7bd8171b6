//! The conformance JSON report reader (a file `vnpu conformance-table` is given) and, for
//! what parses, the markdown table rendered from it: never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vnpu_driver::conformance::{report, table};

fuzz_target!(|data: &[u8]| {
    if let Ok(records) = report::read_report(data) {
        let _ = table::markdown(&records);
    }
});
