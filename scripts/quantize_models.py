#!/usr/bin/env python3
"""Makes the int8 models in models/ from the shipped float ones with ai-edge-quantizer.

    scripts/quantize_models.py [MODEL ...] [--write-calibration]

For each model (default: face_detection_short_range, iris_landmark, face_landmark and
face_detection_full_range) it writes
models/<model>_int8.tflite: full-integer static-range quantisation, int8 activations
(asymmetric, per tensor) and int8 weights (symmetric, per output channel for the CONV_2D
and DEPTHWISE_CONV_2D filters), int32 biases with scale input_scale * weight_scale, int8
model inputs and outputs. The quantizer has no int8 PRELU: iris_landmark's and face_landmark's PRELUs stay
float32 between a DEQUANTIZE and a QUANTIZE; every other operator is int8. The recipe is models/quantize/recipe.json; the calibration inputs
are models/quantize/calibration/<model>/sample_K.npy (uint8 HWC images, fed to the model as
pixel / 127.5 - 1, the range the face models take).

Before quantising, the float model is brought into the form the quantizer reads correctly:
  - operator codes carry `builtin_code` (these models, written before builtin codes went
    past 127, only set `deprecated_builtin_code`; ai-edge-quantizer 0.10 reads only
    `builtin_code` and took every operator for ADD, quantising conv filters and biases as
    activations, which LiteRT then refused: "conv.cc zero_point != 0");
  - float16 weights behind DEQUANTIZE become float32 constants (the quantizer then sees
    them as the weights they are), and tensors and buffers nothing uses are dropped;
  - a SignatureDef (`serving_default`) names the input and outputs (the quantizer's
    calibration runs by signature; these models have none).

Then it checks the result: every CONV_2D / DEPTHWISE_CONV_2D has a per-channel symmetric
int8 filter and an int32 bias with zero point 0 and scale input_scale * filter_scale; every
activation tensor is int8 except around PRELU; the model runs in LiteRT
(1 thread); and, on a seeded input, its dequantised outputs are compared with the float
model's (printed; a correlation below 0.95 fails the script). Last, the SHA-256 of each
file written.

--write-calibration (re)writes the calibration inputs from their seed (half seeded
uniform noise, the distribution the references use, half smooth synthetic images).

The script makes its own virtual environment (scripts/.venv-quantizer, or
$VNPU_QUANTIZER_VENV) with the pinned packages below from the package index on first use.
"""

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = Path(os.environ.get("VNPU_QUANTIZER_VENV", ROOT / "scripts" / ".venv-quantizer"))
PACKAGES = ["ai-edge-quantizer==0.10.0", "ai-edge-litert==2.3.0", "numpy==2.4.6"]
MODELS = ["face_detection_short_range", "iris_landmark", "face_landmark", "face_detection_full_range"]
# Operators ai-edge-quantizer 0.10 has no int8 form for: they stay float32 between a
# DEQUANTIZE and a QUANTIZE.
FLOAT_OPS = {"PRELU", "DEQUANTIZE", "QUANTIZE"}
QDIR = ROOT / "models" / "quantize"
RECIPE = QDIR / "recipe.json"
SIGNATURE = "serving_default"
CALIBRATION_SEED = 14
CALIBRATION_SAMPLES = 4


def ensure_venv():
    """Re-runs this script inside the venv (made on first use)."""
    if Path(sys.prefix).resolve() == VENV.resolve():
        return
    py = VENV / "bin" / "python"
    if not py.exists():
        print(f"making {VENV} with {' '.join(PACKAGES)} ...", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", *PACKAGES], check=True)
    os.execv(str(py), [str(py), __file__, *sys.argv[1:]])


def text(s):
    return s.decode() if isinstance(s, bytes) else s


def prepare_float(src: Path, dst: Path):
    """Writes `src` to `dst` in the form the quantizer reads correctly (see the module
    documentation). Returns the input tensor's name and shape."""
    import numpy as np
    from ai_edge_litert import schema_py_generated as fb
    from ai_edge_litert.tools import flatbuffer_utils

    m = flatbuffer_utils.read_model(str(src))
    if len(m.subgraphs) != 1:
        sys.exit(f"{src.name}: one subgraph expected, found {len(m.subgraphs)}")
    sg = m.subgraphs[0]
    for c in m.operatorCodes:
        c.builtinCode = max(c.builtinCode, c.deprecatedBuiltinCode)

    # float16 constants behind DEQUANTIZE -> float32 constants.
    kept = []
    for op in sg.operators:
        code = m.operatorCodes[op.opcodeIndex].builtinCode
        if code == fb.BuiltinOperator.DEQUANTIZE:
            t = sg.tensors[op.inputs[0]]
            data = m.buffers[t.buffer].data
            if t.type == fb.TensorType.FLOAT16 and data is not None:
                f32 = np.frombuffer(bytes(data), np.float16).astype(np.float32)
                b = fb.BufferT()
                b.data = np.frombuffer(f32.tobytes(), np.uint8)
                m.buffers.append(b)
                sg.tensors[op.outputs[0]].buffer = len(m.buffers) - 1
                continue
        kept.append(op)
    sg.operators = kept

    # Drop the tensors and buffers nothing uses any more.
    used = set(sg.inputs) | set(sg.outputs)
    for op in sg.operators:
        used |= {i for i in op.inputs if i >= 0} | set(op.outputs)
    order = sorted(used)
    new_index = {old: new for new, old in enumerate(order)}
    sg.tensors = [sg.tensors[i] for i in order]
    remap = lambda v: [new_index[i] if i >= 0 else i for i in v]  # noqa: E731
    sg.inputs, sg.outputs = remap(sg.inputs), remap(sg.outputs)
    for op in sg.operators:
        op.inputs, op.outputs = remap(op.inputs), remap(op.outputs)
    buffers = sorted({0} | {t.buffer for t in sg.tensors})
    new_buffer = {old: new for new, old in enumerate(buffers)}
    m.buffers = [m.buffers[b] for b in buffers]
    for t in sg.tensors:
        t.buffer = new_buffer[t.buffer]

    def tensor_map(i):
        tm = fb.TensorMapT()
        tm.name, tm.tensorIndex = text(sg.tensors[i].name), i
        return tm

    sig = fb.SignatureDefT()
    sig.signatureKey, sig.subgraphIndex = SIGNATURE, 0
    sig.inputs = [tensor_map(i) for i in sg.inputs]
    sig.outputs = [tensor_map(i) for i in sg.outputs]
    m.signatureDefs = [sig]
    dst.write_bytes(bytes(flatbuffer_utils.convert_object_to_bytearray(m)))
    if len(sg.inputs) != 1:
        sys.exit(f"{src.name}: one input expected")
    x = sg.tensors[sg.inputs[0]]
    return text(x.name), [int(d) for d in x.shape]


def calibration_dir(model):
    return QDIR / "calibration" / model


def write_calibration(model, shape):
    """Seeded calibration images for `model` (uint8, HWC)."""
    import numpy as np

    rng = np.random.default_rng([CALIBRATION_SEED, sum(model.encode())])
    _, h, w, c = shape
    d = calibration_dir(model)
    d.mkdir(parents=True, exist_ok=True)
    for old in d.glob("sample_*.npy"):
        old.unlink()
    for k in range(CALIBRATION_SAMPLES):
        if k % 2 == 0:
            img = rng.integers(0, 256, size=(h, w, c))
        else:
            # A smooth field (a coarse random grid, bilinearly enlarged) with a few
            # ellipses of flat colour and a little noise.
            g = rng.uniform(0, 255, size=(5, 5, c))
            ys, xs = np.linspace(0, 4, h), np.linspace(0, 4, w)
            y0, x0 = np.minimum(ys.astype(int), 3), np.minimum(xs.astype(int), 3)
            fy, fx = (ys - y0)[:, None, None], (xs - x0)[None, :, None]
            img = (g[y0][:, x0] * (1 - fy) * (1 - fx) + g[y0 + 1][:, x0] * fy * (1 - fx)
                   + g[y0][:, x0 + 1] * (1 - fy) * fx + g[y0 + 1][:, x0 + 1] * fy * fx)
            yy, xx = np.mgrid[0:h, 0:w]
            for _ in range(3):
                cy, cx = rng.uniform(0, h), rng.uniform(0, w)
                ry, rx = rng.uniform(h / 10, h / 3), rng.uniform(w / 10, w / 3)
                inside = ((yy - cy) / ry) ** 2 + ((xx - cx) / rx) ** 2 <= 1
                img[inside] = rng.uniform(0, 255, size=c)
            img = img + rng.normal(0, 6, size=img.shape)
        np.save(d / f"sample_{k}.npy", np.clip(np.rint(img), 0, 255).astype(np.uint8))
    print(f"wrote   {CALIBRATION_SAMPLES} calibration inputs in {d.relative_to(ROOT)}")


def calibration(model, input_name, shape):
    import numpy as np

    files = sorted(calibration_dir(model).glob("sample_*.npy"))
    if not files:
        sys.exit(f"no calibration inputs in {calibration_dir(model)} (--write-calibration)")
    samples = []
    for f in files:
        img = np.load(f)
        if img.dtype != np.uint8 or list(img.shape) != shape[1:]:
            sys.exit(f"{f}: {img.dtype} {list(img.shape)}, want uint8 {shape[1:]}")
        x = (img.astype(np.float32) / 127.5 - 1.0)[None]
        samples.append({input_name: x})
    return samples


def check(model_path: Path):
    """The structural checks of the module documentation; returns op counts."""
    import numpy as np
    from ai_edge_litert import schema_py_generated as fb
    from ai_edge_litert.tools import flatbuffer_utils

    m = flatbuffer_utils.read_model(str(model_path))
    sg = m.subgraphs[0]
    names = {v: k for k, v in vars(fb.BuiltinOperator).items() if not k.startswith("_")}
    counts = {}
    problems = []

    def q(i):
        t = sg.tensors[i]
        qp = t.quantization
        scale = np.asarray(qp.scale if qp is not None and qp.scale is not None else [])
        zp = np.asarray(qp.zeroPoint if qp is not None and qp.zeroPoint is not None else [])
        return t, scale, zp

    for k, op in enumerate(sg.operators):
        code = m.operatorCodes[op.opcodeIndex]
        name = names[max(code.builtinCode, code.deprecatedBuiltinCode)]
        counts[name] = counts.get(name, 0) + 1
        for i in list(op.inputs) + list(op.outputs):
            if i < 0:
                continue
            t, _, _ = q(i)
            const = m.buffers[t.buffer].data is not None
            if not const and t.type != fb.TensorType.INT8 and name not in FLOAT_OPS:
                problems.append(f"op {k} {name}: activation {text(t.name)} is not int8")
        if name in ("CONV_2D", "DEPTHWISE_CONV_2D"):
            _, si, _ = q(op.inputs[0])
            w, sw, zw = q(op.inputs[1])
            b, sb, zb = q(op.inputs[2])
            channels = w.shape[0] if name == "CONV_2D" else w.shape[3]
            axis = 0 if name == "CONV_2D" else 3
            if w.type != fb.TensorType.INT8 or len(sw) != channels or zw.any() \
                    or w.quantization.quantizedDimension != axis:
                problems.append(f"op {k} {name}: filter not int8 symmetric per-channel")
            if b.type != fb.TensorType.INT32 or zb.any() or len(sb) != channels \
                    or not np.allclose(sb, si[0] * sw, rtol=1e-5):
                problems.append(f"op {k} {name}: bias not int32 at input x filter scale")
    if problems:
        sys.exit(f"{model_path.name}:\n  " + "\n  ".join(problems))
    return counts


def compare_with_float(float_path: Path, int8_path: Path, seed=0):
    """Runs both in LiteRT (1 thread) on one seeded input; prints how far apart they are.
    Returns the smallest correlation over the outputs."""
    import numpy as np
    from ai_edge_litert.interpreter import Interpreter

    f = Interpreter(model_path=str(float_path), num_threads=1)
    i8 = Interpreter(model_path=str(int8_path), num_threads=1)
    f.allocate_tensors()
    i8.allocate_tensors()
    fd, qd = f.get_input_details()[0], i8.get_input_details()[0]
    x = np.random.default_rng(seed).uniform(-1, 1, size=fd["shape"]).astype(np.float32)
    s, z = qd["quantization"]
    f.set_tensor(fd["index"], x)
    i8.set_tensor(qd["index"], np.clip(np.rint(x / s) + z, -128, 127).astype(np.int8))
    f.invoke()
    i8.invoke()
    worst = 1.0
    for fo, qo in zip(f.get_output_details(), i8.get_output_details()):
        want = f.get_tensor(fo["index"]).astype(np.float64)
        s, z = qo["quantization"]
        got = (i8.get_tensor(qo["index"]).astype(np.float64) - z) * s
        err = np.abs(want - got)
        corr = float(np.corrcoef(want.ravel(), got.ravel())[0, 1])
        worst = min(worst, corr)
        print(f"        output {qo['name']}: int8 vs float: mean abs error {err.mean():.3g} "
              f"({err.mean() / s:.2f} LSB of {s:.4g}), max {err.max():.3g}, "
              f"correlation {corr:.4f}")
    return worst


def main():
    ensure_venv()
    p = argparse.ArgumentParser()
    p.add_argument("models", nargs="*", default=MODELS)
    p.add_argument("--write-calibration", action="store_true")
    a = p.parse_args()

    from ai_edge_quantizer import quantizer

    recipe = json.loads(RECIPE.read_text())
    for model in a.models:
        src = ROOT / "models" / f"{model}.tflite"
        out = ROOT / "models" / f"{model}_int8.tflite"
        print(f"model   {src.name}")
        with tempfile.TemporaryDirectory() as t:
            prepared = Path(t) / f"{model}.tflite"
            input_name, shape = prepare_float(src, prepared)
            if a.write_calibration:
                write_calibration(model, shape)
            qt = quantizer.Quantizer(str(prepared))
            qt.load_quantization_recipe(recipe)
            result = qt.calibrate({SIGNATURE: calibration(model, input_name, shape)},
                                  num_threads=1)
            q = qt.quantize(result, enable_progress_bar=False, enable_progress_report=False)
            out.write_bytes(bytes(q.quantized_model))
            counts = check(out)
            print(f"        operators {dict(sorted(counts.items()))}")
            worst = compare_with_float(prepared, out)
        digest = hashlib.sha256(out.read_bytes()).hexdigest()
        print(f"wrote   {out.relative_to(ROOT)} ({out.stat().st_size} bytes)")
        print(f"sha256  {digest}")
        if worst < 0.95:
            sys.exit(f"{out.name}: an output correlates {worst:.3f} with the float model's")


if __name__ == "__main__":
    main()
