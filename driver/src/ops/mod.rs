//! One definition per NN HAL operation: its signatures by argument name (required inputs,
//! optional input groups, allowed operand types), any extra validation, the operand types
//! the device runs, and its lowering to a device kernel.
//!
//! Every definition is registered once in [`REGISTRY`]. Model validation (signature
//! check), `getSupportedOperations`, the compiler, `vnpu info` and the tests all derive from
//! that list; nothing else lists operations.
//!
//! A signature names its arguments relative to the operation's *main* operand type `T` (the
//! type of input `main`, usually the first): [`Ty::T`] is "the same type", [`Ty::Bias`] is
//! TENSOR_INT32 for quantised `T`, [`Ty::Scalar`] is FLOAT16 for float16 `T`, and so on, so
//! one signature covers every operand type the HAL allows for that form.

/// The two forms of an operation with NNAPI's window padding, alike but for it: implicit
/// (`padding_scheme`) and explicit (`pad_left`, `pad_right`, `pad_top`, `pad_bottom`),
/// each followed by the strides (`stride_w`, `stride_h`), between the same arguments
/// before (`[head]`) and after (`[tail]`), each with the optional trailing groups given
/// last. Gives `[implicit, explicit]`.
macro_rules! padded_signatures {
    (@form $since:expr, $types:expr, [$($before:expr),*], [$($tail:expr),*], $out:expr,
     $optional:expr) => {
        $crate::ops::Signature::new(
            $since,
            $types,
            &[$($before,)* arg("stride_w", Ty::Int), arg("stride_h", Ty::Int), $($tail,)*],
            $out,
        )
        .optional($optional)
    };
    ($since:expr, $types:expr, [$($head:expr),* $(,)?], [$($tail:expr),* $(,)?], $out:expr,
     $optional:expr $(,)?) => {{
        use $crate::ops::{arg, Ty};
        [
            padded_signatures!(@form $since, $types,
                [$($head,)* arg("padding_scheme", Ty::Int)], [$($tail),*], $out, $optional),
            padded_signatures!(@form $since, $types,
                [
                    $($head,)*
                    arg("pad_left", Ty::Int),
                    arg("pad_right", Ty::Int),
                    arg("pad_top", Ty::Int),
                    arg("pad_bottom", Ty::Int)
                ],
                [$($tail),*], $out, $optional),
        ]
    }};
}

mod args;
pub mod lowering;
mod registry;
#[cfg(test)]
mod testing;

pub mod activation;
pub mod argminmax;
pub mod arith;
pub mod batch_matmul;
pub mod cast;
pub mod comparison;
pub mod conv;
pub mod densify;
pub mod detection;
pub mod fibonacci;
pub mod gelu;
pub mod image;
pub mod instance_norm;
pub mod log_softmax;
pub mod logical;
pub mod lookup;
pub mod math;
pub mod mirror_pad;
pub mod movement;
pub mod normalization;
pub mod pack;
pub mod pool;
pub mod recurrent;
pub mod reduce;
pub mod reduction;
pub mod resize_bilinear_integer;
pub mod resize_nearest;
pub mod reverse;
pub mod topk;
pub mod unsupported;

pub use args::Args;
pub use lowering::{CompileError, Lowered, Operands};
pub use registry::{definition, REGISTRY};

use crate::hal::{ExtraParams, Operand, OperandType, OperationType};

use OperandType as T;

pub use crate::hal::HalVersion;

/// The type an argument may have, relative to the signature's main type `T`.
#[derive(Clone, Copy, Debug)]
pub enum Ty {
    /// Exactly `T`.
    T,
    /// FLOAT16 when `T` is TENSOR_FLOAT16, else FLOAT32 (float parameters).
    Scalar,
    /// INT32 scalar.
    Int,
    /// BOOL scalar.
    Bool,
    /// TENSOR_INT32 whose values the compiler reads (shapes, axes, paddings).
    Ints,
    /// TENSOR_INT32 for quantised `T`, else `T` (biases).
    Bias,
    /// `T`, or TENSOR_QUANT8_SYMM_PER_CHANNEL when `T` is an 8-bit asymmetric type.
    Filter,
    /// Exactly this type.
    Is(OperandType),
    /// One of these types.
    OneOf(&'static [OperandType]),
    /// One of these types, whose value the compiler reads (a scalar or a one-element
    /// tensor, e.g. an extension operation's size argument).
    Value(&'static [OperandType]),
}

impl Ty {
    /// Whether operand type `t` fits, given main type `main`.
    pub fn accepts(self, t: OperandType, main: OperandType) -> bool {
        match self {
            Ty::T => t == main,
            Ty::Scalar => {
                t == if main == T::TENSOR_FLOAT16 {
                    T::FLOAT16
                } else {
                    T::FLOAT32
                }
            }
            Ty::Int => t == T::INT32,
            Ty::Bool => t == T::BOOL,
            Ty::Ints => t == T::TENSOR_INT32,
            Ty::Bias => {
                t == if is_quant8(main) {
                    T::TENSOR_INT32
                } else {
                    main
                }
            }
            Ty::Filter => t == main || (is_quant8(main) && t == T::TENSOR_QUANT8_SYMM_PER_CHANNEL),
            Ty::Is(x) => t == x,
            Ty::OneOf(xs) | Ty::Value(xs) => xs.contains(&t),
        }
    }

    /// Whether the compiler reads this argument's value (so it must be a constant, or a
    /// model input the host reads at execution).
    pub fn is_value(self) -> bool {
        matches!(
            self,
            Ty::Scalar | Ty::Int | Ty::Bool | Ty::Ints | Ty::Value(_)
        )
    }
}

/// An 8-bit asymmetric quantised tensor type.
pub fn is_quant8(t: OperandType) -> bool {
    matches!(t, T::TENSOR_QUANT8_ASYMM | T::TENSOR_QUANT8_ASYMM_SIGNED)
}

/// One named argument.
#[derive(Clone, Copy, Debug)]
pub struct Arg {
    /// The name the definition reads it by.
    pub name: &'static str,
    /// Allowed types.
    pub ty: Ty,
}

/// Shorthand for an [`Arg`].
pub const fn arg(name: &'static str, ty: Ty) -> Arg {
    Arg { name, ty }
}

/// One form of an operation.
#[derive(Clone, Copy, Debug)]
pub struct Signature {
    /// The HAL version that introduced this form.
    pub since: HalVersion,
    /// Which input holds the main type `T`.
    pub main: usize,
    /// The main types this form accepts.
    pub types: &'static [OperandType],
    /// Required inputs, in order. With `repeat_first`, input 0 may appear one or more
    /// times (CONCATENATION's tensors).
    pub inputs: &'static [Arg],
    /// Optional trailing input groups: each group is given whole or not at all, in order.
    pub optional: &'static [&'static [Arg]],
    /// Outputs, in order.
    pub outputs: &'static [Arg],
    /// Input 0 repeats (variadic tensor list).
    pub repeat_first: bool,
    /// The single output form repeats: one or more outputs, each of that form (SPLIT).
    pub repeat_outputs: bool,
}

impl Signature {
    /// A form with main input 0, no optional inputs, and no repetition.
    pub const fn new(
        since: HalVersion,
        types: &'static [OperandType],
        inputs: &'static [Arg],
        outputs: &'static [Arg],
    ) -> Signature {
        Signature {
            since,
            main: 0,
            types,
            inputs,
            optional: &[],
            outputs,
            repeat_first: false,
            repeat_outputs: false,
        }
    }

    /// The same form with optional trailing input groups.
    pub const fn optional(mut self, groups: &'static [&'static [Arg]]) -> Signature {
        self.optional = groups;
        self
    }

    /// The same form with another main input.
    pub const fn main(mut self, index: usize) -> Signature {
        self.main = index;
        self
    }

    /// The same form with one or more outputs, each like the first.
    pub const fn variadic_outputs(mut self) -> Signature {
        self.repeat_outputs = true;
        self
    }

    /// The same form with a variadic first input.
    pub const fn repeat_first(mut self) -> Signature {
        self.repeat_first = true;
        self
    }

    /// The argument each actual input stands for, or `None` if the input types do not fit
    /// this form.
    pub fn bind(&self, ins: &[OperandType], outs: &[OperandType]) -> Option<Vec<Arg>> {
        let main = *ins.get(self.main)?;
        if !self.types.contains(&main) {
            return None;
        }
        let mut args: Vec<Arg> = Vec::with_capacity(ins.len());
        let extra = if self.repeat_first {
            ins.len().checked_sub(self.inputs.len())?
        } else {
            0
        };
        if self.repeat_first {
            args.extend(std::iter::repeat_n(*self.inputs.first()?, extra));
        }
        args.extend_from_slice(self.inputs);
        for group in self.optional {
            if args.len() >= ins.len() {
                break;
            }
            args.extend_from_slice(group);
        }
        let out_count_ok = if self.repeat_outputs {
            !outs.is_empty()
        } else {
            outs.len() == self.outputs.len()
        };
        if args.len() != ins.len() || !out_count_ok {
            return None;
        }
        let fits = |a: &Arg, t: &OperandType| a.ty.accepts(*t, main);
        let out_arg = |k: usize| {
            if self.repeat_outputs {
                self.outputs.first()
            } else {
                self.outputs.get(k)
            }
        };
        (args.iter().zip(ins).all(|(a, t)| fits(a, t))
            && outs
                .iter()
                .enumerate()
                .all(|(k, t)| out_arg(k).is_some_and(|a| fits(a, t))))
        .then_some(args)
    }
}

/// Extra validation beyond types (ranks, per-channel axes, element counts).
pub type CheckFn = fn(ins: &[&Operand], outs: &[&Operand]) -> Result<(), String>;

/// Lowering of one operation (its arguments bound by name) to device kernels.
pub type LowerFn = fn(&Args<'_>) -> Result<Lowered, CompileError>;

/// The definition of one HAL operation.
#[derive(Clone, Copy, Debug)]
pub struct OpDef {
    /// The operation.
    pub op: OperationType,
    /// Its forms; a model's operation must fit one.
    pub signatures: &'static [Signature],
    /// Extra validation, if any.
    pub check: Option<CheckFn>,
    /// The main operand types the device runs this operation on (empty: none).
    pub runs: &'static [OperandType],
    /// The lowering, if the device runs it.
    pub lower: Option<LowerFn>,
}

impl OpDef {
    /// The operation's name (an extension operation's as its extension declares it).
    pub fn name(&self) -> &'static str {
        self.op
            .name_any()
            .or_else(|| crate::extensions::operation_name(self.op))
            .unwrap_or("?")
    }

    /// The first signature the operands fit, with the argument each input stands for (at
    /// any level: the compiler binds models already validated at their interface's level).
    pub fn bind(
        &self,
        ins: &[&Operand],
        outs: &[&Operand],
    ) -> Option<(&'static Signature, Vec<Arg>)> {
        self.bind_at(HalVersion::Experimental, ins, outs)
    }

    /// [`OpDef::bind`] among the signatures an interface at `level` knows (`since` at or
    /// below it).
    pub fn bind_at(
        &self,
        level: HalVersion,
        ins: &[&Operand],
        outs: &[&Operand],
    ) -> Option<(&'static Signature, Vec<Arg>)> {
        let it: Vec<OperandType> = ins.iter().map(|o| o.r#type).collect();
        let ot: Vec<OperandType> = outs.iter().map(|o| o.r#type).collect();
        self.signatures
            .iter()
            .filter(|s| s.since <= level)
            .find_map(|s| s.bind(&it, &ot).map(|a| (s, a)))
    }

    /// Validates the operands against the signatures an interface at `level` knows, and
    /// the extra check. Operands that fit only a newer signature are refused like any
    /// other misfit (the message names the level they need).
    pub fn validate(
        &self,
        level: HalVersion,
        ins: &[&Operand],
        outs: &[&Operand],
    ) -> Result<(), String> {
        if self.bind_at(level, ins, outs).is_none() {
            let types: Vec<String> = ins.iter().map(|o| o.r#type.to_string()).collect();
            let out_types: Vec<String> = outs.iter().map(|o| o.r#type.to_string()).collect();
            let newer = match self.bind(ins, outs) {
                Some((s, _)) => format!(" (they fit a {:?} form, newer than {level:?})", s.since),
                None => String::new(),
            };
            return Err(format!(
                "{}: inputs ({}) -> outputs ({}) fit none of its {} signatures{newer}",
                self.name(),
                types.join(", "),
                out_types.join(", "),
                self.signatures.len()
            ));
        }
        if let Some(check) = self.check {
            check(ins, outs).map_err(|e| format!("{}: {e}", self.name()))?;
        }
        Ok(())
    }

    /// Whether the device runs the operation with these operands: a lowering exists, the
    /// operands fit a signature and the main type is one the device runs.
    pub fn runs_on(&self, ins: &[&Operand], outs: &[&Operand]) -> bool {
        if self.lower.is_none() {
            return false;
        }
        match self.bind(ins, outs) {
            Some((sig, _)) => ins
                .get(sig.main)
                .is_some_and(|o| self.runs.contains(&o.r#type)),
            None => false,
        }
    }
}

/// Validates an operation's operands against its definition, as an interface at `level`
/// does. `Ok(false)` when the operation has no definition (only the generic model checks
/// apply).
pub fn check_operation_signature(
    op: OperationType,
    level: HalVersion,
    ins: &[&Operand],
    outs: &[&Operand],
) -> Result<bool, String> {
    match definition(op) {
        Some(def) => def.validate(level, ins, outs).map(|()| true),
        None => Ok(false),
    }
}

/// An 8-bit asymmetric `x` must share `out`'s scale and zero point (operations that only
/// move elements: MIRROR_PAD, REVERSE, PACK).
pub fn same_quantisation(x: &Operand, out: &Operand, what: &str) -> Result<(), String> {
    if is_quant8(out.r#type) && (x.scale != out.scale || x.zero_point != out.zero_point) {
        return Err(format!(
            "{what} (scale {}, zero point {}) differs from the output (scale {}, zero point {})",
            x.scale, x.zero_point, out.scale, out.zero_point
        ));
    }
    Ok(())
}

/// The channel dimension of a per-channel operand, if it is one.
pub fn channel_dim(o: &Operand) -> Option<u32> {
    match &o.extra_params {
        ExtraParams::ChannelQuant(p) => Some(p.channel_dim),
        _ => None,
    }
}

/// Type lists shared by many definitions.
pub mod types {
    use super::T;
    use crate::hal::OperandType;

    /// float32 and float16.
    pub const FLOATS: &[OperandType] = &[T::TENSOR_FLOAT32, T::TENSOR_FLOAT16];
    /// float32, float16 and both 8-bit asymmetric types.
    pub const FLOAT_QUANT8: &[OperandType] = &[
        T::TENSOR_FLOAT32,
        T::TENSOR_FLOAT16,
        T::TENSOR_QUANT8_ASYMM,
        T::TENSOR_QUANT8_ASYMM_SIGNED,
    ];
    /// Both 8-bit asymmetric quantised types.
    pub const QUANT8: &[OperandType] = &[T::TENSOR_QUANT8_ASYMM, T::TENSOR_QUANT8_ASYMM_SIGNED];
    /// FLOAT_QUANT8 plus int32.
    pub const FLOAT_QUANT8_INT32: &[OperandType] = &[
        T::TENSOR_FLOAT32,
        T::TENSOR_FLOAT16,
        T::TENSOR_QUANT8_ASYMM,
        T::TENSOR_QUANT8_ASYMM_SIGNED,
        T::TENSOR_INT32,
    ];
}
