//! The conformance-case JSON parser (hostile files) and, for what parses, the model
//! validator and request builder: never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(case) = vnpu_driver::conformance::corpus::parse_case(text) {
        let _ = vnpu_driver::validate::validate_model(&case.model);
        if let Ok((request, _, _)) = case.make_request() {
            let _ = vnpu_driver::validate::validate_request(&request, &case.model, true);
        }
    }
});
