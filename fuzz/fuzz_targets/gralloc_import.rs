//! Fuzzes `Mapper::import_buffer` with raw handles built from the input:
//! counts, ints (raw or xor'ed into a genuine handle's) and fd choices. Any
//! import that succeeds is locked, read end to end, queried and freed.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use vnpu_gralloc::{
    pixel_format as pf, usage, Allocator, BufferDescriptorInfo, Mapper, NativeHandle, RawHandle,
    Rect, StandardMetadataType,
};

struct Genuine {
    rgba: NativeHandle,
    yv12: NativeHandle,
}

fn genuine() -> &'static Genuine {
    static G: OnceLock<Genuine> = OnceLock::new();
    G.get_or_init(|| {
        let a = Allocator::new();
        let rw = usage::CPU_READ_OFTEN | usage::CPU_WRITE_OFTEN;
        let one = |w, h, f| {
            a.allocate(&BufferDescriptorInfo::new(w, h, f, rw).with_reserved(16), 1)
                .expect("allocate")
                .buffers
                .remove(0)
        };
        Genuine {
            rgba: one(32, 8, pf::RGBA_8888),
            yv12: one(32, 8, pf::YV12),
        }
    })
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    let g = genuine();
    let base = if data[0] & 1 == 0 { &g.rgba } else { &g.yv12 };
    let xor_mode = data[0] & 2 != 0;
    let version = if data[0] & 4 != 0 { data[1] as i32 } else { 12 };
    let n_fds = (data[2] % 4) as usize;
    let n_ints = if data[3] < 200 {
        base.ints().len()
    } else {
        (data[3] - 200) as usize
    };
    let rest = &data[4..];
    let mut words = rest
        .chunks_exact(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]));
    let mut ints = Vec::with_capacity(n_ints);
    for i in 0..n_ints {
        let g = base.ints().get(i).copied().unwrap_or(0);
        let w = words.next().unwrap_or(0);
        ints.push(if xor_mode {
            g ^ w
        } else if w == 0 {
            g
        } else {
            w
        });
    }
    let pool = [
        base.fds()[0],
        base.fds()[1],
        g.rgba.fds()[0],
        g.yv12.fds()[1],
        -1,
        0,
        2,
    ];
    let fds: Vec<i32> = (0..n_fds)
        .map(|i| {
            let sel = rest
                .get(rest.len().saturating_sub(1 + i))
                .copied()
                .unwrap_or(i as u8);
            if sel < 128 {
                base.fds().get(i).copied().unwrap_or(-1)
            } else {
                pool[sel as usize % pool.len()]
            }
        })
        .collect();
    let m = Mapper::new();
    if let Ok(h) = m.import_buffer(RawHandle {
        version,
        fds: &fds,
        ints: &ints,
    }) {
        let info = m.buffer_info(h).expect("imported");
        if let Ok(p) = m.lock(h, usage::CPU_READ_OFTEN, Rect::default(), None) {
            let mut sum = 0u8;
            for off in [0, info.size / 2, info.size - 1] {
                // SAFETY: offsets inside the mapped, locked pixel memory.
                sum ^= unsafe { p.add(off).read_volatile() };
            }
            std::hint::black_box(sum);
            m.unlock(h).expect("unlock");
        }
        let mut buf = [0u8; 1024];
        for t in StandardMetadataType::ALL {
            let _ = m.get_standard_metadata(h, t.value(), &mut buf);
        }
        let _ = m.get_reserved_region(h);
        m.free_buffer(h).expect("free");
    }
});
