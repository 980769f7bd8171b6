//! The float recurrent operations: LSTM, UNIDIRECTIONAL_SEQUENCE_LSTM,
//! BIDIRECTIONAL_SEQUENCE_LSTM, RNN, UNIDIRECTIONAL_SEQUENCE_RNN,
//! BIDIRECTIONAL_SEQUENCE_RNN and SVDF (float32 and float16).
//!
//! Each lowers to one fused device kernel. Optional tensors the model omits (NO_VALUE
//! operands, or inputs the request leaves without a value) are left out of the kernel's
//! inputs, and the kernel's presence mask says which slots the remaining inputs fill (see
//! `vnpu_emu::kernels::recurrent`).

use vnpu_emu::kernels::{
    BidiLstm, BidiRnn, Lstm, LstmParams, RecurrentActivation, Rnn, SequenceLstm, SequenceRnn, Svdf,
};

use super::types::FLOATS;
use super::{arg, Arg, Args, HalVersion::*, OpDef, Signature, Ty};
use super::{CompileError, Lowered};
use crate::hal::OperationType;

const fn t(name: &'static str) -> Arg {
    arg(name, Ty::T)
}

/// The present operands among `names` (in order) and their presence mask.
fn masked(a: &Args<'_>, names: &[&str]) -> (u64, Vec<u32>) {
    let mut mask = 0u64;
    let mut ids = Vec::new();
    for (k, n) in names.iter().enumerate() {
        if let Some(i) = a.get(n) {
            mask |= 1 << k;
            ids.push(i);
        }
    }
    (mask, ids)
}

fn activation(a: &Args<'_>) -> Result<RecurrentActivation, CompileError> {
    let v = a.i32("activation")?;
    u32::try_from(v)
        .ok()
        .and_then(RecurrentActivation::from_code)
        .ok_or_else(|| a.invalid(format!("activation {v}")))
}

fn lstm_params(a: &Args<'_>) -> Result<LstmParams, CompileError> {
    let clip = |n: &str| -> Result<f32, CompileError> {
        let v = a.f32(n)?;
        if !(v.is_finite() && v >= 0.0) {
            return Err(a.invalid(format!("{n} = {v}")));
        }
        Ok(v)
    };
    Ok(LstmParams {
        activation: activation(a)?,
        cell_clip: clip("cell_clip")?,
        proj_clip: clip("proj_clip")?,
    })
}

fn lowered(
    a: &Args<'_>,
    op: impl Into<vnpu_emu::kernels::KernelOp>,
    inputs: Vec<u32>,
) -> Result<Lowered, CompileError> {
    Ok(Lowered {
        op: op.into(),
        inputs,
        outputs: a.outputs().to_vec(),
    })
}

/// LSTM's step slots: the input, then the direction's tensors (no aux weights).
const LSTM_SLOT_NAMES: &[&str] = &[
    "input", "i2i", "i2f", "i2c", "i2o", "r2i", "r2f", "r2c", "r2o", "c2i", "c2f", "c2o", "ib",
    "fb", "cb", "ob", "pw", "pb", "h0", "c0", "lni", "lnf", "lnc", "lno",
];

/// An LSTM's input and its eight gate weights, then the inputs `$then` of the form.
macro_rules! gate_inputs {
    ($($then:expr),* $(,)?) => {
        &[
            t("input"),
            t("i2i"),
            t("i2f"),
            t("i2c"),
            t("i2o"),
            t("r2i"),
            t("r2f"),
            t("r2c"),
            t("r2o"),
            $($then,)*
        ]
    };
}

/// LSTM's inputs, then those a sequence form adds after them.
macro_rules! lstm_inputs {
    ($($extra:expr),* $(,)?) => {
        gate_inputs!(
            t("c2i"),
            t("c2f"),
            t("c2o"),
            t("ib"),
            t("fb"),
            t("cb"),
            t("ob"),
            t("pw"),
            t("pb"),
            t("h0"),
            t("c0"),
            arg("activation", Ty::Int),
            arg("cell_clip", Ty::Scalar),
            arg("proj_clip", Ty::Scalar),
            $($extra,)*
        )
    };
}

const LSTM_INPUTS: &[Arg] = lstm_inputs!();

const LAYER_NORM: &[Arg] = &[t("lni"), t("lnf"), t("lnc"), t("lno")];

/// LSTM.
pub const LSTM: OpDef = OpDef {
    op: OperationType::LSTM,
    signatures: &[Signature::new(
        V1_0,
        FLOATS,
        LSTM_INPUTS,
        &[
            t("scratch"),
            t("output_state"),
            t("cell_state"),
            t("output"),
        ],
    )
    .optional(&[LAYER_NORM])],
    check: None,
    runs: FLOATS,
    lower: Some(|a| {
        let (mask, ids) = masked(a, LSTM_SLOT_NAMES);
        let k = Lstm {
            present: mask as u32,
            params: lstm_params(a)?,
        };
        lowered(a, k, ids)
    }),
};

const SEQ_LSTM_INPUTS: &[Arg] = lstm_inputs!(arg("time_major", Ty::Bool));

fn lower_seq_lstm(a: &Args<'_>) -> Result<Lowered, CompileError> {
    let (mask, ids) = masked(a, LSTM_SLOT_NAMES);
    let k = SequenceLstm {
        present: mask as u32,
        params: lstm_params(a)?,
        time_major: a.bool("time_major")?,
        state_outputs: a.outputs().len() == 3,
    };
    lowered(a, k, ids)
}

/// UNIDIRECTIONAL_SEQUENCE_LSTM.
pub const UNIDIRECTIONAL_SEQUENCE_LSTM: OpDef = OpDef {
    op: OperationType::UNIDIRECTIONAL_SEQUENCE_LSTM,
    signatures: &[
        Signature::new(V1_2, FLOATS, SEQ_LSTM_INPUTS, &[t("output")]).optional(&[LAYER_NORM]),
        Signature::new(
            V1_3,
            FLOATS,
            SEQ_LSTM_INPUTS,
            &[t("output"), t("output_state"), t("cell_state")],
        )
        .optional(&[LAYER_NORM]),
    ],
    check: None,
    runs: FLOATS,
    lower: Some(lower_seq_lstm),
};

macro_rules! dir_names {
    ($p:literal) => {
        [
            concat!($p, "i2i"),
            concat!($p, "i2f"),
            concat!($p, "i2c"),
            concat!($p, "i2o"),
            concat!($p, "r2i"),
            concat!($p, "r2f"),
            concat!($p, "r2c"),
            concat!($p, "r2o"),
            concat!($p, "c2i"),
            concat!($p, "c2f"),
            concat!($p, "c2o"),
            concat!($p, "ib"),
            concat!($p, "fb"),
            concat!($p, "cb"),
            concat!($p, "ob"),
            concat!($p, "pw"),
            concat!($p, "pb"),
            concat!($p, "h0"),
            concat!($p, "c0"),
            concat!($p, "lni"),
            concat!($p, "lnf"),
            concat!($p, "lnc"),
            concat!($p, "lno"),
            concat!($p, "ai"),
            concat!($p, "af"),
            concat!($p, "ac"),
            concat!($p, "ao"),
        ]
    };
}

const FW_NAMES: [&str; 27] = dir_names!("fw_");
const BW_NAMES: [&str; 27] = dir_names!("bw_");

macro_rules! weights {
    ($p:literal) => {
        [
            t(concat!($p, "i2i")),
            t(concat!($p, "i2f")),
            t(concat!($p, "i2c")),
            t(concat!($p, "i2o")),
            t(concat!($p, "r2i")),
            t(concat!($p, "r2f")),
            t(concat!($p, "r2c")),
            t(concat!($p, "r2o")),
            t(concat!($p, "c2i")),
            t(concat!($p, "c2f")),
            t(concat!($p, "c2o")),
            t(concat!($p, "ib")),
            t(concat!($p, "fb")),
            t(concat!($p, "cb")),
            t(concat!($p, "ob")),
            t(concat!($p, "pw")),
            t(concat!($p, "pb")),
        ]
    };
}

const FW_W: [Arg; 17] = weights!("fw_");
const BW_W: [Arg; 17] = weights!("bw_");

const fn cat<const A: usize, const B: usize, const C: usize>(a: [Arg; A], b: [Arg; B]) -> [Arg; C] {
    let mut out = [a[0]; C];
    let mut i = 0;
    while i < A {
        out[i] = a[i];
        i += 1;
    }
    let mut j = 0;
    while j < B {
        out[A + j] = b[j];
        j += 1;
    }
    out
}

const BIDI_HEAD: [Arg; 35] = cat(cat::<1, 17, 18>([t("input")], FW_W), BW_W);
const BIDI_TAIL: [Arg; 18] = [
    t("fw_h0"),
    t("fw_c0"),
    t("bw_h0"),
    t("bw_c0"),
    t("aux_input"),
    t("fw_ai"),
    t("fw_af"),
    t("fw_ac"),
    t("fw_ao"),
    t("bw_ai"),
    t("bw_af"),
    t("bw_ac"),
    t("bw_ao"),
    arg("activation", Ty::Int),
    arg("cell_clip", Ty::Scalar),
    arg("proj_clip", Ty::Scalar),
    arg("merge_outputs", Ty::Bool),
    arg("time_major", Ty::Bool),
];
const BIDI_LSTM_INPUTS: [Arg; 53] = cat(BIDI_HEAD, BIDI_TAIL);
const BIDI_LN: &[Arg] = &[
    t("fw_lni"),
    t("fw_lnf"),
    t("fw_lnc"),
    t("fw_lno"),
    t("bw_lni"),
    t("bw_lnf"),
    t("bw_lnc"),
    t("bw_lno"),
];

const fn bidi_lstm_sig(outputs: &'static [Arg]) -> Signature {
    Signature::new(V1_2, FLOATS, &BIDI_LSTM_INPUTS, outputs).optional(&[BIDI_LN])
}

fn lower_bidi_lstm(a: &Args<'_>) -> Result<Lowered, CompileError> {
    let mut names: Vec<&str> = vec!["input"];
    names.extend(FW_NAMES);
    names.extend(BW_NAMES);
    names.push("aux_input");
    let (mask, ids) = masked(a, &names);
    let merge = a.bool("merge_outputs")?;
    let n = a.outputs().len();
    let want = usize::from(!merge) + 1;
    if n != want && n != want + 4 {
        return Err(a.invalid(format!("{n} outputs with merge_outputs = {merge}")));
    }
    let k = BidiLstm {
        present: mask,
        params: lstm_params(a)?,
        time_major: a.bool("time_major")?,
        merge,
        state_outputs: n == want + 4,
    };
    lowered(a, k, ids)
}

/// BIDIRECTIONAL_SEQUENCE_LSTM.
pub const BIDIRECTIONAL_SEQUENCE_LSTM: OpDef = OpDef {
    op: OperationType::BIDIRECTIONAL_SEQUENCE_LSTM,
    signatures: &[
        bidi_lstm_sig(&[t("fw_output"), t("bw_output")]),
        bidi_lstm_sig(&[t("fw_output")]),
        bidi_lstm_sig(&[
            t("fw_output"),
            t("bw_output"),
            t("fw_output_state"),
            t("fw_cell_state"),
            t("bw_output_state"),
            t("bw_cell_state"),
        ]),
        bidi_lstm_sig(&[
            t("fw_output"),
            t("fw_output_state"),
            t("fw_cell_state"),
            t("bw_output_state"),
            t("bw_cell_state"),
        ]),
    ],
    check: None,
    runs: FLOATS,
    lower: Some(lower_bidi_lstm),
};

/// RNN.
pub const RNN: OpDef = OpDef {
    op: OperationType::RNN,
    signatures: &[Signature::new(
        V1_0,
        FLOATS,
        &[
            t("input"),
            t("weights"),
            t("recurrent_weights"),
            t("bias"),
            t("hidden_state_in"),
            arg("activation", Ty::Int),
        ],
        &[t("hidden_state_out"), t("output")],
    )],
    check: None,
    runs: FLOATS,
    lower: Some(|a| {
        let k = Rnn {
            activation: activation(a)?,
        };
        let ids = [
            "input",
            "weights",
            "recurrent_weights",
            "bias",
            "hidden_state_in",
        ]
        .iter()
        .map(|n| a.input(n))
        .collect::<Result<Vec<_>, _>>()?;
        lowered(a, k, ids)
    }),
};

const SEQ_RNN_INPUTS: &[Arg] = &[
    t("input"),
    t("weights"),
    t("recurrent_weights"),
    t("bias"),
    t("hidden_state"),
    arg("activation", Ty::Int),
    arg("time_major", Ty::Int),
];

fn lower_seq_rnn(a: &Args<'_>) -> Result<Lowered, CompileError> {
    let time_major = match a.i32("time_major")? {
        0 => false,
        1 => true,
        v => return Err(a.invalid(format!("time_major = {v}"))),
    };
    let k = SequenceRnn {
        activation: activation(a)?,
        time_major,
        state_output: a.outputs().len() == 2,
    };
    let ids = [
        "input",
        "weights",
        "recurrent_weights",
        "bias",
        "hidden_state",
    ]
    .iter()
    .map(|n| a.input(n))
    .collect::<Result<Vec<_>, _>>()?;
    lowered(a, k, ids)
}

/// UNIDIRECTIONAL_SEQUENCE_RNN.
pub const UNIDIRECTIONAL_SEQUENCE_RNN: OpDef = OpDef {
    op: OperationType::UNIDIRECTIONAL_SEQUENCE_RNN,
    signatures: &[
        Signature::new(V1_2, FLOATS, SEQ_RNN_INPUTS, &[t("output")]),
        Signature::new(V1_3, FLOATS, SEQ_RNN_INPUTS, &[t("output"), t("state")]),
    ],
    check: None,
    runs: FLOATS,
    lower: Some(lower_seq_rnn),
};

const BIDI_RNN_SLOT_NAMES: &[&str] = &[
    "input",
    "fw_weights",
    "fw_recurrent_weights",
    "fw_bias",
    "fw_hidden_state",
    "bw_weights",
    "bw_recurrent_weights",
    "bw_bias",
    "bw_hidden_state",
    "aux_input",
    "fw_aux_weights",
    "bw_aux_weights",
];

const BIDI_RNN_INPUTS: &[Arg] = &[
    t("input"),
    t("fw_weights"),
    t("fw_recurrent_weights"),
    t("fw_bias"),
    t("fw_hidden_state"),
    t("bw_weights"),
    t("bw_recurrent_weights"),
    t("bw_bias"),
    t("bw_hidden_state"),
    t("aux_input"),
    t("fw_aux_weights"),
    t("bw_aux_weights"),
    arg("activation", Ty::Int),
    arg("time_major", Ty::Bool),
    arg("merge_outputs", Ty::Bool),
];

fn lower_bidi_rnn(a: &Args<'_>) -> Result<Lowered, CompileError> {
    let (mask, ids) = masked(a, BIDI_RNN_SLOT_NAMES);
    let merge = a.bool("merge_outputs")?;
    let n = a.outputs().len();
    let want = usize::from(!merge) + 1;
    if n != want && n != want + 2 {
        return Err(a.invalid(format!("{n} outputs with merge_outputs = {merge}")));
    }
    let aux = mask >> 9 & 7;
    if !(aux == 0 || aux == 1 || aux == 7) {
        return Err(a.invalid("aux input and aux weights must be given together"));
    }
    let k = BidiRnn {
        present: mask as u32,
        activation: activation(a)?,
        time_major: a.bool("time_major")?,
        merge,
        state_outputs: n == want + 2,
    };
    lowered(a, k, ids)
}

/// BIDIRECTIONAL_SEQUENCE_RNN.
pub const BIDIRECTIONAL_SEQUENCE_RNN: OpDef = OpDef {
    op: OperationType::BIDIRECTIONAL_SEQUENCE_RNN,
    signatures: &[
        Signature::new(
            V1_2,
            FLOATS,
            BIDI_RNN_INPUTS,
            &[t("fw_output"), t("bw_output")],
        ),
        Signature::new(V1_2, FLOATS, BIDI_RNN_INPUTS, &[t("fw_output")]),
        Signature::new(
            V1_3,
            FLOATS,
            BIDI_RNN_INPUTS,
            &[t("fw_output"), t("bw_output"), t("fw_state"), t("bw_state")],
        ),
        Signature::new(
            V1_3,
            FLOATS,
            BIDI_RNN_INPUTS,
            &[t("fw_output"), t("fw_state"), t("bw_state")],
        ),
    ],
    check: None,
    runs: FLOATS,
    lower: Some(lower_bidi_rnn),
};

/// SVDF.
pub const SVDF: OpDef = OpDef {
    op: OperationType::SVDF,
    signatures: &[Signature::new(
        V1_0,
        FLOATS,
        &[
            t("input"),
            t("weights_feature"),
            t("weights_time"),
            t("bias"),
            t("state_in"),
            arg("rank", Ty::Int),
            arg("activation", Ty::Int),
        ],
        &[t("state_out"), t("output")],
    )],
    check: None,
    runs: FLOATS,
    lower: Some(|a| {
        let has_bias = a.has("bias");
        let k = Svdf {
            rank: a.positive("rank")?,
            activation: activation(a)?,
            has_bias,
        };
        let names: &[&str] = if has_bias {
            &[
                "input",
                "weights_feature",
                "weights_time",
                "bias",
                "state_in",
            ]
        } else {
            &["input", "weights_feature", "weights_time", "state_in"]
        };
        let ids = names
            .iter()
            .map(|n| a.input(n))
            .collect::<Result<Vec<_>, _>>()?;
        lowered(a, k, ids)
    }),
};

const Q8: &[crate::hal::OperandType] = &[crate::hal::OperandType::TENSOR_QUANT8_ASYMM];
const Q16: Ty = Ty::Is(crate::hal::OperandType::TENSOR_QUANT16_SYMM);
const I32: Ty = Ty::Is(crate::hal::OperandType::TENSOR_INT32);

/// QUANTIZED_16BIT_LSTM.
pub const QUANTIZED_16BIT_LSTM: OpDef = OpDef {
    op: OperationType::QUANTIZED_16BIT_LSTM,
    signatures: &[Signature::new(
        V1_2,
        Q8,
        gate_inputs!(
            arg("ib", I32),
            arg("fb", I32),
            arg("cb", I32),
            arg("ob", I32),
            arg("prev_cell_state", Q16),
            t("prev_output"),
        ),
        &[arg("cell_state", Q16), t("output")],
    )],
    check: None,
    runs: Q8,
    lower: Some(|a| {
        let names = [
            "input",
            "i2i",
            "i2f",
            "i2c",
            "i2o",
            "r2i",
            "r2f",
            "r2c",
            "r2o",
            "ib",
            "fb",
            "cb",
            "ob",
            "prev_cell_state",
            "prev_output",
        ];
        let ids = names
            .iter()
            .map(|n| a.input(n))
            .collect::<Result<Vec<_>, _>>()?;
        lowered(a, vnpu_emu::kernels::QuantizedLstm, ids)
    }),
};

const Q8S: &[crate::hal::OperandType] = &[crate::hal::OperandType::TENSOR_QUANT8_ASYMM_SIGNED];
const Q8SYMM: Ty = Ty::Is(crate::hal::OperandType::TENSOR_QUANT8_SYMM);
const F32: Ty = Ty::Is(crate::hal::OperandType::FLOAT32);

/// QUANTIZED_LSTM's tensor slots, in the HAL's input order.
const QLSTM_SLOT_NAMES: &[&str] = &[
    "input",
    "i2i",
    "i2f",
    "i2c",
    "i2o",
    "r2i",
    "r2f",
    "r2c",
    "r2o",
    "c2i",
    "c2f",
    "c2o",
    "ib",
    "fb",
    "cb",
    "ob",
    "pw",
    "pb",
    "prev_output",
    "prev_cell_state",
    "lni",
    "lnf",
    "lnc",
    "lno",
];

/// QUANTIZED_LSTM.
pub const QUANTIZED_LSTM: OpDef = OpDef {
    op: OperationType::QUANTIZED_LSTM,
    signatures: &[Signature::new(
        V1_3,
        Q8S,
        &[
            t("input"),
            arg("i2i", Q8SYMM),
            arg("i2f", Q8SYMM),
            arg("i2c", Q8SYMM),
            arg("i2o", Q8SYMM),
            arg("r2i", Q8SYMM),
            arg("r2f", Q8SYMM),
            arg("r2c", Q8SYMM),
            arg("r2o", Q8SYMM),
            arg("c2i", Q16),
            arg("c2f", Q16),
            arg("c2o", Q16),
            arg("ib", I32),
            arg("fb", I32),
            arg("cb", I32),
            arg("ob", I32),
            arg("pw", Q8SYMM),
            arg("pb", I32),
            t("prev_output"),
            arg("prev_cell_state", Q16),
            arg("lni", Q16),
            arg("lnf", Q16),
            arg("lnc", Q16),
            arg("lno", Q16),
            arg("cell_clip", F32),
            arg("proj_clip", F32),
            arg("input_scale", F32),
            arg("forget_scale", F32),
            arg("cell_scale", F32),
            arg("output_scale", F32),
            arg("hidden_zero_point", Ty::Int),
            arg("hidden_scale", F32),
        ],
        &[t("output_state"), arg("cell_state", Q16), t("output")],
    )],
    check: None,
    runs: Q8S,
    lower: Some(|a| {
        let (mask, ids) = masked(a, QLSTM_SLOT_NAMES);
        let k = vnpu_emu::kernels::QLstm {
            present: mask as u32,
            cell_clip: a.f32("cell_clip")?,
            proj_clip: a.f32("proj_clip")?,
            gate_scales: [
                a.f32("input_scale")?,
                a.f32("forget_scale")?,
                a.f32("cell_scale")?,
                a.f32("output_scale")?,
            ],
            hidden_zero_point: a.i32("hidden_zero_point")?,
            hidden_scale: a.f32("hidden_scale")?,
        };
        lowered(a, k, ids)
    }),
};
