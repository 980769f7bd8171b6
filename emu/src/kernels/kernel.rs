//! The one trait every kernel implements, and the parameter-word codec they share.

use std::fmt::Debug;
use std::ops::RangeInclusive;

use super::{Activation, KernelError, Padding, Result, MAX_RANK};
use crate::tensor::{DType, TensorType, View, ViewMut};

/// The work of one kernel invocation, for the timing model.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cost {
    /// Multiply-accumulates (run on the MAC array).
    pub macs: u64,
    /// Elements read, written or otherwise touched (run on the vector unit).
    pub elems: u64,
}

/// One device kernel: an NN operation with its scalar parameters. Implementations live one
/// per file under `kernels/<family>/`, and are registered once in the list in
/// `kernels/mod.rs`, which generates [`super::KernelOp`], its decoder and its dispatch.
pub trait Kernel: Clone + Debug + PartialEq + Sized {
    /// The operation name, for errors and traces.
    fn name(&self) -> &'static str;

    /// Parses the parameter words (untrusted), validating every word.
    fn decode(w: &mut Words<'_>) -> Result<Self>;

    /// Writes the parameter words; `decode` of them gives `self` back.
    fn encode(&self, w: &mut Vec<u32>);

    /// How many inputs the kernel takes.
    fn input_count(&self) -> RangeInclusive<usize> {
        1..=1
    }

    /// How many outputs the kernel writes.
    fn output_count(&self) -> usize {
        1
    }

    /// Validates the inputs (count already checked; shapes, element types, quantisation)
    /// and returns each output's shape.
    fn output_shapes(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>>;

    /// Validates the outputs' element types and quantisation against the inputs. The
    /// default accepts outputs of the first input's type.
    fn check_outputs(&self, inputs: &[&TensorType], outputs: &[&TensorType]) -> Result<()> {
        default_check(inputs, outputs)
    }

    /// The work of the kernel (default: every element read and written once).
    fn cost(&self, inputs: &[&TensorType], outputs: &[Vec<usize>]) -> Cost {
        let n = |s: &[usize]| s.iter().fold(1u64, |a, &d| a.saturating_mul(d as u64));
        let elems = inputs
            .iter()
            .map(|t| n(&t.shape))
            .chain(outputs.iter().map(|s| n(s)))
            .fold(0u64, u64::saturating_add);
        Cost { macs: 0, elems }
    }

    /// Computes the outputs; shapes and types were validated by `output_shapes` and
    /// `check_outputs`, and every view holds exactly its shape's bytes.
    fn run(&self, inputs: &[View<'_>], outputs: &mut [ViewMut<'_>]) -> Result<()>;

    /// Whether `run` writes every element of every float32 output, so the engine may hand
    /// it output buffers without clearing them first (default: no, they come zeroed).
    fn overwrites_f32_outputs(&self) -> bool {
        false
    }

    /// Whether `run` writes every element of every uint8/int8 output (as
    /// [`Kernel::overwrites_f32_outputs`] for quantised outputs; default: no).
    fn overwrites_quant8_outputs(&self) -> bool {
        false
    }

    /// The activation this kernel clamps its output with, for the kernels that fuse one
    /// (NNAPI's fused activation code): the compiler may fold a following RELU* into it.
    fn fused_activation(&self) -> Option<Activation> {
        None
    }

    /// Sets the fused activation; false (and unchanged) for a kernel without one.
    fn set_fused_activation(&mut self, act: Activation) -> bool {
        let _ = act;
        false
    }

    /// The activation this kernel is on its own (RELU, RELU1, RELU6): the same clamp a
    /// fused activation applies, so the compiler may fold it into its input's producer.
    fn as_activation(&self) -> Option<Activation> {
        None
    }

    /// Whether the output shapes depend on the input *values*: then `output_shapes` gives
    /// capacities and [`Kernel::run_sized`] the real shapes.
    fn shapes_depend_on_values(&self) -> bool {
        false
    }

    /// Runs a kernel whose output shapes depend on the input *values* (how many boxes
    /// survive NMS, say). For such a kernel `output_shapes` gives each output's largest
    /// shape (its capacity), `run_sized` writes each output's real elements first
    /// (row-major in its real shape) and returns the real shapes: same rank, no dimension
    /// above the capacity's. The default runs [`Kernel::run`] and reports `None` (the
    /// shapes are the ones `output_shapes` gave).
    fn run_sized(
        &self,
        inputs: &[View<'_>],
        outputs: &mut [ViewMut<'_>],
    ) -> Result<Option<Vec<Vec<usize>>>> {
        self.run(inputs, outputs).map(|()| None)
    }
}

/// The [`Kernel`] fused-activation methods of a kernel whose fused activation is its `act`
/// field.
macro_rules! fused_activation_field {
    () => {
        fn fused_activation(&self) -> Option<$crate::kernels::Activation> {
            Some(self.act)
        }

        fn set_fused_activation(&mut self, act: $crate::kernels::Activation) -> bool {
            self.act = act;
            true
        }
    };
}
pub(crate) use fused_activation_field;

/// Requires every tensor to have one of `allowed` element types and all the same one.
pub fn same_dtype(name: &'static str, ts: &[&TensorType], allowed: &[DType]) -> Result<DType> {
    let first = ts
        .first()
        .map(|t| t.dtype)
        .ok_or(KernelError::InvalidShape {
            op: name,
            reason: "no tensors".into(),
        })?;
    if !allowed.contains(&first) {
        return Err(KernelError::UnsupportedDType {
            op: name,
            dtype: first,
        });
    }
    for t in ts {
        if t.dtype != first {
            return Err(KernelError::DType {
                expected: first,
                got: t.dtype,
            });
        }
    }
    Ok(first)
}

/// A cursor over untrusted parameter words.
pub struct Words<'a> {
    opcode: u32,
    words: &'a [u32],
    pos: usize,
}

impl<'a> Words<'a> {
    /// A cursor at the first word.
    pub fn new(opcode: u32, words: &'a [u32]) -> Self {
        Words {
            opcode,
            words,
            pos: 0,
        }
    }

    /// An invalid-parameters error for this opcode.
    pub fn err(&self, reason: impl Into<String>) -> KernelError {
        KernelError::InvalidParams {
            opcode: self.opcode,
            reason: reason.into(),
        }
    }

    /// The next word.
    pub fn u32(&mut self, what: &str) -> Result<u32> {
        let w = self
            .words
            .get(self.pos)
            .copied()
            .ok_or_else(|| self.err(format!("too few parameter words (missing {what})")))?;
        self.pos += 1;
        Ok(w)
    }

    /// The next word as two's-complement i32.
    pub fn i32(&mut self, what: &str) -> Result<i32> {
        Ok(i32::from_ne_bytes(self.u32(what)?.to_ne_bytes()))
    }

    /// The next word as f32 bits.
    pub fn f32(&mut self, what: &str) -> Result<f32> {
        Ok(f32::from_bits(self.u32(what)?))
    }

    /// The next word as a finite f32.
    pub fn finite_f32(&mut self, what: &str) -> Result<f32> {
        let v = self.f32(what)?;
        if !v.is_finite() {
            return Err(self.err(format!("{what} must be finite, got {v}")));
        }
        Ok(v)
    }

    /// The next word, which must be at least 1.
    pub fn nonzero(&mut self, what: &str) -> Result<u32> {
        let v = self.u32(what)?;
        if v == 0 {
            return Err(self.err(format!("{what} must be at least 1")));
        }
        Ok(v)
    }

    /// The next word as a bool (0 or 1 only).
    pub fn bool(&mut self, what: &str) -> Result<bool> {
        match self.u32(what)? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(self.err(format!("{what} must be 0 or 1, got {v}"))),
        }
    }

    /// The next word as a fused activation.
    pub fn act(&mut self) -> Result<Activation> {
        let v = self.u32("activation")?;
        Activation::from_u32(v).ok_or_else(|| self.err(format!("bad activation {v}")))
    }

    /// The next four words as explicit padding (left, right, top, bottom).
    pub fn padding(&mut self) -> Result<Padding> {
        Ok(Padding {
            left: self.u32("padding left")?,
            right: self.u32("padding right")?,
            top: self.u32("padding top")?,
            bottom: self.u32("padding bottom")?,
        })
    }

    /// A length word, at most `max`.
    pub fn len(&mut self, what: &str, max: usize) -> Result<usize> {
        let n = self.u32(what)?;
        match usize::try_from(n) {
            Ok(n) if n <= max => Ok(n),
            _ => Err(self.err(format!("{what} {n} exceeds {max}"))),
        }
    }

    /// A length-prefixed list of at most `max` words.
    pub fn list(&mut self, what: &str, max: usize) -> Result<Vec<u32>> {
        let n = self.len(what, max)?;
        (0..n).map(|_| self.u32(what)).collect()
    }

    /// A length-prefixed list of at most [`MAX_RANK`] axes, each `< MAX_RANK`, no repeats.
    pub fn axes(&mut self, what: &str) -> Result<Vec<u32>> {
        let axes = self.list(what, MAX_RANK)?;
        let mut seen = [false; MAX_RANK];
        for &a in &axes {
            match seen.get_mut(a as usize) {
                Some(s) if !*s => *s = true,
                _ => return Err(self.err(format!("{what}: axis {a} out of range or repeated"))),
            }
        }
        Ok(axes)
    }

    /// A signed axis in `-MAX_RANK..MAX_RANK`.
    pub fn axis(&mut self, what: &str) -> Result<i32> {
        let axis = self.i32(what)?;
        let r = MAX_RANK as i64;
        if i64::from(axis) < -r || i64::from(axis) >= r {
            return Err(self.err(format!("{what} {axis} out of range for rank <= {MAX_RANK}")));
        }
        Ok(axis)
    }

    /// Whether every word was consumed (for trailing optional words).
    pub fn at_end(&self) -> bool {
        self.pos >= self.words.len()
    }

    /// Fails unless every word was consumed.
    pub fn finish(&self) -> Result<()> {
        if self.pos != self.words.len() {
            return Err(self.err(format!(
                "{} trailing parameter words",
                self.words.len() - self.pos
            )));
        }
        Ok(())
    }
}

/// Encoding helpers matching [`Words`].
pub mod enc {
    use super::Padding;

    /// A bool as 0/1.
    pub fn b(v: bool) -> u32 {
        u32::from(v)
    }

    /// An i32 as its two's-complement bits.
    pub fn i(v: i32) -> u32 {
        u32::from_ne_bytes(v.to_ne_bytes())
    }

    /// Padding as left, right, top, bottom.
    pub fn pad(p: &Padding) -> [u32; 4] {
        [p.left, p.right, p.top, p.bottom]
    }

    /// A length-prefixed list; an absurd length saturates (decode rejects it).
    pub fn list(w: &mut Vec<u32>, items: impl ExactSizeIterator<Item = u32>) {
        w.push(u32::try_from(items.len()).unwrap_or(u32::MAX));
        w.extend(items);
    }
}

/// The default [`Kernel::check_outputs`]: every output has the first input's type.
pub fn default_check(inputs: &[&TensorType], outputs: &[&TensorType]) -> Result<()> {
    let want = inputs.first().map(|t| t.dtype);
    for o in outputs {
        if Some(o.dtype) != want {
            return Err(KernelError::DType {
                expected: want.unwrap_or(o.dtype),
                got: o.dtype,
            });
        }
    }
    Ok(())
}

/// [`default_check`], and for a quantised (u8 / i8) input the fixed output quantisation
/// `fixed(dtype)` returns, as some quantised operations define it (SOFTMAX, LOGISTIC, TANH,
/// L2_NORMALIZATION): `(scale, zero_point)`, or `None` for no constraint.
pub fn fixed_quant_check(
    op: &'static str,
    inputs: &[&TensorType],
    outputs: &[&TensorType],
    fixed: impl Fn(DType) -> Option<(f32, i32)>,
) -> Result<()> {
    default_check(inputs, outputs)?;
    for o in outputs {
        if let Some((scale, zero_point)) = fixed(o.dtype) {
            if o.quant.scale != scale || o.quant.zero_point != zero_point {
                return Err(KernelError::InvalidShape {
                    op,
                    reason: format!(
                        "output quantisation must be scale {scale} zero point {zero_point}"
                    ),
                });
            }
        }
    }
    Ok(())
}
