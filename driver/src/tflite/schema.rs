//! The subset of the TFLite FlatBuffer schema (`schema.fbs`, file identifier "TFL3") the
//! importer reads: Model, OperatorCode, SubGraph, Tensor, QuantizationParameters, Buffer,
//! Operator and the builtin options of the operators it maps.
//!
//! A file is verified whole with the `flatbuffers` crate's verifier (every offset, vtable,
//! vector and string of these tables in bounds, depth and table count bounded) before
//! anything is read; then [`Table`] reads fields with bounds-checked, safe accessors (no
//! `unsafe`: each read checks again, so even a verifier gap cannot read out of bounds).
//! Field slots are the schema's: field `k` of a table at vtable offset `4 + 2k`.

use flatbuffers::{
    ForwardsUOffset, InvalidFlatbuffer, Vector, Verifiable, Verifier, VerifierOptions,
};

use super::ImportError;

/// The file identifier at bytes 4..8.
pub const IDENTIFIER: &[u8; 4] = b"TFL3";

/// Vtable slots of the tables read.
pub mod slot {
    /// `Model`.
    pub mod model {
        /// `operator_codes: [OperatorCode]`.
        pub const OPERATOR_CODES: u16 = 6;
        /// `subgraphs: [SubGraph]`.
        pub const SUBGRAPHS: u16 = 8;
        /// `buffers: [Buffer]`.
        pub const BUFFERS: u16 = 12;
    }
    /// `OperatorCode`.
    pub mod operator_code {
        /// `deprecated_builtin_code: byte`.
        pub const DEPRECATED_BUILTIN_CODE: u16 = 4;
        /// `custom_code: string`.
        pub const CUSTOM_CODE: u16 = 6;
        /// `builtin_code: BuiltinOperator (int)`.
        pub const BUILTIN_CODE: u16 = 10;
    }
    /// `SubGraph`.
    pub mod subgraph {
        /// `tensors: [Tensor]`.
        pub const TENSORS: u16 = 4;
        /// `inputs: [int]`.
        pub const INPUTS: u16 = 6;
        /// `outputs: [int]`.
        pub const OUTPUTS: u16 = 8;
        /// `operators: [Operator]`.
        pub const OPERATORS: u16 = 10;
    }
    /// `Tensor`.
    pub mod tensor {
        /// `shape: [int]`.
        pub const SHAPE: u16 = 4;
        /// `type: TensorType (byte)`.
        pub const TYPE: u16 = 6;
        /// `buffer: uint`.
        pub const BUFFER: u16 = 8;
        /// `name: string`.
        pub const NAME: u16 = 10;
        /// `quantization: QuantizationParameters`.
        pub const QUANTIZATION: u16 = 12;
        /// `sparsity: SparsityParameters`.
        pub const SPARSITY: u16 = 16;
        /// `shape_signature: [int]` (-1 for a dimension only known at run time).
        pub const SHAPE_SIGNATURE: u16 = 18;
    }
    /// `SparsityParameters`.
    pub mod sparsity {
        /// `traversal_order: [int]`.
        pub const TRAVERSAL_ORDER: u16 = 4;
        /// `block_map: [int]`.
        pub const BLOCK_MAP: u16 = 6;
        /// `dim_metadata: [DimensionMetadata]`.
        pub const DIM_METADATA: u16 = 8;
    }
    /// `DimensionMetadata`.
    pub mod dimension {
        /// `format: DimensionType` (DENSE 0, SPARSE_CSR 1).
        pub const FORMAT: u16 = 4;
        /// `dense_size: int`.
        pub const DENSE_SIZE: u16 = 6;
        /// `array_segments_type: SparseIndexVector`.
        pub const SEGMENTS_TYPE: u16 = 8;
        /// `array_segments`.
        pub const SEGMENTS: u16 = 10;
        /// `array_indices_type: SparseIndexVector`.
        pub const INDICES_TYPE: u16 = 12;
        /// `array_indices`.
        pub const INDICES: u16 = 14;
    }
    /// `Int32Vector`, `Uint16Vector`, `Uint8Vector` (the `SparseIndexVector` union's
    /// members: 1, 2, 3).
    pub mod index_vector {
        /// `values`.
        pub const VALUES: u16 = 4;
    }
    /// `QuantizationParameters`.
    pub mod quantization {
        /// `scale: [float]`.
        pub const SCALE: u16 = 8;
        /// `zero_point: [long]`.
        pub const ZERO_POINT: u16 = 10;
        /// `quantized_dimension: int`.
        pub const QUANTIZED_DIMENSION: u16 = 16;
    }
    /// `Buffer`.
    pub mod buffer {
        /// `data: [ubyte]`.
        pub const DATA: u16 = 4;
        /// `offset: ulong`: the data lies outside the FlatBuffer, at this offset from the
        /// start of the file (written for large models, and by some tools for any).
        pub const OFFSET: u16 = 6;
        /// `size: ulong`: the bytes at `offset`.
        pub const SIZE: u16 = 8;
    }
    /// `Operator`.
    pub mod operator {
        /// `opcode_index: uint`.
        pub const OPCODE_INDEX: u16 = 4;
        /// `inputs: [int]`.
        pub const INPUTS: u16 = 6;
        /// `outputs: [int]`.
        pub const OUTPUTS: u16 = 8;
        /// `builtin_options_type: BuiltinOptions (ubyte)`.
        pub const OPTIONS_TYPE: u16 = 10;
        /// `builtin_options: BuiltinOptions`.
        pub const OPTIONS: u16 = 12;
        /// `custom_options: [ubyte]` (a custom operator's own encoding).
        pub const CUSTOM_OPTIONS: u16 = 14;
    }
}

/// Table markers for the verifier (each lists the fields the importer reads).
macro_rules! verified_table {
    ($name:ident { $($field:literal : $slot:expr => $ty:ty),* $(,)? }) => {
        struct $name;
        impl Verifiable for $name {
            fn run_verifier(v: &mut Verifier, pos: usize) -> Result<(), InvalidFlatbuffer> {
                v.visit_table(pos)?
                    $(.visit_field::<$ty>($field, $slot, false)?)*
                    .finish();
                Ok(())
            }
        }
    };
}

type Ints<'a> = ForwardsUOffset<Vector<'a, i32>>;
type Tables<'a, T> = ForwardsUOffset<Vector<'a, ForwardsUOffset<T>>>;

verified_table!(OperatorCodeV {
    "deprecated_builtin_code": slot::operator_code::DEPRECATED_BUILTIN_CODE => i8,
    "custom_code": slot::operator_code::CUSTOM_CODE => ForwardsUOffset<&str>,
    "builtin_code": slot::operator_code::BUILTIN_CODE => i32,
});
verified_table!(QuantizationV {
    "scale": slot::quantization::SCALE => ForwardsUOffset<Vector<'_, f32>>,
    "zero_point": slot::quantization::ZERO_POINT => ForwardsUOffset<Vector<'_, i64>>,
    "quantized_dimension": slot::quantization::QUANTIZED_DIMENSION => i32,
});
verified_table!(Int32VectorV {
    "values": slot::index_vector::VALUES => ForwardsUOffset<Vector<'_, i32>>,
});
verified_table!(Uint16VectorV {
    "values": slot::index_vector::VALUES => ForwardsUOffset<Vector<'_, u16>>,
});
verified_table!(Uint8VectorV {
    "values": slot::index_vector::VALUES => ForwardsUOffset<Vector<'_, u8>>,
});
/// A `SparseIndexVector` union member, by its type byte.
fn verify_index_vector(
    t: u8,
    v: &mut Verifier<'_, '_>,
    pos: usize,
) -> Result<(), InvalidFlatbuffer> {
    match t {
        1 => v.verify_union_variant::<ForwardsUOffset<Int32VectorV>>("Int32Vector", pos),
        2 => v.verify_union_variant::<ForwardsUOffset<Uint16VectorV>>("Uint16Vector", pos),
        3 => v.verify_union_variant::<ForwardsUOffset<Uint8VectorV>>("Uint8Vector", pos),
        // An unknown member is refused when read.
        _ => Ok(()),
    }
}
struct DimensionMetadataV;
impl Verifiable for DimensionMetadataV {
    fn run_verifier(v: &mut Verifier, pos: usize) -> Result<(), InvalidFlatbuffer> {
        use slot::dimension as d;
        v.visit_table(pos)?
            .visit_field::<i8>("format", d::FORMAT, false)?
            .visit_field::<i32>("dense_size", d::DENSE_SIZE, false)?
            .visit_union::<u8, _>(
                "array_segments_type",
                d::SEGMENTS_TYPE,
                "array_segments",
                d::SEGMENTS,
                false,
                verify_index_vector,
            )?
            .visit_union::<u8, _>(
                "array_indices_type",
                d::INDICES_TYPE,
                "array_indices",
                d::INDICES,
                false,
                verify_index_vector,
            )?
            .finish();
        Ok(())
    }
}
verified_table!(SparsityV {
    "traversal_order": slot::sparsity::TRAVERSAL_ORDER => Ints<'_>,
    "block_map": slot::sparsity::BLOCK_MAP => Ints<'_>,
    "dim_metadata": slot::sparsity::DIM_METADATA => Tables<'_, DimensionMetadataV>,
});
verified_table!(TensorV {
    "shape": slot::tensor::SHAPE => Ints<'_>,
    "type": slot::tensor::TYPE => i8,
    "buffer": slot::tensor::BUFFER => u32,
    "name": slot::tensor::NAME => ForwardsUOffset<&str>,
    "quantization": slot::tensor::QUANTIZATION => ForwardsUOffset<QuantizationV>,
    "sparsity": slot::tensor::SPARSITY => ForwardsUOffset<SparsityV>,
    "shape_signature": slot::tensor::SHAPE_SIGNATURE => Ints<'_>,
});
verified_table!(BufferV {
    "data": slot::buffer::DATA => ForwardsUOffset<Vector<'_, u8>>,
    "offset": slot::buffer::OFFSET => u64,
    "size": slot::buffer::SIZE => u64,
});
verified_table!(SubGraphV {
    "tensors": slot::subgraph::TENSORS => Tables<'_, TensorV>,
    "inputs": slot::subgraph::INPUTS => Ints<'_>,
    "outputs": slot::subgraph::OUTPUTS => Ints<'_>,
    "operators": slot::subgraph::OPERATORS => Tables<'_, OperatorV>,
});
verified_table!(ModelV {
    "operator_codes": slot::model::OPERATOR_CODES => Tables<'_, OperatorCodeV>,
    "subgraphs": slot::model::SUBGRAPHS => Tables<'_, SubGraphV>,
    "buffers": slot::model::BUFFERS => Tables<'_, BufferV>,
});
/// Any options table: scalars and int vectors are read with checks; the verifier confirms
/// the table itself (its vtable) is in bounds.
struct OptionsV;
impl Verifiable for OptionsV {
    fn run_verifier(v: &mut Verifier, pos: usize) -> Result<(), InvalidFlatbuffer> {
        v.visit_table(pos)?.finish();
        Ok(())
    }
}
struct OperatorV;
impl Verifiable for OperatorV {
    fn run_verifier(v: &mut Verifier, pos: usize) -> Result<(), InvalidFlatbuffer> {
        v.visit_table(pos)?
            .visit_field::<u32>("opcode_index", slot::operator::OPCODE_INDEX, false)?
            .visit_field::<Ints<'_>>("inputs", slot::operator::INPUTS, false)?
            .visit_field::<Ints<'_>>("outputs", slot::operator::OUTPUTS, false)?
            .visit_field::<ForwardsUOffset<Vector<'_, u8>>>(
                "custom_options",
                slot::operator::CUSTOM_OPTIONS,
                false,
            )?
            .visit_union::<u8, _>(
                "builtin_options_type",
                slot::operator::OPTIONS_TYPE,
                "builtin_options",
                slot::operator::OPTIONS,
                false,
                |_, v, pos| v.verify_union_variant::<ForwardsUOffset<OptionsV>>("options", pos),
            )?
            .finish();
        Ok(())
    }
}

/// The largest file the importer reads (FlatBuffers address 2 GB; larger TFLite files keep
/// buffers outside, which the importer refuses).
pub const MAX_FILE: usize = 1 << 31;

/// Verifies `buf` as a TFLite model: identifier, then every table the importer reads.
pub fn verify(buf: &[u8]) -> Result<(), ImportError> {
    if buf.len() < 8 {
        return Err(ImportError::Malformed(
            "shorter than a FlatBuffer header".into(),
        ));
    }
    if buf.len() >= MAX_FILE {
        return Err(ImportError::Malformed("larger than 2 GB".into()));
    }
    if &buf[4..8] != IDENTIFIER {
        return Err(ImportError::Malformed(
            "no TFL3 file identifier: not a TFLite model".into(),
        ));
    }
    let opts = VerifierOptions {
        max_depth: 64,
        max_tables: 1 << 22,
        max_apparent_size: MAX_FILE,
        ignore_missing_null_terminator: false,
    };
    let mut v = Verifier::new(&opts, buf);
    <ForwardsUOffset<ModelV>>::run_verifier(&mut v, 0)
        .map_err(|e| ImportError::Malformed(e.to_string()))
}

/// A table at a position of a verified buffer, read with checked accessors.
#[derive(Clone, Copy)]
pub struct Table<'a> {
    buf: &'a [u8],
    pos: usize,
}

fn bad(what: &str) -> ImportError {
    ImportError::Malformed(format!("{what} out of bounds"))
}

fn bytes<const N: usize>(buf: &[u8], at: usize) -> Result<[u8; N], ImportError> {
    buf.get(at..at.checked_add(N).ok_or_else(|| bad("offset"))?)
        .and_then(|s| s.try_into().ok())
        .ok_or_else(|| bad("field"))
}

fn u32_at(buf: &[u8], at: usize) -> Result<u32, ImportError> {
    bytes::<4>(buf, at).map(u32::from_le_bytes)
}

/// A little-endian scalar a field may hold.
pub trait Scalar: Sized + Copy {
    /// Bytes.
    const SIZE: usize;
    /// From little-endian bytes (exactly `SIZE`).
    fn read(b: &[u8]) -> Self;
}

macro_rules! scalar {
    ($($t:ty),*) => {$(
        impl Scalar for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            fn read(b: &[u8]) -> Self {
                let mut a = [0u8; std::mem::size_of::<$t>()];
                a.copy_from_slice(b);
                <$t>::from_le_bytes(a)
            }
        }
    )*};
}
scalar!(i8, u8, i16, u16, i32, u32, i64, u64, f32);

impl<'a> Table<'a> {
    /// The root table of a verified buffer.
    pub fn root(buf: &'a [u8]) -> Result<Table<'a>, ImportError> {
        let pos = u32_at(buf, 0)? as usize;
        Ok(Table { buf, pos })
    }

    /// Where field `slot` lies, if present.
    fn field(&self, slot: u16) -> Result<Option<usize>, ImportError> {
        let soffset = i32::from_le_bytes(bytes::<4>(self.buf, self.pos)?);
        let vtable = (self.pos as i64)
            .checked_sub(i64::from(soffset))
            .and_then(|v| usize::try_from(v).ok())
            .ok_or_else(|| bad("vtable"))?;
        let vt_len = u16::from_le_bytes(bytes::<2>(self.buf, vtable)?);
        if slot >= vt_len {
            return Ok(None);
        }
        let off = u16::from_le_bytes(bytes::<2>(self.buf, vtable + slot as usize)?);
        Ok((off != 0).then_some(self.pos + off as usize))
    }

    /// A scalar field, or `default` when absent.
    pub fn scalar<T: Scalar>(&self, slot: u16, default: T) -> Result<T, ImportError> {
        match self.field(slot)? {
            Some(at) => self
                .buf
                .get(at..at + T::SIZE)
                .map(T::read)
                .ok_or_else(|| bad("scalar")),
            None => Ok(default),
        }
    }

    /// Where an offset field points.
    fn target(&self, slot: u16) -> Result<Option<usize>, ImportError> {
        match self.field(slot)? {
            Some(at) => {
                let off = u32_at(self.buf, at)? as usize;
                at.checked_add(off).map(Some).ok_or_else(|| bad("offset"))
            }
            None => Ok(None),
        }
    }

    /// A sub-table field.
    pub fn table(&self, slot: u16) -> Result<Option<Table<'a>>, ImportError> {
        Ok(self.target(slot)?.map(|pos| Table { buf: self.buf, pos }))
    }

    /// A vector field: its first element's position and its length.
    fn vector(&self, slot: u16, elem: usize) -> Result<Option<(usize, usize)>, ImportError> {
        let Some(at) = self.target(slot)? else {
            return Ok(None);
        };
        let len = u32_at(self.buf, at)? as usize;
        let start = at + 4;
        let end = len
            .checked_mul(elem)
            .and_then(|n| start.checked_add(n))
            .ok_or_else(|| bad("vector"))?;
        if end > self.buf.len() {
            return Err(bad("vector"));
        }
        Ok(Some((start, len)))
    }

    /// A vector of scalars (empty when absent).
    pub fn scalars<T: Scalar>(&self, slot: u16) -> Result<Vec<T>, ImportError> {
        Ok(match self.vector(slot, T::SIZE)? {
            Some((start, len)) => self.buf[start..start + len * T::SIZE]
                .chunks_exact(T::SIZE)
                .map(T::read)
                .collect(),
            None => Vec::new(),
        })
    }

    /// A byte vector, borrowed (empty when absent).
    pub fn bytes(&self, slot: u16) -> Result<&'a [u8], ImportError> {
        Ok(match self.vector(slot, 1)? {
            Some((start, len)) => &self.buf[start..start + len],
            None => &[],
        })
    }

    /// A vector of tables (empty when absent).
    pub fn tables(&self, slot: u16) -> Result<Vec<Table<'a>>, ImportError> {
        let Some((start, len)) = self.vector(slot, 4)? else {
            return Ok(Vec::new());
        };
        (0..len)
            .map(|k| {
                let at = start + 4 * k;
                let off = u32_at(self.buf, at)? as usize;
                Ok(Table {
                    buf: self.buf,
                    pos: at.checked_add(off).ok_or_else(|| bad("table"))?,
                })
            })
            .collect()
    }

    /// The whole buffer the table lies in (the file).
    pub fn file(&self) -> &'a [u8] {
        self.buf
    }

    /// A string field (empty when absent; invalid UTF-8 replaced).
    pub fn string(&self, slot: u16) -> Result<String, ImportError> {
        Ok(String::from_utf8_lossy(self.bytes(slot)?).into_owned())
    }
}
