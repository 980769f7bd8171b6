#!/usr/bin/env python3
"""Times every model in models/ through CompiledModel NPU|CPU on vnpu (the release vendor
pair) against LiteRT's CPU (Interpreter, XNNPACK, 1 thread): median wall time per run after
warm-up, and the ratio. Run with litert/tests/run.sh's venv after it built the libraries:
  litert/.venv/bin/python litert/compare_speed.py [RUNS]"""

import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "tests"))
from conftest import MODELS, inputs_for  # noqa: E402
from test_npu import DISPATCH, PLUGIN, environment  # noqa: E402


def median_ms(f, runs):
    f()
    f()
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        f()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def main():
    from ai_edge_litert.compiled_model import CompiledModel
    from ai_edge_litert.hardware_accelerator import HardwareAccelerator as HA
    from ai_edge_litert.interpreter import Interpreter

    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    libs = Path(tempfile.mkdtemp())
    for f in (PLUGIN, DISPATCH):
        (libs / f.name).symlink_to(f)
    env = environment(libs, libs)
    print(f"{'model':36} {'vnpu ms':>9} {'LiteRT ms':>9} {'ratio':>6}")
    for model in MODELS:
        it = Interpreter(model_path=str(model), num_threads=1)
        it.allocate_tensors()
        x = inputs_for(it.get_input_details())
        for d, v in zip(it.get_input_details(), x):
            it.set_tensor(d["index"], v)
        cpu = median_ms(it.invoke, runs)
        m = CompiledModel.from_file(str(model), hardware_accel=HA.NPU | HA.CPU, environment=env)
        ins, outs = m.create_input_buffers(0), m.create_output_buffers(0)
        for b, v in zip(ins, x):
            b.write(v)
        npu = median_ms(lambda: m.run_by_index(0, ins, outs), runs)
        print(f"{model.stem:36} {npu:9.3f} {cpu:9.3f} {npu / cpu:6.2f}")


if __name__ == "__main__":
    main()
