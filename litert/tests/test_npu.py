"""vnpu as LiteRT's NPU: the compiler plugin (libLiteRtCompilerPlugin_Vnpu.so) and the
dispatch library (libLiteRtDispatch_Vnpu.so) through CompiledModel, JIT and AOT, against
LiteRT on the CPU."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import (MODELS, TARGET, has_sparse_tensors, inputs_for, is_quantised,
                      run_interpreter, within_budget)

PLUGIN = TARGET / "libLiteRtCompilerPlugin_Vnpu.so"
DISPATCH = TARGET / "libLiteRtDispatch_Vnpu.so"
MAGIC = b"VNPULRT\0"


@pytest.fixture(scope="session")
def libs(tmp_path_factory):
    """A directory holding just the two vendor libraries (LiteRT searches it by name)."""
    d = tmp_path_factory.mktemp("vnpu_libs")
    for f in (PLUGIN, DISPATCH):
        (d / f.name).symlink_to(f)
    return d


@pytest.fixture(scope="session")
def dispatch_only(tmp_path_factory):
    """A directory with only the dispatch library, and an empty one for plugins (never
    empty paths: LiteRT would pick a bundled vendor instead)."""
    d = tmp_path_factory.mktemp("vnpu_dispatch")
    (d / DISPATCH.name).symlink_to(DISPATCH)
    return d, tmp_path_factory.mktemp("no_plugins")


def environment(plugins, dispatch):
    from ai_edge_litert.environment import Environment

    return Environment.create(compiler_plugin_path=str(plugins), dispatch_library_path=str(dispatch))


def run_compiled(path, env, x):
    """Runs a model in CompiledModel with NPU|CPU; outputs by name."""
    from ai_edge_litert.compiled_model import CompiledModel
    from ai_edge_litert.hardware_accelerator import HardwareAccelerator as HA

    m = CompiledModel.from_file(str(path), hardware_accel=HA.NPU | HA.CPU, environment=env)
    sig = m.get_signature_by_index(0)
    ins = m.create_input_buffers(0)
    for b, name in zip(ins, sig["inputs"]):
        b.write(x[name])
    outs = m.create_output_buffers(0)
    m.run_by_index(0, ins, outs)
    got = {}
    for b, name in zip(outs, sig["outputs"]):
        d = b.get_tensor_details()
        got[name] = b.read(int(np.prod(d["shape"])), np.dtype(d["dtype"])).reshape(d["shape"])
    return got, m


def reference(model):
    """Seeded inputs by name and LiteRT's CPU outputs by name (the reference kernels for a
    quantised model, as scripts/litert_compare.py compares them)."""
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(model_path=str(model))
    details = it.get_input_details()
    x = inputs_for(details)
    want, it = run_interpreter(model, x, reference=is_quantised(model))
    names = [d["name"] for d in it.get_output_details()]
    return {d["name"]: v for d, v in zip(details, x)}, dict(zip(names, want))


def check(model, want, got):
    assert set(want) == set(got), (sorted(want), sorted(got))
    for name, w in want.items():
        ok, why = within_budget(w, got[name])
        assert ok, f"{model.stem} output {name}: {why}"


def run_apply_plugin(model, libs, out):
    """The wheel's apply_plugin tool, asked for an AOT model for vnpu1."""
    import ai_edge_litert

    tool = Path(ai_edge_litert.__file__).parent / "tools" / "apply_plugin_main"
    return subprocess.run([str(tool), "--cmd=apply", f"--model={model}", f"--libs={libs}",
                           "--soc_manufacturer=Vnpu", "--soc_model=vnpu1", f"--o={out}"],
                          capture_output=True, text=True, timeout=600)


def apply_plugin(model, libs, out):
    """An AOT model for vnpu1."""
    r = run_apply_plugin(model, libs, out)
    assert r.returncode == 0 and out.exists(), r.stderr[-3000:]
    return out


@pytest.mark.parametrize("model", MODELS, ids=[m.stem for m in MODELS])
def test_npu_jit_matches_cpu(model, libs, tmp_path, monkeypatch):
    report = tmp_path / "report.txt"
    monkeypatch.setenv("VNPU_REPORT", str(report))
    x, want = reference(model)
    got, m = run_compiled(model, environment(libs, libs), x)
    check(model, want, got)
    text = report.read_text()
    if has_sparse_tensors(model):
        # LiteRT's plugin route cannot carry sparse tensors (the compiler context gives no
        # sparsity, and the model it rewrites drops it): the plugin leaves the whole model
        # to the CPU and says why, instead of breaking it.
        assert "(0 on vnpu in 0 partitions" in text and "sparse tensors" in text, text
        return
    # The plugin put every operator on vnpu, and LiteRT took them all.
    assert " 0 on CPU)" in text, text
    assert m.is_fully_accelerated()


@pytest.mark.parametrize("model", MODELS, ids=[m.stem for m in MODELS])
def test_npu_aot_matches_cpu(model, libs, dispatch_only, tmp_path):
    if has_sparse_tensors(model):
        # The plugin takes no operator of a model with sparse tensors (see the JIT test):
        # there is nothing to compile ahead of time: the tool fails, and whatever it leaves
        # holds no vnpu byte code.
        out = tmp_path / f"{model.stem}_vnpu1.tflite"
        r = run_apply_plugin(model, libs, out)
        assert r.returncode != 0, r.stderr[-3000:]
        assert not out.exists() or MAGIC not in out.read_bytes()
        return
    aot = apply_plugin(model, libs, tmp_path / f"{model.stem}_vnpu1.tflite")
    assert MAGIC in aot.read_bytes() and b"DISPATCH_OP" in aot.read_bytes()
    x, want = reference(model)
    dispatch, no_plugins = dispatch_only
    got, _ = run_compiled(aot, environment(no_plugins, dispatch), x)
    check(model, want, got)


# Loads and runs a model in a child, so a crash is seen as one rather than ending pytest.
CHILD = r"""
import sys, numpy as np
sys.path.insert(0, sys.argv[1])
from test_npu import environment, run_compiled
from conftest import inputs_for
from ai_edge_litert.interpreter import Interpreter
model, dispatch, plugins = sys.argv[2:5]
details = Interpreter(model_path=model).get_input_details()
x = {d["name"]: v for d, v in zip(details, inputs_for(details))}
try:
    run_compiled(model, environment(plugins, dispatch), x)
except Exception as e:
    print("raised:", e)
    sys.exit(3)
print("ran")
"""


@pytest.mark.parametrize("corruption", ["version", "length"])
def test_bad_bytecode(corruption, libs, dispatch_only, tmp_path):
    model = next(m for m in MODELS if m.stem == "iris_landmark")
    aot = apply_plugin(model, libs, tmp_path / "aot.tflite")
    data = bytearray(aot.read_bytes())
    at = data.find(MAGIC)
    assert at >= 0
    if corruption == "version":
        data[at + 8] = 9  # a byte code version this vnpu does not read
        want = "vnpu byte code version 9"
    else:
        data[at + 12:at + 20] = (1 << 40).to_bytes(8, "little")  # an input map too long
        want = "malformed vnpu byte code"
    bad = tmp_path / "bad.tflite"
    bad.write_bytes(bytes(data))
    dispatch, no_plugins = dispatch_only
    r = subprocess.run([sys.executable, "-c", CHILD, str(Path(__file__).parent), str(bad),
                        str(dispatch), str(no_plugins)], capture_output=True, text=True, timeout=300)
    assert r.returncode >= 0, f"the child crashed (signal {-r.returncode}): {r.stderr[-2000:]}"
    assert r.returncode == 3 and "ran" not in r.stdout, (r.stdout, r.stderr[-2000:])
    assert want in r.stderr, r.stderr[-2000:]


def test_npu_partial_fallback(partial_model, libs, tmp_path, monkeypatch):
    """An operator vnpu lacks stays on LiteRT's CPU between two vnpu partitions."""
    report = tmp_path / "report.txt"
    monkeypatch.setenv("VNPU_REPORT", str(report))
    x = np.array([[0.5, 0.5, -5.0, 5.0]], np.float32)
    want, _ = run_interpreter(partial_model, [x])
    got, _ = run_compiled(partial_model, environment(libs, libs), {"t0": x})
    np.testing.assert_allclose(got["t7"], want[0], rtol=0, atol=1e-6)
    text = report.read_text()
    assert "operators   5 (4 on vnpu in 2 partitions, 1 on CPU)" in text, text
    line = next(l for l in text.splitlines() if l.startswith("op    2"))
    assert "BUILTIN_99" in line and "CPU" in line and "no NNAPI mapping" in line, line


def test_npu_remote_service(service, libs, monkeypatch, capfd):
    """VNPU_SOCKET: the plugin asks the service what it supports and the dispatch library
    prepares and runs there."""
    sock, proc = service
    model = next(m for m in MODELS if m.stem == "iris_landmark")
    monkeypatch.setenv("VNPU_SOCKET", str(sock))
    x, want = reference(model)
    got, _ = run_compiled(model, environment(libs, libs), x)
    check(model, want, got)
    assert "cannot reach" not in capfd.readouterr().err
    # The libraries go there: without the service the plugin says so (and LiteRT, as it
    # does when a plugin fails, runs the model on its CPU).
    proc.kill()
    proc.wait(10)
    got, _ = run_compiled(model, environment(libs, libs), x)
    check(model, want, got)
    assert f"cannot reach the vnpu service at {sock}" in capfd.readouterr().err


def test_npu_cache_dir(libs, dispatch_only, tmp_path, monkeypatch):
    """VNPU_CACHE_DIR: each partition is prepared once and saved, then loaded."""
    model = next(m for m in MODELS if m.stem == "iris_landmark")
    aot = apply_plugin(model, libs, tmp_path / "aot.tflite")
    cache = tmp_path / "cache"
    cache.mkdir()
    monkeypatch.setenv("VNPU_CACHE_DIR", str(cache))
    x, want = reference(model)
    dispatch, no_plugins = dispatch_only
    first, _ = run_compiled(aot, environment(no_plugins, dispatch), x)
    files = sorted(p.suffix for p in cache.iterdir())
    assert files == [".data", ".model"], files
    second, _ = run_compiled(aot, environment(no_plugins, dispatch), x)
    check(model, want, second)
    for name in first:
        np.testing.assert_array_equal(first[name], second[name])
