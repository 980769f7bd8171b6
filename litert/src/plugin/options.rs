//! Builtin options through LiteRT's compiler context: the context has one getter per
//! option, so each builtin whose mapping reads options lists here which getters fill which
//! slots of its options table (the schema's slots, those [`vnpu_driver::tflite::ops`]
//! reads). The values are the schema's (padding, activation enums as the file holds them).
//! A builtin whose options vnpu reads but which has no entry here stays on the CPU, with
//! that reason in the partition report.

use std::ffi::c_void;

use vnpu_driver::tflite::ops::{c_params, OptValue};

use crate::lrt::{CompilerContext, Handle, Status, OK};

/// How a getter returns its option.
#[derive(Clone, Copy, Debug)]
enum Kind {
    /// `uint32_t` enum (padding, activation, weights format): a byte option.
    Enum,
    /// `int32_t`.
    I32,
    /// `bool`: a byte option.
    Bool,
    /// `float`.
    F32,
    /// `(const int32_t**, int32_t*)`: an int vector.
    Ints,
}

use Kind::{Bool, Enum, Ints, F32, I32};

/// The first option getter's index in the compiler context's table.
const FIRST: usize = 37;

/// `(getter index in the context, kind, options slot)` for each option of a builtin.
fn getters(code: i32) -> Option<&'static [(usize, Kind, u16)]> {
    Some(match code {
        0 => &[(62, Enum, 4)],  // ADD
        41 => &[(43, Enum, 4)], // SUB
        18 => &[(63, Enum, 4)], // MUL
        42 => &[(64, Enum, 4)], // DIV
        3 => &[
            (45, Enum, 4),
            (46, I32, 6),
            (47, I32, 8),
            (48, Enum, 10),
            (49, I32, 12),
            (50, I32, 14),
        ], // CONV_2D
        4 => &[
            (51, Enum, 4),
            (52, I32, 6),
            (53, I32, 8),
            (54, I32, 10),
            (55, Enum, 12),
            (56, I32, 14),
            (57, I32, 16),
        ], // DEPTHWISE_CONV_2D
        67 => &[(58, Enum, 4), (59, I32, 6), (60, I32, 8), (61, Enum, 10)], // TRANSPOSE_CONV
        9 => &[(65, Enum, 4), (66, Enum, 6), (67, Bool, 8)], // FULLY_CONNECTED
        25 => &[(70, F32, 4)],  // SOFTMAX
        2 => &[(71, I32, 4), (72, Enum, 6)], // CONCATENATION
        49 => &[(73, I32, 4)],  // SPLIT
        40 => &[(74, Bool, 4)], // MEAN
        82 => &[(75, Bool, 4)], // REDUCE_MAX
        74 => &[(44, Bool, 4)], // SUM
        89 => &[(97, Bool, 4)], // REDUCE_MIN
        23 => &[(76, Bool, 8), (77, Bool, 10)], // RESIZE_BILINEAR
        97 => &[(78, Bool, 4), (79, Bool, 6)], // RESIZE_NEAREST_NEIGHBOR
        1 => &[
            (83, Enum, 4),
            (84, I32, 6),
            (85, I32, 8),
            (86, I32, 10),
            (87, I32, 12),
            (88, Enum, 14),
        ], // AVERAGE_POOL_2D
        17 => &[
            (89, Enum, 4),
            (90, I32, 6),
            (91, I32, 8),
            (92, I32, 10),
            (93, I32, 12),
            (94, Enum, 14),
        ], // MAX_POOL_2D
        98 => &[(95, F32, 4)],  // LEAKY_RELU
        22 => &[(96, Ints, 4)], // RESHAPE
        36 => &[(105, I32, 4), (106, I32, 6)], // GATHER
        83 => &[(101, I32, 4), (100, I32, 6)], // PACK
        5 => &[(121, I32, 4)],  // DEPTH_TO_SPACE
        26 => &[(122, I32, 4)], // SPACE_TO_DEPTH
        43 => &[(127, Ints, 4)], // SQUEEZE
        45 => &[
            (37, I32, 4),
            (38, I32, 6),
            (40, I32, 8),
            (41, I32, 10),
            (39, I32, 12),
            (42, Bool, 14),
        ], // STRIDED_SLICE
        _ => return None,
    })
}

/// The options of operator `op` (builtin `code`) as slot values; `Err` says why they
/// cannot be read. A getter that fails means the option is absent: the schema's default,
/// as for a file without it.
///
/// # Safety
/// `ctx` is the runtime's compiler context (checked: the pinned table) and `op` one of its
/// operators.
pub unsafe fn read(
    ctx: &CompilerContext,
    op: Handle,
    code: i32,
) -> Result<Vec<(u16, OptValue)>, String> {
    let Some(list) = getters(code) else {
        return match c_params(code).0.is_empty() {
            true => Ok(Vec::new()),
            false => Err("its options are not readable through LiteRT's compiler context".into()),
        };
    };
    let mut out = Vec::new();
    for &(index, kind, slot) in list {
        let raw: *const c_void = ctx.option_getters[index - FIRST];
        if raw.is_null() {
            return Err(format!("the runtime has no option getter {index}"));
        }
        // The pinned table (litert_compiler_context.h) gives getter `index` the signature
        // `kind` describes; `op` is the runtime's operator.
        // SAFETY: that signature is the one transmuted to; every out-pointer is a local of its type.
        let v = unsafe {
            match kind {
                Enum => {
                    let f: unsafe extern "C" fn(Handle, *mut u32) -> Status =
                        std::mem::transmute(raw);
                    let mut v = 0u32;
                    (f(op, &mut v) == OK)
                        .then(|| i8::try_from(v).map(OptValue::I8))
                        .map(|r| r.map_err(|_| format!("option value {v}")))
                        .transpose()?
                }
                I32 => {
                    let f: unsafe extern "C" fn(Handle, *mut i32) -> Status =
                        std::mem::transmute(raw);
                    let mut v = 0i32;
                    (f(op, &mut v) == OK).then_some(OptValue::I32(v))
                }
                Bool => {
                    let f: unsafe extern "C" fn(Handle, *mut bool) -> Status =
                        std::mem::transmute(raw);
                    let mut v = false;
                    (f(op, &mut v) == OK).then_some(OptValue::I8(i8::from(v)))
                }
                F32 => {
                    let f: unsafe extern "C" fn(Handle, *mut f32) -> Status =
                        std::mem::transmute(raw);
                    let mut v = 0f32;
                    (f(op, &mut v) == OK).then_some(OptValue::F32(v))
                }
                Ints => {
                    let f: unsafe extern "C" fn(Handle, *mut *const i32, *mut i32) -> Status =
                        std::mem::transmute(raw);
                    let (mut p, mut n) = (std::ptr::null::<i32>(), 0i32);
                    match (f(op, &mut p, &mut n), usize::try_from(n)) {
                        (OK, Ok(n)) if n <= 64 && (!p.is_null() || n == 0) => {
                            Some(OptValue::Ints(if n == 0 {
                                Vec::new()
                            } else {
                                std::slice::from_raw_parts(p, n).to_vec()
                            }))
                        }
                        _ => None,
                    }
                }
            }
        };
        if let Some(v) = v {
            out.push((slot, v));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lrt::OPTION_GETTERS;

    /// Every builtin whose mapping reads options either has getters for exactly the
    /// slots it reads or is named here as left to the CPU; getters stay in the table.
    #[test]
    fn getters_cover_the_slots_the_mapping_reads() {
        let cpu_only = [11, 81];
        for code in 0..256 {
            let (params, _) = c_params(code);
            if params.is_empty() {
                assert!(getters(code).is_none(), "builtin {code} reads no options");
                continue;
            }
            let Some(list) = getters(code) else {
                assert!(cpu_only.contains(&code), "builtin {code} has no getters");
                continue;
            };
            let mut want: Vec<u16> = params.iter().map(|p| p.slot).collect();
            let mut got: Vec<u16> = list.iter().map(|g| g.2).collect();
            want.sort_unstable();
            got.sort_unstable();
            assert_eq!(got, want, "builtin {code}");
            assert!(list
                .iter()
                .all(|g| (FIRST..FIRST + OPTION_GETTERS).contains(&g.0)));
        }
    }
}
