//! NumPy `.npy` files (format versions 1-3): little-endian, C order, the element types
//! tensors have. A file is hostile input: the header is parsed strictly and the data must
//! hold exactly the shape's bytes.

use crate::hal::OperandType;

/// An element type a `.npy` file may hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dtype {
    /// `<f4`
    F32,
    /// `<f2`
    F16,
    /// `<i4`
    I32,
    /// `<i2`
    I16,
    /// `|i1`
    I8,
    /// `|u1`
    U8,
    /// `|b1`
    Bool,
}

impl Dtype {
    const ALL: [(Dtype, &'static str, usize); 7] = [
        (Dtype::F32, "<f4", 4),
        (Dtype::F16, "<f2", 2),
        (Dtype::I32, "<i4", 4),
        (Dtype::I16, "<i2", 2),
        (Dtype::I8, "|i1", 1),
        (Dtype::U8, "|u1", 1),
        (Dtype::Bool, "|b1", 1),
    ];

    /// Bytes per element.
    pub fn size(self) -> usize {
        Self::ALL.iter().find(|a| a.0 == self).map_or(1, |a| a.2)
    }

    fn descr(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|a| a.0 == self)
            .map_or("|u1", |a| a.1)
    }

    /// The element type holding a HAL operand type's stored values.
    pub fn of(t: OperandType) -> Option<Dtype> {
        Some(match t {
            OperandType::TENSOR_FLOAT32 => Dtype::F32,
            OperandType::TENSOR_FLOAT16 => Dtype::F16,
            OperandType::TENSOR_INT32 => Dtype::I32,
            OperandType::TENSOR_QUANT16_SYMM => Dtype::I16,
            OperandType::TENSOR_QUANT8_ASYMM_SIGNED
            | OperandType::TENSOR_QUANT8_SYMM
            | OperandType::TENSOR_QUANT8_SYMM_PER_CHANNEL => Dtype::I8,
            OperandType::TENSOR_QUANT8_ASYMM => Dtype::U8,
            OperandType::TENSOR_BOOL8 => Dtype::Bool,
            _ => return None,
        })
    }
}

/// An array: element type, shape and little-endian data.
#[derive(Clone, Debug, PartialEq)]
pub struct Array {
    /// Element type.
    pub dtype: Dtype,
    /// Shape.
    pub shape: Vec<usize>,
    /// `product(shape) * dtype.size()` bytes.
    pub data: Vec<u8>,
}

/// Why a `.npy` file does not read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("not a supported .npy file: {0}")]
pub struct NpyError(pub String);

fn err<T>(m: impl Into<String>) -> Result<T, NpyError> {
    Err(NpyError(m.into()))
}

const MAGIC: &[u8] = b"\x93NUMPY";
/// The largest header read.
const MAX_HEADER: usize = 1 << 16;

/// The value of `'key': value` in a header dict (up to the next top-level comma).
fn field<'h>(header: &'h str, key: &str) -> Option<&'h str> {
    let at = header.find(&format!("'{key}'"))? + key.len() + 2;
    let rest = header[at..].trim_start().strip_prefix(':')?.trim_start();
    let end = if rest.starts_with('(') {
        rest.find(')')? + 1
    } else {
        rest.find([',', '}']).unwrap_or(rest.len())
    };
    Some(rest[..end].trim())
}

/// Parses a `.npy` file.
pub fn read(bytes: &[u8]) -> Result<Array, NpyError> {
    if bytes.len() < 10 || &bytes[..6] != MAGIC {
        return err("no \\x93NUMPY magic");
    }
    let (len, start) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 if bytes.len() >= 12 => (
            u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
            12,
        ),
        v => return err(format!("format version {v}")),
    };
    if len > MAX_HEADER {
        return err("header too long");
    }
    let Some(header) = bytes.get(start..start + len) else {
        return err("truncated header");
    };
    let Ok(header) = std::str::from_utf8(header) else {
        return err("header is not text");
    };
    let descr = field(header, "descr").map(|d| d.trim_matches(['\'', '"']));
    let Some(dtype) = Dtype::ALL
        .iter()
        .find(|a| {
            Some(a.1) == descr
                || (a.2 == 1 && descr.is_some_and(|d| d.len() == 3 && d[1..] == a.1[1..]))
        })
        .map(|a| a.0)
    else {
        return err(format!("element type {descr:?}"));
    };
    if field(header, "fortran_order") != Some("False") {
        return err("only C order");
    }
    let Some(shape) = field(header, "shape") else {
        return err("no shape");
    };
    let shape: Vec<usize> = shape
        .trim_matches(['(', ')'])
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<usize>()
                .map_err(|_| NpyError(format!("dimension {s:?}")))
        })
        .collect::<Result<_, _>>()?;
    let n = shape
        .iter()
        .try_fold(dtype.size(), |a, &d| a.checked_mul(d))
        .ok_or_else(|| NpyError("size overflows".into()))?;
    let data = &bytes[start + len..];
    if data.len() != n {
        return err(format!(
            "{} data bytes for shape {shape:?} ({n} expected)",
            data.len()
        ));
    }
    Ok(Array {
        dtype,
        shape,
        data: data.to_vec(),
    })
}

/// The `.npy` (version 1.0) bytes of `a`.
pub fn write(a: &Array) -> Vec<u8> {
    let dims: Vec<String> = a.shape.iter().map(|d| d.to_string()).collect();
    let shape = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let mut header = format!(
        "{{'descr': '{}', 'fortran_order': False, 'shape': {shape}, }}",
        a.dtype.descr()
    );
    // Data starts 64-byte aligned; the header ends with a newline.
    let total = (10 + header.len() + 1).next_multiple_of(64);
    header.push_str(&" ".repeat(total - 10 - header.len() - 1));
    header.push('\n');
    let mut out = Vec::with_capacity(total + a.data.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[1, 0]);
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(&a.data);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn reads_what_numpy_writes() {
        let mut f = b"\x93NUMPY\x01\x00".to_vec();
        let h = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 1), }          \n";
        f.extend_from_slice(&(h.len() as u16).to_le_bytes());
        f.extend_from_slice(h.as_bytes());
        f.extend_from_slice(&1.5f32.to_le_bytes());
        f.extend_from_slice(&(-2f32).to_le_bytes());
        let a = read(&f).unwrap();
        assert_eq!(a.dtype, Dtype::F32);
        assert_eq!(a.shape, [2, 1]);
        assert_eq!(a.data.len(), 8);
    }

    #[test]
    fn refuses_bad_files() {
        assert!(read(b"").is_err());
        assert!(read(b"\x93NUMPY\x01\x00\xff\xff").is_err());
        let a = Array {
            dtype: Dtype::I8,
            shape: vec![3],
            data: vec![1, 2, 3],
        };
        let mut f = write(&a);
        f.pop();
        assert!(read(&f).is_err(), "short data");
    }

    proptest! {
        #[test]
        fn write_then_read_is_identity(shape in proptest::collection::vec(0usize..5, 0..4), k in 0usize..7) {
            let dtype = Dtype::ALL[k].0;
            let n: usize = shape.iter().product::<usize>() * dtype.size();
            let a = Array { dtype, shape, data: (0..n).map(|i| i as u8).collect() };
            let f = write(&a);
            prop_assert_eq!(f.len() % 64, a.data.len() % 64);
            prop_assert_eq!(read(&f).unwrap(), a);
        }

        #[test]
        fn arbitrary_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = read(&b);
        }
    }
}
