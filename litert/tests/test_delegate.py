"""vnpu's external delegate (libvnpu_delegate.so) in LiteRT's Interpreter, against LiteRT on
the CPU."""

import threading
import time

import numpy as np
import pytest

from conftest import (DELEGATE, MODELS, inputs_for, is_quantised, run_interpreter,
                      within_budget)


def load(options=None):
    from ai_edge_litert.interpreter import load_delegate

    return load_delegate(str(DELEGATE), options or {})


def report_of(tmp_path, model, options=None):
    log = tmp_path / "report.txt"
    d = load({"log": str(log), **(options or {})})
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(model_path=str(model), experimental_delegates=[d], num_threads=1)
    it.allocate_tensors()
    return log.read_text()


@pytest.mark.parametrize("model", MODELS, ids=[m.stem for m in MODELS])
def test_delegate_matches_cpu(model, tmp_path):
    from ai_edge_litert.interpreter import Interpreter

    details = Interpreter(model_path=str(model)).get_input_details()
    x = inputs_for(details)
    quantised = is_quantised(model)
    want, _ = run_interpreter(model, x, reference=quantised)
    got, _ = run_interpreter(model, x, delegates=[load()])
    for k, (w, g) in enumerate(zip(want, got)):
        ok, why = within_budget(w, g)
        assert ok, f"{model.stem} output {k}: {why}"
    # And it did run on vnpu: the report puts every operator there.
    report = report_of(tmp_path, model)
    assert " 0 on CPU)" in report, report


def test_partial_fallback(partial_model, tmp_path):
    x = [np.array([[0.5, 0.5, -5.0, 5.0]], np.float32)]
    want, _ = run_interpreter(partial_model, x)
    got, _ = run_interpreter(partial_model, x, delegates=[load()])
    np.testing.assert_allclose(got[0], want[0], rtol=0, atol=1e-6)
    report = report_of(tmp_path, partial_model)
    assert "operators   5 (4 on vnpu in 2 partitions, 1 on CPU)" in report, report
    line = next(l for l in report.splitlines() if l.startswith("op    2"))
    assert "BUILTIN_99" in line and "CPU" in line and "no NNAPI mapping" in line, line


def test_two_models_one_process():
    a, b = MODELS[0], MODELS[-1]
    from ai_edge_litert.interpreter import Interpreter

    xa = inputs_for(Interpreter(model_path=str(a)).get_input_details())
    xb = inputs_for(Interpreter(model_path=str(b)).get_input_details(), seed=1)
    d = load()
    ga1, ia = run_interpreter(a, xa, delegates=[d])
    gb, ib = run_interpreter(b, xb, delegates=[load()])
    # Both interpreters stay usable, interleaved.
    ia.invoke()
    ga2 = [ia.get_tensor(o["index"]) for o in ia.get_output_details()]
    for w, g in zip(ga1, ga2):
        np.testing.assert_array_equal(w, g)
    want_b, _ = run_interpreter(b, xb, reference=is_quantised(b))
    for w, g in zip(want_b, gb):
        ok, why = within_budget(w, g)
        assert ok, why


def test_remote_service(service, monkeypatch, tmp_path):
    sock, _ = service
    model = next(m for m in MODELS if m.stem == "iris_landmark")
    from ai_edge_litert.interpreter import Interpreter

    x = inputs_for(Interpreter(model_path=str(model)).get_input_details())
    want, _ = run_interpreter(model, x)
    monkeypatch.setenv("VNPU_SOCKET", str(sock))
    got, _ = run_interpreter(model, x, delegates=[load()])
    for w, g in zip(want, got):
        ok, why = within_budget(w, g)
        assert ok, why
    # The option names the socket too.
    monkeypatch.delenv("VNPU_SOCKET")
    got2, _ = run_interpreter(model, x, delegates=[load({"socket": str(sock)})])
    for a, b in zip(got, got2):
        np.testing.assert_array_equal(a, b)


def test_service_killed_mid_invoke(service):
    sock, proc = service
    model = next(m for m in MODELS if m.stem == "face_landmark")
    x, = inputs_for(__import__("ai_edge_litert.interpreter", fromlist=["Interpreter"])
                    .Interpreter(model_path=str(model)).get_input_details())
    _, it = run_interpreter(model, [x], delegates=[load({"socket": str(sock)})])
    outcome = {}

    def invoke_until_error():
        try:
            for _ in range(10_000):
                it.invoke()
            outcome["error"] = None
        except Exception as e:  # LiteRT raises RuntimeError for a failed kernel
            outcome["error"] = e

    t = threading.Thread(target=invoke_until_error, daemon=True)
    t.start()
    time.sleep(0.3)
    proc.kill()
    proc.wait(10)
    t.join(60)
    assert not t.is_alive(), "invoke hung after the service died"
    assert outcome.get("error") is not None, "invoke kept succeeding without the service"
    assert "vnpu" in str(outcome["error"]) or "failed" in str(outcome["error"]).lower(), outcome


def test_bad_options_raise():
    with pytest.raises(ValueError, match="unknown option"):
        load({"colour": "blue"})


def test_delegate_cache_dir(tmp_path):
    model = next(m for m in MODELS if m.stem == "iris_landmark")
    from ai_edge_litert.interpreter import Interpreter

    x = inputs_for(Interpreter(model_path=str(model)).get_input_details())
    cache = tmp_path / "cache"
    first, _ = run_interpreter(model, x, delegates=[load({"cache_dir": str(cache)})])
    files = sorted(p.suffix for p in cache.iterdir())
    assert files == [".data", ".model"], files
    assert all(p.stat().st_size > 0 for p in cache.iterdir())
    second, _ = run_interpreter(model, x, delegates=[load({"cache_dir": str(cache)})])
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)


def test_delegate_trace(tmp_path):
    """The `trace` option: a Perfetto (trace-event JSON) file, one complete event per
    partition invoke, with the device's modelled time and the driver's."""
    import gc
    import json

    model = next(m for m in MODELS if m.stem == "iris_landmark")
    from ai_edge_litert.interpreter import Interpreter

    x = inputs_for(Interpreter(model_path=str(model)).get_input_details())
    trace = tmp_path / "trace.json"
    d = load({"trace": str(trace)})
    _, it = run_interpreter(model, x, delegates=[d])
    it.invoke()
    del it, d
    gc.collect()
    events = json.loads(trace.read_text())["traceEvents"]
    assert len(events) == 2, events
    for e in events:
        assert e["ph"] == "X" and e["name"] == "vnpu partition 0" and e["dur"] > 0, e
        assert e["args"]["device_us"] > 0 and e["args"]["driver_us"] >= e["args"]["device_us"], e
    assert events[1]["ts"] >= events[0]["ts"] + events[0]["dur"]
