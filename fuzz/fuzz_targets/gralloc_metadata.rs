//! Fuzzes metadata decoding for every standard type (and the vendor types
//! through the mapper). Accepted inputs must re-encode to the same bytes;
//! settable types are also pushed through `set*Metadata` and read back.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use vnpu_gralloc::metadata::vendor;
use vnpu_gralloc::{
    pixel_format as pf, usage, Allocator, BufferDescriptorInfo, BufferHandle, Mapper, MetadataType,
    NativeHandle, StandardMetadata, StandardMetadataType,
};

fn buffer() -> BufferHandle {
    static B: OnceLock<(NativeHandle, usize)> = OnceLock::new();
    let (_, h) = B.get_or_init(|| {
        let rw = usage::CPU_READ_OFTEN | usage::CPU_WRITE_OFTEN;
        let raw = Allocator::new()
            .allocate(&BufferDescriptorInfo::new(16, 16, pf::RGBA_8888, rw), 1)
            .expect("allocate")
            .buffers
            .remove(0);
        let h = Mapper::new().import_buffer(raw.as_raw()).expect("import");
        (raw, h.as_ptr() as usize)
    });
    BufferHandle::from_ptr(*h as *const _)
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, bytes)) = data.split_first() else {
        return;
    };
    let m = Mapper::new();
    let h = buffer();
    if sel >= 0xF0 {
        // Vendor namespace through the mapper.
        let t = MetadataType {
            name: vendor::NAME,
            value: (sel - 0xF0) as i64,
        };
        if m.set_metadata(h, t, bytes).is_ok() {
            let mut out = vec![0u8; 2048];
            let n = m.get_metadata(h, t, &mut out).expect("get after set");
            assert_eq!(&out[..n], bytes);
        }
        return;
    }
    let Some(t) = StandardMetadataType::from_i64((sel % 24) as i64) else {
        assert!(m
            .set_standard_metadata(h, (sel % 24) as i64, bytes)
            .is_err());
        return;
    };
    if let Ok(v) = StandardMetadata::decode(t, bytes) {
        assert_eq!(v.metadata_type(), t);
        assert_eq!(v.encode(), bytes, "re-encoding must be exact");
    }
    if t.is_settable() && m.set_standard_metadata(h, t.value(), bytes).is_ok() {
        let mut out = vec![0u8; 16384];
        let n = m
            .get_standard_metadata(h, t.value(), &mut out)
            .expect("get after set");
        assert_eq!(&out[..n], bytes);
    }
});
