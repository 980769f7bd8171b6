//! Property tests: metadata encode/decode round trips for every standard
//! type, decoder robustness, and the lock/unlock count rules.

use proptest::prelude::*;
use vnpu_gralloc::metadata::{Cta861_3, ExtendableType, Smpte2086};
use vnpu_gralloc::{
    pixel_format as pf, usage, AIMapperError, Allocator, BufferDescriptorInfo, Mapper, PlaneLayout,
    PlaneLayoutComponent, Rect, StandardMetadata as M, StandardMetadataType as T,
};

fn ext() -> impl Strategy<Value = ExtendableType> {
    ("[a-zA-Z0-9._]{0,60}", any::<i64>()).prop_map(|(name, value)| ExtendableType { name, value })
}

fn plane() -> impl Strategy<Value = PlaneLayout> {
    (
        prop::collection::vec(
            (ext(), any::<i64>(), any::<i64>()).prop_map(
                |(type_, offset_in_bits, size_in_bits)| PlaneLayoutComponent {
                    type_,
                    offset_in_bits,
                    size_in_bits,
                },
            ),
            0..5,
        ),
        prop::array::uniform8(any::<i64>()),
    )
        .prop_map(|(components, v)| PlaneLayout {
            components,
            offset_in_bytes: v[0],
            sample_increment_in_bits: v[1],
            stride_in_bytes: v[2],
            width_in_samples: v[3],
            height_in_samples: v[4],
            total_size_in_bytes: v[5],
            horizontal_subsampling: v[6],
            vertical_subsampling: v[7],
        })
}

fn rect() -> impl Strategy<Value = Rect> {
    prop::array::uniform4(any::<i32>()).prop_map(|a| Rect {
        left: a[0],
        top: a[1],
        right: a[2],
        bottom: a[3],
    })
}

/// Any finite or non-finite f32 (round trip compares bytes, so NaN is fine).
fn f() -> impl Strategy<Value = f32> {
    any::<u32>().prop_map(f32::from_bits)
}

fn value() -> impl Strategy<Value = M> {
    let blob = || prop::option::of(prop::collection::vec(any::<u8>(), 0..300));
    prop_oneof![
        any::<u64>().prop_map(M::BufferId),
        "\\PC{0,40}".prop_map(M::Name),
        any::<u64>().prop_map(M::Width),
        any::<u64>().prop_map(M::Height),
        any::<u64>().prop_map(M::LayerCount),
        any::<i32>().prop_map(M::PixelFormatRequested),
        any::<u32>().prop_map(M::PixelFormatFourcc),
        any::<u64>().prop_map(M::PixelFormatModifier),
        any::<u64>().prop_map(M::Usage),
        any::<u64>().prop_map(M::AllocationSize),
        any::<u64>().prop_map(M::ProtectedContent),
        ext().prop_map(M::Compression),
        ext().prop_map(M::Interlaced),
        ext().prop_map(M::ChromaSiting),
        prop::collection::vec(plane(), 0..4).prop_map(M::PlaneLayouts),
        prop::collection::vec(rect(), 0..4).prop_map(M::Crop),
        any::<i32>().prop_map(M::Dataspace),
        any::<i32>().prop_map(M::BlendMode),
        prop::option::of(prop::array::uniform10(f()))
            .prop_map(|o| M::Smpte2086(o.map(Smpte2086::from_array))),
        prop::option::of((f(), f())).prop_map(|o| M::Cta861_3(o.map(|(a, b)| Cta861_3 {
            max_content_light_level: a,
            max_frame_average_light_level: b
        }))),
        blob().prop_map(M::Smpte2094_40),
        blob().prop_map(M::Smpte2094_10),
        any::<u32>().prop_map(M::Stride),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn encode_decode_round_trip(v in value()) {
        let t = v.metadata_type();
        let bytes = v.encode();
        let back = M::decode(t, &bytes).expect("decodes");
        // Byte equality (NaN-safe), and value equality when no float is involved.
        prop_assert_eq!(back.encode(), bytes.clone());
        if !matches!(t, T::Smpte2086 | T::Cta861_3) {
            prop_assert_eq!(&back, &v);
        }
        // Truncation and trailing bytes are rejected.
        if !bytes.is_empty() {
            prop_assert!(M::decode(t, &bytes[..bytes.len() - 1]).is_err());
            let mut longer = bytes.clone();
            longer.push(0);
            prop_assert!(M::decode(t, &longer).is_err());
        }
        // Another type's header is rejected.
        let other = T::ALL[(t.value() as usize) % T::ALL.len()];
        if !bytes.is_empty() {
            prop_assert!(M::decode(other, &bytes).is_err());
        }
    }

    #[test]
    fn decoding_garbage_never_panics(ty in 1i64..=23, data in prop::collection::vec(any::<u8>(), 0..400)) {
        let t = T::from_i64(ty).unwrap();
        let _ = M::decode(t, &data);
    }

    #[test]
    fn decoding_header_plus_garbage_never_panics(ty in 1i64..=23, data in prop::collection::vec(any::<u8>(), 0..200)) {
        let t = T::from_i64(ty).unwrap();
        let mut bytes = M::Stride(0).encode()[..69].to_vec();
        bytes[61..69].copy_from_slice(&ty.to_le_bytes());
        bytes.extend_from_slice(&data);
        let _ = M::decode(t, &bytes);
    }
}

#[derive(Debug, Clone, Copy)]
enum Op {
    Lock(usize),
    Unlock(usize),
    Flush(usize),
    Reread(usize),
}

fn op() -> impl Strategy<Value = Op> {
    (0..4u8, 0..2usize).prop_map(|(k, i)| match k {
        0 => Op::Lock(i),
        1 => Op::Unlock(i),
        2 => Op::Flush(i),
        _ => Op::Reread(i),
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// Each import has its own lock count: lock always succeeds, unlock and
    /// flush/reread succeed iff the count is positive, else BAD_BUFFER.
    #[test]
    fn lock_unlock_counts(ops in prop::collection::vec(op(), 0..40)) {
        let rw = usage::CPU_READ_OFTEN | usage::CPU_WRITE_OFTEN;
        let r = Allocator::new().allocate(&BufferDescriptorInfo::new(1024, 1, pf::BLOB, rw), 1).unwrap();
        let m = Mapper::new();
        let hs = [m.import_buffer(r.buffers[0].as_raw()).unwrap(), m.import_buffer(r.buffers[0].as_raw()).unwrap()];
        let mut model = [0u32; 2];
        for o in ops {
            match o {
                Op::Lock(i) => {
                    prop_assert!(m.lock(hs[i], rw, Rect::default(), None).is_ok());
                    model[i] += 1;
                }
                Op::Unlock(i) => {
                    let res = m.unlock(hs[i]);
                    if model[i] > 0 {
                        prop_assert!(res.is_ok());
                        model[i] -= 1;
                    } else {
                        prop_assert_eq!(res.unwrap_err().kind(), AIMapperError::BadBuffer);
                    }
                }
                Op::Flush(i) | Op::Reread(i) => {
                    let res = if matches!(o, Op::Flush(_)) { m.flush_locked_buffer(hs[i]) } else { m.reread_locked_buffer(hs[i]) };
                    prop_assert_eq!(res.is_ok(), model[i] > 0);
                    if let Err(e) = res {
                        prop_assert_eq!(e.kind(), AIMapperError::BadBuffer);
                    }
                }
            }
        }
        for h in hs {
            m.free_buffer(h).unwrap();
            prop_assert_eq!(m.unlock(h).unwrap_err().kind(), AIMapperError::BadBuffer);
        }
    }

    /// Region rules: all-zero = whole buffer; otherwise inside and non-empty.
    #[test]
    fn lock_region_rules(l in -2i32..70, t in -2i32..70, r in -2i32..70, b in -2i32..70) {
        let rw = usage::CPU_READ_OFTEN | usage::CPU_WRITE_OFTEN;
        let a = Allocator::new().allocate(&BufferDescriptorInfo::new(64, 64, pf::RGBA_8888, rw), 1).unwrap();
        let m = Mapper::new();
        let h = m.import_buffer(a.buffers[0].as_raw()).unwrap();
        let rect = Rect { left: l, top: t, right: r, bottom: b };
        let ok = rect == Rect::default() || (l >= 0 && t >= 0 && r > l && b > t && r <= 64 && b <= 64);
        let res = m.lock(h, rw, rect, None);
        prop_assert_eq!(res.is_ok(), ok);
        if let Err(e) = res {
            prop_assert_eq!(e.kind(), AIMapperError::BadValue);
        } else {
            m.unlock(h).unwrap();
        }
        m.free_buffer(h).unwrap();
    }
}

#[test]
fn mapper_bytes_decode_to_typed_values_for_every_type() {
    let rw = usage::CPU_READ_OFTEN | usage::CPU_WRITE_OFTEN;
    for f in [
        pf::RGBA_8888,
        pf::YV12,
        pf::YCBCR_420_888,
        pf::YCBCR_P010,
        pf::BLOB,
    ] {
        let h_px = if f == pf::BLOB { 1 } else { 32 };
        let a = Allocator::new()
            .allocate(
                &BufferDescriptorInfo::new(64, h_px, f, rw).with_name("p"),
                1,
            )
            .unwrap();
        let m = Mapper::new();
        let h = m.import_buffer(a.buffers[0].as_raw()).unwrap();
        for t in T::ALL {
            let need = m.get_standard_metadata(h, t.value(), &mut []).unwrap();
            let mut buf = vec![0u8; need];
            assert_eq!(
                m.get_standard_metadata(h, t.value(), &mut buf).unwrap(),
                need
            );
            assert_eq!(
                M::decode(t, &buf).unwrap(),
                m.get_standard(h, t).unwrap(),
                "{t:?}"
            );
        }
        m.free_buffer(h).unwrap();
    }
}
