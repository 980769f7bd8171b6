#!/usr/bin/env python3
"""Runs a .tflite model in LiteRT (XNNPACK, 1 thread) and in `vnpu run` on the same seeded
inputs, and compares them.

    scripts/litert_compare.py MODEL.tflite [--seed N] [--repeat N] [--bench]
                              [--write-reference DIR] [--vnpu PATH] [--isa avx2]

Prints, per output, the max abs error and the budget it is checked against (float: 1e-4 of
the output's range in LiteRT, or of its magnitude when it is constant; quantised: +-1 LSB,
with at most 1% of values at +-2; a float output that a DEQUANTIZE makes from a quantised
tensor: +-1 LSB of that tensor's scale, at most 1% at +-2), both timings, and PASS or FAIL
(the exit code is 1 on FAIL).

The reference outputs of a float model are LiteRT's with XNNPACK. Those of a quantised
model (one with int8 or uint8 tensors) come from LiteRT's reference kernels
(BUILTIN_REF, 1 thread), the integer arithmetic of TFLite's quantisation spec that NNAPI's
operations follow: XNNPACK rescales int8 results in float32 instead, which differs from
it by one step on a small share of each layer's values, and through a deep network those
steps add up to many (the script prints how far XNNPACK's outputs are from the reference
ones). Timings are XNNPACK's either way. --bench records LiteRT's
single-thread time in target/litert_times.json, which `cargo bench -p vnpu-benches --bench
models` prints beside its own figure. --write-reference writes the inputs and LiteRT's
outputs as .npy files (how models/reference/ is made).

--isa avx2 caps both sides at AVX2 on a CPU that has AVX-512: vnpu runs with
VNPU_ISA=avx2, and LiteRT sees a CPU without AVX-512 or AVX-VNNI through scripts/isa_cap.c
(built here with cc, loaded with LD_AUDIT; it needs objdump). --bench then records the time
under "MODEL@avx2", which the models bench prints when it runs with VNPU_ISA=avx2.

The script makes its own virtual environment (scripts/.venv-litert, or $VNPU_LITERT_VENV)
with ai-edge-litert and numpy from the package index on first use. `cargo test` never needs
it: the shipped models' references are committed.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = Path(os.environ.get("VNPU_LITERT_VENV", ROOT / "scripts" / ".venv-litert"))
PACKAGES = ["ai-edge-litert", "numpy"]


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


# The LiteRT libraries whose CPUID / XGETBV sites isa_cap rewrites.
CAPPED_LIBS = ["libpywrap_litert_common.so", "libLiteRt.so"]


def capped_env(isa):
    """The environment under which this script, run again, sees only `isa` in LiteRT
    (see scripts/isa_cap.c): the audit library built into target/, and the sites of the
    instructions it rewrites, found by objdump in LiteRT's libraries."""
    import ai_edge_litert

    shim = ROOT / "target" / "isa_cap.so"
    shim.parent.mkdir(exist_ok=True)
    subprocess.run([os.environ.get("CC", "cc"), "-O2", "-shared", "-fPIC", "-o", str(shim),
                    str(ROOT / "scripts" / "isa_cap.c")], check=True)
    entries = []
    for lib in CAPPED_LIBS:
        path = Path(ai_edge_litert.__file__).parent / lib
        dis = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(path)],
                             capture_output=True, text=True, check=True).stdout
        found = []
        for line in dis.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0].endswith(":") and parts[1] in ("cpuid", "xgetbv"):
                found.append(f"{parts[1][0]}:{parts[0][:-1]}")
        entries.append(f"{lib}=" + ",".join(found))
    env = dict(os.environ, LD_AUDIT=str(shim), VNPU_ISA_CAP_SITES=";".join(entries),
               VNPU_ISA_CAPPED=isa)
    return env


def inputs_for(details, seed):
    import numpy as np

    rng = np.random.default_rng(seed)
    arrays = []
    for d in details:
        shape, dtype = tuple(d["shape"]), d["dtype"]
        if np.issubdtype(dtype, np.floating):
            a = rng.uniform(-1.0, 1.0, size=shape).astype(dtype)
        elif dtype == np.int8:
            a = rng.integers(-128, 128, size=shape, dtype=np.int8)
        elif dtype == np.uint8:
            a = rng.integers(0, 256, size=shape, dtype=np.uint8)
        else:
            a = rng.integers(0, 8, size=shape).astype(dtype)
        arrays.append(a)
    return arrays


def run_litert(model, arrays, repeat, reference_kernels=False):
    """LiteRT's outputs on `arrays` and its median time (XNNPACK, or with
    `reference_kernels` the builtin reference kernels)."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    kw = {"experimental_op_resolver_type": OpResolverType.BUILTIN_REF} if reference_kernels else {}
    it = Interpreter(model_path=str(model), num_threads=1, **kw)
    it.allocate_tensors()
    for d, a in zip(it.get_input_details(), arrays):
        it.set_tensor(d["index"], a)
    it.invoke()  # warm-up
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        it.invoke()
        times.append((time.perf_counter() - t) * 1e3)
    outs = [it.get_tensor(d["index"]).copy() for d in it.get_output_details()]
    return outs, sorted(times)[len(times) // 2]


def quantised(it):
    """Whether the model has quantised (int8 / uint8) tensors."""
    import numpy as np

    return any(d["dtype"] in (np.int8, np.uint8) and d["quantization"][0] != 0.0
               for d in it.get_tensor_details())


def output_steps(model):
    """Per output, the step a budget in LSB counts in: the output's own scale when it is
    quantised, the scale of the quantised tensor a DEQUANTIZE made it from when it is
    float, else None."""
    import numpy as np
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    # Without delegates, so that the operators are the model's own.
    it = Interpreter(model_path=str(model), num_threads=1,
                     experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    it.allocate_tensors()
    tensors = {d["index"]: d for d in it.get_tensor_details()}
    made_by = {}
    for op in it._get_ops_details():
        for o in op["outputs"]:
            made_by[o] = op
    steps = []
    for d in it.get_output_details():
        scale = d["quantization"][0]
        if np.issubdtype(d["dtype"], np.integer):
            steps.append(scale or 1.0)
            continue
        op = made_by.get(d["index"])
        src = tensors.get(op["inputs"][0]) if op and op["op_name"] == "DEQUANTIZE" else None
        if src is not None and src["dtype"] in (np.int8, np.uint8) and src["quantization"][0]:
            steps.append(float(src["quantization"][0]))
        else:
            steps.append(None)
    return steps


def run_vnpu(vnpu, model, arrays, repeat, work):
    import numpy as np

    args = [str(vnpu), "run", str(model), "--repeat", str(repeat), "--output-dir", str(work / "out")]
    for k, a in enumerate(arrays):
        f = work / f"in{k}.npy"
        np.save(f, a)
        args += ["--input", f"{k}={f}"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LD_AUDIT", "VNPU_ISA_CAP"))}
    if os.environ.get("VNPU_ISA_CAPPED"):
        env["VNPU_ISA"] = os.environ["VNPU_ISA_CAPPED"]
    r = subprocess.run(args, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"vnpu run failed:\n{r.stdout}{r.stderr}")
    ms = None
    for line in r.stdout.splitlines():
        if line.startswith("execute"):
            ms = float(line.split("median ")[1].split(" ms")[0])
    files = sorted((work / "out").glob("*.npy"), key=lambda p: int(p.name.split("_")[0]))
    return [np.load(f) for f in files], ms


def compare(want, got, step):
    """(max abs error, budget text, ok). `step`: see output_steps."""
    import numpy as np

    if want.shape != got.shape:
        return float("inf"), f"shape {got.shape} vs {want.shape}", False
    diff = np.abs(want.astype(np.float64) - got.astype(np.float64))
    err = float(diff.max()) if diff.size else 0.0
    if np.issubdtype(want.dtype, np.floating) and step is not None:
        # Dequantised: count in steps of the quantised tensor (a little slack for the
        # float rounding of `step * (q - zero_point)`).
        steps = diff / step
        share2 = float((steps > 1 + 1e-3).mean()) if diff.size else 0.0
        ok = float(steps.max(initial=0.0)) <= 2 + 1e-3 and share2 <= 0.01
        return err, f"+-1 LSB of {step:.4g} ({share2:.2%} at +-2, at most 1%)", ok
    if np.issubdtype(want.dtype, np.floating):
        span = float(want.max() - want.min()) if want.size else 0.0
        # A constant output (one value, say) has no range: its magnitude stands in.
        if span == 0.0 and want.size:
            span = float(np.abs(want).max())
        budget = 1e-4 * max(span, 1e-6)
        return err, f"1e-4 of range {span:.4g} = {budget:.3g}", err <= budget
    share2 = float((diff > 1).mean()) if diff.size else 0.0
    ok = err <= 2 and share2 <= 0.01
    return err, f"+-1 LSB ({share2:.2%} at +-2, at most 1%)", ok


def main():
    ensure_venv()
    import numpy as np

    p = argparse.ArgumentParser()
    p.add_argument("model", type=Path)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("--bench", action="store_true")
    p.add_argument("--write-reference", type=Path)
    p.add_argument("--vnpu", type=Path, default=ROOT / "target" / "release" / "vnpu")
    p.add_argument("--isa", choices=["avx2"], help="cap LiteRT and vnpu at this level")
    a = p.parse_args()
    if a.isa and os.environ.get("VNPU_ISA_CAPPED") != a.isa:
        # LD_AUDIT is read when a process starts: run this script again under it.
        os.execve(sys.executable, [sys.executable, *sys.argv], capped_env(a.isa))
    if not a.vnpu.exists():
        subprocess.run(["cargo", "build", "--release", "-p", "vnpu-driver", "--bin", "vnpu"],
                       cwd=ROOT, check=True)
    from ai_edge_litert.interpreter import Interpreter

    probe = Interpreter(model_path=str(a.model), num_threads=1)
    arrays = inputs_for(probe.get_input_details(), a.seed)
    fast, lt_ms = run_litert(a.model, arrays, a.repeat)
    steps = output_steps(a.model)
    quant = quantised(probe)
    want = run_litert(a.model, arrays, 1, reference_kernels=True)[0] if quant else fast
    with tempfile.TemporaryDirectory() as t:
        got, vn_ms = run_vnpu(a.vnpu, a.model, arrays, a.repeat, Path(t))
    ok = len(want) == len(got)
    print(f"model   {a.model.name}")
    if quant:
        print("against LiteRT's reference kernels (a quantised model)")
    for k, (w, g) in enumerate(zip(want, got)):
        err, budget, good = compare(w, g, steps[k])
        ok &= good
        print(f"output {k}: {list(w.shape)} max abs error {err:.3g}, budget {budget}: {'ok' if good else 'OVER'}")
        if quant:
            xerr, xbudget, xgood = compare(w, fast[k], steps[k])
            print(f"          (LiteRT XNNPACK against the reference kernels: max abs error "
                  f"{xerr:.3g}, {xbudget}: {'within' if xgood else 'over'})")
    level = f", both at {a.isa}" if a.isa else ""
    print(f"time    LiteRT (XNNPACK, 1 thread{level}) {lt_ms:.3f} ms, vnpu {vn_ms:.3f} ms ({vn_ms / lt_ms:.2f}x)")
    if a.write_reference:
        a.write_reference.mkdir(parents=True, exist_ok=True)
        for k, x in enumerate(arrays):
            np.save(a.write_reference / f"input_{k}.npy", x)
        for k, y in enumerate(want):
            np.save(a.write_reference / f"output_{k}.npy", y)
        print(f"wrote   {a.write_reference}")
    if a.bench:
        f = ROOT / "target" / "litert_times.json"
        times = json.loads(f.read_text()) if f.exists() else {}
        times[a.model.stem + (f"@{a.isa}" if a.isa else "")] = lt_ms
        f.parent.mkdir(exist_ok=True)
        f.write_text(json.dumps(times, indent=1, sort_keys=True) + "\n")
        print(f"bench   LiteRT {lt_ms:.3f} ms recorded in {f}")
    print("PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
