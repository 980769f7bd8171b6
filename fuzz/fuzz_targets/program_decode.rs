//! The device's program decoder on arbitrary bytes (tensor layouts included): it must
//! reject or accept, never panic, and whatever it accepts must re-encode to the same
//! bytes. The driver's relocation of saved programs walks the same bytes: never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vnpu_emu::program::Program;
use vnpu_emu::DRAM_BASE;

fuzz_target!(|data: &[u8]| {
    if let Ok(p) = Program::decode(data, DRAM_BASE, 1 << 30) {
        assert_eq!(p.encode(), data);
    }
    let mut moved = data.to_vec();
    let _ = vnpu_emu::program::relocate(&mut moved, |addr, len| addr.checked_add(len));
});
