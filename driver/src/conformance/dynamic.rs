//! The suite's dynamic-output-shape variant (VTS `DynamicOutputShapeTest`): the model's
//! main outputs get unknown dimensions (0, rank kept) and the request leaves them
//! unspecified, so the driver must report the real shapes; then output 0 gets one byte
//! less than it needs, which must give OUTPUT_INSUFFICIENT_SIZE with `isSufficient` false
//! and the real shape. Models with RANK, IF or WHILE are left out, as the suite does.

use super::corpus::TestCase;
use crate::hal::{ErrorStatus, OperationType, Request};

/// Whether the variant applies to `case`.
pub fn applies(case: &TestCase) -> bool {
    let m = &case.model;
    !case.expect_failure
        && std::iter::once(&m.main)
            .chain(&m.referenced)
            .flat_map(|sg| &sg.operations)
            .all(|op| {
                !matches!(
                    op.r#type,
                    OperationType::RANK | OperationType::IF | OperationType::WHILE
                )
            })
}

/// `case` with its main outputs' dimensions unknown.
pub fn with_unknown_outputs(case: &TestCase) -> TestCase {
    let mut c = case.clone();
    let main = &mut c.model.main;
    for &o in &main.output_indexes {
        if let Some(op) = main.operands.get_mut(o as usize) {
            op.dimensions.iter_mut().for_each(|d| *d = 0);
        }
    }
    c
}

/// The request with its outputs' dimensions unspecified.
pub fn unspecified(request: &mut Request) {
    for o in &mut request.outputs {
        o.dimensions.clear();
    }
}

/// `request` with output 0 one byte short (`None` when output 0 holds nothing).
pub fn one_byte_short(request: &Request) -> Option<Request> {
    let mut r = request.clone();
    let out = r.outputs.first_mut()?;
    out.location.length = out.location.length.checked_sub(1)?;
    Some(r)
}

/// What the short run must give: OUTPUT_INSUFFICIENT_SIZE, output 0 insufficient with
/// the real shape. `Err` says what differed.
pub fn check_short(
    status: ErrorStatus,
    shapes: &[crate::hal::OutputShape],
    want_dims: &[u32],
) -> Result<(), String> {
    if status != ErrorStatus::OutputInsufficientSize {
        return Err(format!(
            "output 0 one byte short: {status}, expected OUTPUT_INSUFFICIENT_SIZE"
        ));
    }
    match shapes.first() {
        Some(s) if !s.is_sufficient && s.dimensions == want_dims => Ok(()),
        Some(s) => Err(format!(
            "output 0 one byte short: reported shape {:?} (sufficient: {}), expected {:?} insufficient",
            s.dimensions, s.is_sufficient, want_dims
        )),
        None => Err("output 0 one byte short: no output shapes".into()),
    }
}
