//! Index kernels: arg-min/max, top-k.

pub mod argminmax;
pub mod topk;
