//! The convolution family: CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED.

pub mod conv2d;
pub mod depthwise;
pub mod fully_connected;

use crate::kernels::{bad_shape, KernelError, Result};
use crate::tensor::{DType, TensorType};

/// Checks the element types of a (input, filter, bias) triple: float32 or float16
/// throughout, or quantised input with a same-typed or per-channel int8 filter and an
/// int32 bias.
pub(crate) fn check_conv_types(
    op: &'static str,
    x: &TensorType,
    f: &TensorType,
    b: &TensorType,
) -> Result<()> {
    let ok = match x.dtype {
        DType::F32 | DType::F16 => f.dtype == x.dtype && b.dtype == x.dtype,
        DType::U8 => matches!(f.dtype, DType::U8 | DType::I8) && b.dtype == DType::I32,
        DType::I8 => f.dtype == DType::I8 && b.dtype == DType::I32,
        d => return Err(KernelError::UnsupportedDType { op, dtype: d }),
    };
    if !ok {
        return Err(bad_shape(
            op,
            format!(
                "input {:?}, filter {:?}, bias {:?} do not go together",
                x.dtype, f.dtype, b.dtype
            ),
        ));
    }
    if f.dtype == DType::I8 && x.dtype == DType::U8 && f.quant.per_channel.is_none() {
        return Err(bad_shape(
            op,
            "an int8 filter of a uint8 input must be per-channel",
        ));
    }
    Ok(())
}
