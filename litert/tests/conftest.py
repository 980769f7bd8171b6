"""Shared pieces of the LiteRT tests: where the built libraries and the `vnpu` binary are,
the shipped models with their comparison budgets (those of scripts/litert_compare.py), a
tiny model writer for graphs with an operator vnpu lacks, and a `vnpu serve` child."""

import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
TARGET = Path(os.environ.get("VNPU_TARGET_DIR", ROOT / "target" / "release"))
DELEGATE = TARGET / "libvnpu_delegate.so"
VNPU = TARGET / "vnpu"
MODELS = sorted((ROOT / "models").glob("*.tflite"))


def inputs_for(details, seed=0):
    """scripts/litert_compare.py's seeded inputs: floats uniform in [-1, 1), int8 and uint8
    over their range, other integers in [0, 8)."""
    rng = np.random.default_rng(seed)
    out = []
    for d in details:
        shape, dtype = tuple(d["shape"]), d["dtype"]
        if np.issubdtype(dtype, np.floating):
            out.append(rng.uniform(-1.0, 1.0, size=shape).astype(dtype))
        elif dtype == np.int8:
            out.append(rng.integers(-128, 128, size=shape, dtype=np.int8))
        elif dtype == np.uint8:
            out.append(rng.integers(0, 256, size=shape, dtype=np.uint8))
        else:
            out.append(rng.integers(0, 8, size=shape).astype(dtype))
    return out


def within_budget(want, got, step=None):
    """scripts/litert_compare.py's budget: float within 1e-4 of the reference's range (of
    its magnitude when constant); quantised within one step, at most 1% two steps off."""
    assert want.shape == got.shape and want.dtype == got.dtype, (want.shape, got.shape)
    w, g = want.astype(np.float64), got.astype(np.float64)
    err = np.abs(w - g)
    if np.issubdtype(want.dtype, np.floating) and step is None:
        span = float(np.ptp(w)) if w.size else 0.0
        if span == 0.0:
            span = float(np.max(np.abs(w))) if w.size else 0.0
        budget = 1e-4 * max(span, 1e-6)
        return float(err.max(initial=0.0)) <= budget, f"max abs error {err.max():.3e}, budget {budget:.3e}"
    steps = err / step if step else err
    two = int(np.count_nonzero(steps > 1.0 + 1e-3))
    ok = float(steps.max(initial=0.0)) <= 2.0 + 1e-3 and two * 100 <= w.size
    return ok, f"max {steps.max():.2f} steps, {two} of {w.size} two steps off"


def is_quantised(path):
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(model_path=str(path))
    return any(d["dtype"] in (np.int8, np.uint8) for d in it.get_input_details())


def has_sparse_tensors(path):
    """Whether the model densifies sparse weights (a DENSIFY operator reads them)."""
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(model_path=str(path))
    return any(op["op_name"] == "DENSIFY" for op in it._get_ops_details())


def run_interpreter(path, inputs, delegates=(), reference=False):
    """Runs a model in LiteRT's Interpreter (XNNPACK, or the reference kernels)."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    kwargs = {"experimental_op_resolver_type": OpResolverType.BUILTIN_REF} if reference else {}
    it = Interpreter(model_path=str(path), experimental_delegates=list(delegates), num_threads=1, **kwargs)
    it.allocate_tensors()
    for d, x in zip(it.get_input_details(), inputs):
        it.set_tensor(d["index"], x)
    it.invoke()
    return [it.get_tensor(d["index"]) for d in it.get_output_details()], it


def write_model(tensors, ops, inputs, outputs, path):
    """A .tflite file: `tensors` as (shape, float32 data or None), `ops` as (builtin code,
    inputs, outputs), with LiteRT's own schema classes."""
    from ai_edge_litert import schema_py_generated as s
    import flatbuffers

    m = s.ModelT()
    m.version = 3
    codes = sorted({op[0] for op in ops})
    m.operatorCodes = []
    for c in codes:
        oc = s.OperatorCodeT()
        oc.builtinCode = c
        oc.deprecatedBuiltinCode = min(c, 127)
        oc.version = 1
        m.operatorCodes.append(oc)
    m.buffers = [s.BufferT()]
    sg = s.SubGraphT()
    sg.tensors = []
    for k, (shape, data) in enumerate(tensors):
        t = s.TensorT()
        t.shape = list(shape)
        t.type = s.TensorType.FLOAT32
        t.name = f"t{k}".encode()
        t.buffer = 0
        if data is not None:
            b = s.BufferT()
            b.data = np.asarray(data, np.float32).tobytes()
            m.buffers.append(b)
            t.buffer = len(m.buffers) - 1
        sg.tensors.append(t)
    sg.operators = []
    for code, ins, outs in ops:
        o = s.OperatorT()
        o.opcodeIndex = codes.index(code)
        o.inputs, o.outputs = list(ins), list(outs)
        sg.operators.append(o)
    sg.inputs, sg.outputs = list(inputs), list(outputs)
    m.subgraphs = [sg]
    b = flatbuffers.Builder(1024)
    b.Finish(m.Pack(b), file_identifier=b"TFL3")
    Path(path).write_bytes(bytes(b.Output()))
    return path


ADD, RELU, SQUARED_DIFFERENCE = 0, 19, 99


@pytest.fixture
def partial_model(tmp_path):
    """relu(x + c) -> y; SQUARED_DIFFERENCE(y, c) -> w (vnpu has no mapping); relu(w - ...)
    as ADD(w, d) -> z, then relu -> out."""
    c = [1.0, -2.0, 3.0, -4.0]
    tensors = [([1, 4], None), ([1, 4], c), ([1, 4], None), ([1, 4], None), ([1, 4], None),
               ([1, 4], [-1.0, -1.0, -1.0, -1.0]), ([1, 4], None), ([1, 4], None)]
    ops = [(ADD, [0, 1], [2]), (RELU, [2], [3]), (SQUARED_DIFFERENCE, [3, 1], [4]),
           (ADD, [4, 5], [6]), (RELU, [6], [7])]
    return write_model(tensors, ops, [0], [7], tmp_path / "partial.tflite")


@pytest.fixture
def service(tmp_path):
    """A `vnpu serve` child on a socket in tmp_path; yields (socket path, process)."""
    sock = tmp_path / "vnpu.sock"
    p = subprocess.Popen([str(VNPU), "serve", "--socket", str(sock)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    assert "serving" in line, (line, p.stderr.read() if p.poll() is not None else "")
    yield sock, p
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
