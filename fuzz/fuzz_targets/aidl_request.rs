//! The AIDL V4 face's decoding of hostile values: a V4 request (memories of every kind,
//! DataLocations with 64-bit offsets and padding, dimensions), an ExecutionConfig and a
//! PrepareModelConfig's hints, deadlines and durations, built from the fuzzer's bytes and
//! converted to the 1.3 values the core runs. No panic; and what converts holds the
//! invariants the core relies on (every location within its pool, padding included).
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use vnpu_driver::aidl::convert;
use vnpu_driver::aidl::hints;
use vnpu_driver::aidl::{
    Ashmem, DataLocation, ExtensionNameAndPrefix, HardwareBuffer, HardwareBufferDescription,
    MappableFile, Memory, Request, RequestArgument, RequestMemoryPool, TokenValuePair,
};
use vnpu_driver::hal::{self, NativeHandle};

/// Reads the fuzzer's bytes as little-endian fields; zeros once they run out.
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn u8(&mut self) -> u8 {
        let Some((&b, rest)) = self.0.split_first() else {
            return 0;
        };
        self.0 = rest;
        b
    }

    fn i32(&mut self) -> i32 {
        i32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }

    fn i64(&mut self) -> i64 {
        (self.i32() as u32 as i64) | ((self.i32() as i64) << 32)
    }

    /// A small count (0..=max).
    fn count(&mut self, max: u8) -> usize {
        (self.u8() % (max + 1)) as usize
    }
}

fuzz_target!(|data: &[u8]| {
    let mut b = Bytes(data);
    let fd = match hal::Memory::ashmem(4096).ok().and_then(|m| m.handle.fds.first().cloned()) {
        Some(fd) => fd,
        None => return,
    };
    let memory = |b: &mut Bytes<'_>| match b.u8() % 3 {
        0 => Memory::Ashmem(Ashmem {
            fd: Arc::clone(&fd),
            size: b.i64(),
        }),
        1 => Memory::MappableFile(MappableFile {
            length: b.i64(),
            prot: b.i32(),
            fd: Arc::clone(&fd),
            offset: b.i64(),
        }),
        _ => Memory::HardwareBuffer(HardwareBuffer {
            description: HardwareBufferDescription {
                width: b.i32(),
                height: b.i32(),
                layers: b.i32(),
                format: if b.u8() % 2 == 0 { 0x21 } else { b.i32() },
                usage: b.i64(),
                stride: b.i32(),
            },
            handle: NativeHandle {
                fds: vec![Arc::clone(&fd)],
                ints: (0..b.count(4)).map(|_| b.i32()).collect(),
            },
        }),
    };
    let pools: Vec<RequestMemoryPool> = (0..b.count(3))
        .map(|_| match b.u8() % 2 {
            0 => RequestMemoryPool::Pool(memory(&mut b)),
            _ => RequestMemoryPool::Token(b.i32()),
        })
        .collect();
    let arg = |b: &mut Bytes<'_>| RequestArgument {
        has_no_value: b.u8() % 4 == 0,
        location: DataLocation {
            pool_index: b.i32() % 5,
            offset: b.i64(),
            length: b.i64(),
            padding: b.i64(),
        },
        dimensions: (0..b.count(4)).map(|_| b.i32()).collect(),
    };
    let request = Request {
        inputs: (0..b.count(3)).map(|_| arg(&mut b)).collect(),
        outputs: (0..b.count(3)).map(|_| arg(&mut b)).collect(),
        pools,
    };
    if let Ok(converted) = convert::request(&request) {
        assert_eq!(converted.inputs.len(), request.inputs.len());
        assert_eq!(converted.pools.len(), request.pools.len());
        for (v4, a) in request
            .inputs
            .iter()
            .chain(&request.outputs)
            .zip(converted.inputs.iter().chain(&converted.outputs))
        {
            let room = match request.pools.get(v4.location.pool_index as usize) {
                Some(RequestMemoryPool::Pool(Memory::Ashmem(m))) => Some(m.size),
                Some(RequestMemoryPool::Pool(Memory::MappableFile(m))) => Some(m.length),
                _ => None,
            };
            if let (Some(room), false) = (room, a.has_no_value) {
                let end = v4.location.offset + v4.location.length + v4.location.padding;
                assert!(end <= room, "a location past its pool converted");
            }
            assert!(v4.location.padding >= 0);
        }
        // And the 1.3 validator takes the converted request without panicking.
        let model = hal::Model::default();
        let _ = vnpu_driver::validate::validate_request(&converted, &model, true);
    }
    let pairs: Vec<TokenValuePair> = (0..b.count(4))
        .map(|_| TokenValuePair {
            token: b.i32(),
            value: (0..b.count(8)).map(|_| b.u8()).collect(),
        })
        .collect();
    let prefixes: Vec<ExtensionNameAndPrefix> = (0..b.count(3))
        .map(|_| ExtensionNameAndPrefix {
            name: format!("vendor.{}", b.u8() % 4),
            prefix: b.u8() as u16,
        })
        .collect();
    if let Ok(h) = hints::check(&pairs, &prefixes) {
        assert_eq!(h.ignored, pairs.len());
    }
    for ns in [b.i64(), b.i64(), -1, 0, i64::MIN, i64::MAX] {
        let _ = convert::deadline(ns);
        assert_eq!(convert::duration(ns).is_ok(), ns >= -1);
        let _ = convert::loop_timeout(ns);
    }
});
