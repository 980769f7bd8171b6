//! The device's program decoder on arbitrary bytes: it must reject or accept, never
//! panic, and whatever it accepts must re-encode to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vnpu_emu::program::Program;
use vnpu_emu::DRAM_BASE;

fuzz_target!(|data: &[u8]| {
    if let Ok(p) = Program::decode(data, DRAM_BASE, 1 << 30) {
        assert_eq!(p.encode(), data);
    }
});
