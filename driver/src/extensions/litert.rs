//! "dev.vnpu.litert": LiteRT's (TFLite's) own semantics for the operations where they and
//! NNAPI's part, so that a model imported from a .tflite file (`crate::tflite`) gives
//! LiteRT's results. Quantised RESIZE_BILINEAR: NNAPI interpolates the stored integers in
//! float32 and truncates; LiteRT's reference kernel (`ResizeBilinearInteger`) works in
//! fixed point and rounds, so after a feature pyramid's three resizes
//! face_detection_full_range_int8 would end up to 13 steps from LiteRT's reference
//! outputs. The operation's definition is `crate::ops::resize_bilinear_integer`; it runs as
//! the device's RESIZE_BILINEAR_INTEGER kernel. The extension declares no operand types.

use super::{encode_type, no_operand_types, ExtensionDef};
use crate::hal::OperationType;

/// The extension's name.
pub const NAME: &str = "dev.vnpu.litert";
/// The driver's internal prefix for it.
pub const PREFIX: u16 = 3;

/// `VNPU_RESIZE_BILINEAR_INTEGER` within the extension.
pub const VNPU_RESIZE_BILINEAR_INTEGER: u16 = 0;

/// VNPU_RESIZE_BILINEAR_INTEGER under the internal prefix.
pub const RESIZE_BILINEAR_INTEGER: OperationType =
    OperationType(encode_type(PREFIX, VNPU_RESIZE_BILINEAR_INTEGER));

/// The extension.
pub static EXTENSION: ExtensionDef = ExtensionDef {
    name: NAME,
    prefix: PREFIX,
    operand_types: &[],
    operations: &[(VNPU_RESIZE_BILINEAR_INTEGER, "VNPU_RESIZE_BILINEAR_INTEGER")],
    check_operand: no_operand_types,
};
