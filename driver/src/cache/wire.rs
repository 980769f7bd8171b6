//! A bounds-checked little-endian byte encoding for the cache files: a [`Writer`] that
//! appends and a [`Reader`] that never reads past its input, never panics and never
//! allocates more than the input could describe.

use super::CacheError;

/// Appends little-endian values to a buffer.
#[derive(Debug, Default)]
pub struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    /// An empty writer.
    pub fn new() -> Writer {
        Writer::default()
    }

    /// The bytes written so far.
    pub fn into_bytes(self) -> Vec<u8> {
        self.buf
    }

    /// One byte.
    pub fn u8(&mut self, v: u8) {
        self.buf.push(v);
    }

    /// A bool as one byte.
    pub fn bool(&mut self, v: bool) {
        self.u8(v as u8);
    }

    /// A u32.
    pub fn u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    /// An i32.
    pub fn i32(&mut self, v: i32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    /// A u64.
    pub fn u64(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    /// An f32 by its bits.
    pub fn f32(&mut self, v: f32) {
        self.u32(v.to_bits());
    }

    /// A length-prefixed byte string.
    pub fn bytes(&mut self, v: &[u8]) {
        self.u64(v.len() as u64);
        self.buf.extend_from_slice(v);
    }

    /// A length-prefixed list of u32.
    pub fn u32s(&mut self, v: &[u32]) {
        self.u64(v.len() as u64);
        v.iter().for_each(|&x| self.u32(x));
    }

    /// A length-prefixed list of usize, as u64.
    pub fn usizes(&mut self, v: &[usize]) {
        self.u64(v.len() as u64);
        v.iter().for_each(|&x| self.u64(x as u64));
    }

    /// A length-prefixed list, each item written by `f`.
    pub fn list<T>(&mut self, items: &[T], mut f: impl FnMut(&mut Writer, &T)) {
        self.u64(items.len() as u64);
        for it in items {
            f(self, it);
        }
    }
}

/// Reads what a [`Writer`] wrote; every read is checked against the remaining input.
#[derive(Debug)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

/// The most items a list is sized for before they are read.
const MAX_PREALLOC: usize = 1 << 16;

fn short() -> CacheError {
    CacheError::Malformed("truncated")
}

impl<'a> Reader<'a> {
    /// A reader over `buf`.
    pub fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader { buf, pos: 0 }
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Fails unless everything was read.
    pub fn finish(&self) -> Result<(), CacheError> {
        if self.remaining() == 0 {
            Ok(())
        } else {
            Err(CacheError::Malformed("trailing bytes"))
        }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], CacheError> {
        let end = self.pos.checked_add(n).ok_or_else(short)?;
        let s = self.buf.get(self.pos..end).ok_or_else(short)?;
        self.pos = end;
        Ok(s)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], CacheError> {
        self.take(N)?.try_into().map_err(|_| short())
    }

    /// One byte.
    pub fn u8(&mut self) -> Result<u8, CacheError> {
        Ok(self.array::<1>()?[0])
    }

    /// A bool (0 or 1).
    pub fn bool(&mut self) -> Result<bool, CacheError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(CacheError::Malformed("bool")),
        }
    }

    /// A u32.
    pub fn u32(&mut self) -> Result<u32, CacheError> {
        self.array().map(u32::from_le_bytes)
    }

    /// An i32.
    pub fn i32(&mut self) -> Result<i32, CacheError> {
        self.array().map(i32::from_le_bytes)
    }

    /// A u64.
    pub fn u64(&mut self) -> Result<u64, CacheError> {
        self.array().map(u64::from_le_bytes)
    }

    /// An f32 by its bits.
    pub fn f32(&mut self) -> Result<f32, CacheError> {
        self.u32().map(f32::from_bits)
    }

    /// A list length whose items take at least `min_item` bytes each: a length the rest
    /// of the input cannot hold is refused before anything is allocated.
    pub fn len(&mut self, min_item: usize) -> Result<usize, CacheError> {
        let n = self.u64()?;
        let n = usize::try_from(n).map_err(|_| short())?;
        if n.saturating_mul(min_item.max(1)) > self.remaining() {
            return Err(short());
        }
        Ok(n)
    }

    /// A length-prefixed byte string.
    pub fn bytes(&mut self) -> Result<Vec<u8>, CacheError> {
        let n = self.len(1)?;
        Ok(self.take(n)?.to_vec())
    }

    /// A length-prefixed byte string, borrowed from the input.
    pub fn byte_slice(&mut self) -> Result<&'a [u8], CacheError> {
        let n = self.len(1)?;
        self.take(n)
    }

    /// A length-prefixed list of u32 into `out` (cleared first): a caller reading many
    /// short lists it does not keep reuses one buffer.
    pub fn u32s_into(&mut self, out: &mut Vec<u32>) -> Result<(), CacheError> {
        let n = self.len(4)?;
        let raw = self.take(n * 4)?;
        out.clear();
        out.extend(
            raw.chunks_exact(4)
                .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])),
        );
        Ok(())
    }

    /// A length-prefixed list of u32.
    pub fn u32s(&mut self) -> Result<Vec<u32>, CacheError> {
        let n = self.len(4)?;
        // One bounds check and one exact allocation for the whole list (a loader parses
        // thousands of these: collecting through `Result` grows the vector as it goes).
        let raw = self.take(n * 4)?;
        Ok(raw
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }

    /// A length-prefixed list of usize.
    pub fn usizes(&mut self) -> Result<Vec<usize>, CacheError> {
        let n = self.len(8)?;
        let raw = self.take(n * 8)?;
        let mut out = Vec::with_capacity(n);
        for c in raw.chunks_exact(8) {
            let v = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
            out.push(usize::try_from(v).map_err(|_| CacheError::Malformed("usize"))?);
        }
        Ok(out)
    }

    /// A length-prefixed list, each item read by `f` (taking at least `min_item` bytes).
    pub fn list<T>(
        &mut self,
        min_item: usize,
        mut f: impl FnMut(&mut Reader<'a>) -> Result<T, CacheError>,
    ) -> Result<Vec<T>, CacheError> {
        let n = self.len(min_item)?;
        // Sized up front (growing it costs a loader thousands of reallocations), but
        // never by more than a bounded count: an item may be far larger in memory than
        // the `min_item` bytes it takes in the input.
        let mut out = Vec::with_capacity(n.min(MAX_PREALLOC));
        for _ in 0..n {
            out.push(f(self)?);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn round_trip() {
        let mut w = Writer::new();
        w.u8(7);
        w.bool(true);
        w.i32(-5);
        w.f32(1.5);
        w.bytes(b"abc");
        w.u32s(&[1, 2]);
        w.usizes(&[3]);
        let b = w.into_bytes();
        let mut r = Reader::new(&b);
        assert_eq!(r.u8().unwrap(), 7);
        assert!(r.bool().unwrap());
        assert_eq!(r.i32().unwrap(), -5);
        assert_eq!(r.f32().unwrap(), 1.5);
        assert_eq!(r.bytes().unwrap(), b"abc");
        assert_eq!(r.u32s().unwrap(), vec![1, 2]);
        assert_eq!(r.usizes().unwrap(), vec![3]);
        r.finish().unwrap();
        let mut w = Writer::new();
        w.bytes(b"xy");
        w.u32s(&[4, 5, 6]);
        let b = w.into_bytes();
        let mut r = Reader::new(&b);
        assert_eq!(r.byte_slice().unwrap(), b"xy");
        let mut out = vec![9];
        r.u32s_into(&mut out).unwrap();
        assert_eq!(out, vec![4, 5, 6]);
        r.finish().unwrap();
    }

    proptest! {
        /// Arbitrary input never panics and never over-allocates.
        #[test]
        fn arbitrary_input_is_refused_cleanly(b in proptest::collection::vec(any::<u8>(), 0..64)) {
            let mut r = Reader::new(&b);
            let _ = r.u32s();
            let _ = r.bytes();
            let _ = r.list(1, |r| r.u8());
        }
    }
}
