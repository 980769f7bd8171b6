//! Property tests of the movement kernels added with opcodes 80..: the parameter codec,
//! robustness on arbitrary words and shapes, and each kernel against a plain reference
//! written here with explicit index arithmetic.

use crate::kernels::{
    run_f32, BatchToSpace, ChannelShuffle, KernelOp, SliceDim, SpaceToBatch, Split, StridedSlice,
    Tile,
};
use proptest::prelude::*;

fn cfg() -> ProptestConfig {
    crate::kernels::proptest_config(64)
}

fn numel(s: &[usize]) -> usize {
    s.iter().product()
}

/// Row-major multi-index of `i`.
fn unflat(shape: &[usize], mut i: usize) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        idx[d] = i % shape[d];
        i /= shape[d];
    }
    idx
}

/// Row-major flat index of `idx`.
fn flat(shape: &[usize], idx: &[usize]) -> usize {
    idx.iter().zip(shape).fold(0, |a, (&i, &d)| a * d + i)
}

fn data(n: usize) -> Vec<f32> {
    (0..n).map(|i| i as f32 + 1.0).collect()
}

fn run1(op: impl Into<KernelOp>, shape: &[usize]) -> (Vec<usize>, Vec<f32>) {
    let x = data(numel(shape));
    run_f32(&op.into(), &[(shape, &x)]).unwrap().remove(0)
}

/// A shape with a valid slice per dimension.
fn arb_slice() -> impl Strategy<Value = (Vec<usize>, Vec<SliceDim>)> {
    proptest::collection::vec(1usize..5, 1..=4).prop_flat_map(|shape| {
        let dims: Vec<_> = shape
            .iter()
            .map(|&d| {
                (0..d, prop_oneof![1i32..3, -2i32..0]).prop_flat_map(move |(b, s)| {
                    // Largest count that stays in range from b with step s.
                    let max = if s > 0 {
                        (d - 1 - b) / s as usize + 1
                    } else {
                        b / (-s) as usize + 1
                    };
                    (0..=max as u32).prop_map(move |count| SliceDim {
                        begin: b as i32,
                        stride: s,
                        count,
                    })
                })
            })
            .collect();
        (Just(shape), dims)
    })
}

proptest! {
    #![proptest_config(cfg())]

    #[test]
    fn decode_and_run_never_panic(
        opcode in 80u32..=88,
        words in proptest::collection::vec(prop_oneof![0u32..6, any::<u32>()], 0..16),
        shapes in proptest::collection::vec(proptest::collection::vec(0usize..5, 0..=5), 0..3),
    ) {
        if let Ok(op) = KernelOp::decode(opcode, &words) {
            prop_assert_eq!(op.encode_params(), words);
            let xs: Vec<Vec<f32>> = shapes.iter().map(|s| data(numel(s))).collect();
            let ins: Vec<(&[usize], &[f32])> =
                shapes.iter().zip(&xs).map(|(s, x)| (s.as_slice(), x.as_slice())).collect();
            let _ = run_f32(&op, &ins);
        }
    }

    #[test]
    fn strided_slice_matches_reference((shape, dims) in arb_slice()) {
        let counts: Vec<usize> = dims.iter().map(|d| d.count as usize).collect();
        let out: Vec<u32> = dims.iter().map(|d| d.count).collect();
        let k = StridedSlice { dims: dims.clone(), shape: out };
        let w = KernelOp::from(k.clone()).encode_params();
        prop_assert_eq!(KernelOp::decode(82, &w), Ok(KernelOp::from(k.clone())));
        let (oshape, got) = run1(k, &shape);
        prop_assert_eq!(&oshape, &counts);
        let x = data(numel(&shape));
        let want: Vec<f32> = (0..numel(&counts))
            .map(|i| {
                let idx = unflat(&counts, i);
                let src: Vec<usize> = idx
                    .iter()
                    .zip(&dims)
                    .map(|(&k, d)| (d.begin + d.stride * k as i32) as usize)
                    .collect();
                x[flat(&shape, &src)]
            })
            .collect();
        prop_assert_eq!(got, want);
    }

    #[test]
    fn space_to_batch_matches_reference(
        n in 1usize..3, h in 1usize..5, w in 1usize..5, c in 1usize..3,
        bh in 1u32..3, bw in 1u32..3, pt in 0u32..3, pl in 0u32..3, nchw in any::<bool>(),
    ) {
        let (bhu, bwu) = (bh as usize, bw as usize);
        // Bottom/right padding that makes the padded size a multiple of the block.
        let pb = ((bhu - (h + pt as usize) % bhu) % bhu) as u32;
        let pr = ((bwu - (w + pl as usize) % bwu) % bwu) as u32;
        let shape = if nchw { vec![n, c, h, w] } else { vec![n, h, w, c] };
        let k = SpaceToBatch { block: [bh, bw], pads: [pt, pb, pl, pr], nchw, value: -1.0 };
        let (oshape, got) = run1(k, &shape);
        let (oh, ow) = ((h + (pt + pb) as usize) / bhu, (w + (pl + pr) as usize) / bwu);
        let on = n * bhu * bwu;
        let x = data(numel(&shape));
        let at = |s: &[usize], b: usize, y: usize, xx: usize, ch: usize| {
            if nchw { flat(s, &[b, ch, y, xx]) } else { flat(s, &[b, y, xx, ch]) }
        };
        let os = if nchw { vec![on, c, oh, ow] } else { vec![on, oh, ow, c] };
        prop_assert_eq!(&oshape, &os);
        let mut want = vec![0.0; numel(&os)];
        for ob in 0..on {
            let (blk, b) = (ob / n, ob % n);
            let (sh, sw) = (blk / bwu, blk % bwu);
            for oy in 0..oh {
                for ox in 0..ow {
                    for ch in 0..c {
                        let py = (oy * bhu + sh) as isize - pt as isize;
                        let px = (ox * bwu + sw) as isize - pl as isize;
                        let v = if py >= 0 && px >= 0 && (py as usize) < h && (px as usize) < w {
                            x[at(&shape, b, py as usize, px as usize, ch)]
                        } else {
                            -1.0
                        };
                        want[at(&os, ob, oy, ox, ch)] = v;
                    }
                }
            }
        }
        prop_assert_eq!(&got, &want);
        // Without padding, BATCH_TO_SPACE_ND undoes it.
        if pt + pb + pl + pr == 0 {
            let back = run_f32(&BatchToSpace { block: [bh, bw], nchw }.into(), &[(&os, &got)])
                .unwrap()
                .remove(0);
            prop_assert_eq!(back, (shape.clone(), x));
        }
    }

    #[test]
    fn tile_split_shuffle_match_reference(
        shape in proptest::collection::vec(1usize..4, 1..=4),
        mults in proptest::collection::vec(1u32..3, 4),
        axis_seed in 0usize..4,
        groups in 1u32..4,
    ) {
        let rank = shape.len();
        let x = data(numel(&shape));
        // TILE.
        let m = mults[..rank].to_vec();
        let (ts, got) = run1(Tile { multiples: m.clone() }, &shape);
        let want_s: Vec<usize> = shape.iter().zip(&m).map(|(&d, &k)| d * k as usize).collect();
        prop_assert_eq!(&ts, &want_s);
        let want: Vec<f32> = (0..numel(&ts))
            .map(|i| {
                let idx: Vec<usize> = unflat(&ts, i).iter().zip(&shape).map(|(&k, &d)| k % d).collect();
                x[flat(&shape, &idx)]
            })
            .collect();
        prop_assert_eq!(got, want);
        let axis = axis_seed % rank;
        // SPLIT into `shape[axis]` parts of one: part k holds index k of the axis.
        let count = shape[axis] as u32;
        let parts = run_f32(&Split { axis: axis as u32, count }.into(), &[(&shape, &x)]).unwrap();
        prop_assert_eq!(parts.len(), count as usize);
        for (k, (ps, pd)) in parts.iter().enumerate() {
            for (i, v) in pd.iter().enumerate() {
                let mut idx = unflat(ps, i);
                idx[axis] = k;
                prop_assert_eq!(*v, x[flat(&shape, &idx)]);
            }
        }
        // CHANNEL_SHUFFLE with a group count that divides the axis.
        let mut sh = shape.clone();
        sh[axis] *= groups as usize;
        let xs = data(numel(&sh));
        let got = run_f32(&ChannelShuffle { groups, axis: axis as u32 }.into(), &[(&sh, &xs)])
            .unwrap()
            .remove(0)
            .1;
        let cpg = sh[axis] / groups as usize;
        for (i, v) in got.iter().enumerate() {
            let mut idx = unflat(&sh, i);
            let oc = idx[axis];
            idx[axis] = (oc % groups as usize) * cpg + oc / groups as usize;
            prop_assert_eq!(*v, xs[flat(&sh, &idx)]);
        }
    }
}
