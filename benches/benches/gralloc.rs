//! gralloc benchmarks: lock+unlock of an imported BLOB (goal ≤ 100 ns, no
//! syscall on that path), getStandardMetadata, importBuffer.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use vnpu_gralloc::ffi::{AIMapper, AIMapper_loadIMapper};
use vnpu_gralloc::{
    pixel_format as pf, usage, Allocator, BufferDescriptorInfo, Mapper, Rect,
    StandardMetadataType as T,
};

const RW: u64 = usage::CPU_READ_OFTEN | usage::CPU_WRITE_OFTEN;

fn benches(c: &mut Criterion) {
    let m = Mapper::new();
    let blob = Allocator::new()
        .allocate(&BufferDescriptorInfo::new(1 << 16, 1, pf::BLOB, RW), 1)
        .unwrap();
    let h = m.import_buffer(blob.buffers[0].as_raw()).unwrap();

    c.bench_function("gralloc/lock_unlock_blob", |b| {
        b.iter(|| {
            let p = m.lock(black_box(h), RW, Rect::default(), None).unwrap();
            black_box(p);
            m.unlock(h).unwrap();
        })
    });

    let mut table: *mut AIMapper = std::ptr::null_mut();
    // SAFETY: valid out pointer.
    unsafe { AIMapper_loadIMapper(&mut table) };
    // SAFETY: the loader returns a pointer to a static table.
    let table = unsafe { &*table };
    c.bench_function("gralloc/lock_unlock_blob_c_abi", |b| {
        b.iter(|| {
            let mut out = std::ptr::null_mut();
            let mut fence = -1;
            // SAFETY: imported handle and valid out pointers.
            unsafe {
                (table.v5.lock)(black_box(h.as_ptr()), RW, Rect::default(), -1, &mut out);
                (table.v5.unlock)(h.as_ptr(), &mut fence);
            }
            black_box(out);
        })
    });

    let rgba = Allocator::new()
        .allocate(&BufferDescriptorInfo::new(64, 64, pf::RGBA_8888, RW), 1)
        .unwrap();
    let hr = m.import_buffer(rgba.buffers[0].as_raw()).unwrap();
    let mut buf = [0u8; 1024];
    for (name, t) in [
        ("buffer_id", T::BufferId),
        ("dataspace", T::Dataspace),
        ("plane_layouts", T::PlaneLayouts),
    ] {
        c.bench_function(&format!("gralloc/get_standard_metadata/{name}"), |b| {
            b.iter(|| {
                black_box(
                    m.get_standard_metadata(black_box(hr), t.value(), &mut buf)
                        .unwrap(),
                )
            })
        });
    }

    c.bench_function("gralloc/import_free_buffer", |b| {
        b.iter(|| {
            let h = m
                .import_buffer(black_box(rgba.buffers[0].as_raw()))
                .unwrap();
            m.free_buffer(h).unwrap();
        })
    });

    m.free_buffer(hr).unwrap();
    m.free_buffer(h).unwrap();
}

criterion_group!(gralloc, benches);
criterion_main!(gralloc);
