"""The GPU path, checked in one short run: training steps/s on the GPU against the CPU, XLA on/off.

    python scripts/bench_gpu.py [--rounds 2] [--json PATH]

Prepared for a machine with an NVIDIA GPU and a CUDA build of TensorFlow (`pip install
"tensorflow[and-cuda]"`); on a machine without one it measures the CPU rows alone and says so.
Each setting trains in a process of its own (`bench_scale.time_setting`: MNIST-sized random data,
60,000 x 784 float32, 32 bits, batch 500, `steps_per_call` 100; blocks of 200 steps timed after
a warm-up call), the settings taking turns for `--rounds` rounds; the figure is the median over
all blocks of a setting. The CPU rows hide the GPU (`CUDA_VISIBLE_DEVICES=""`), so they are the
CPU path of the same machine, side by side. Each row names the device the weights lived on.
About a minute per round on a GPU machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

SCALE = Path(__file__).resolve().parent / "bench_scale.py"
SETTINGS = {
    "gpu_xla": ({"strategy": "one_device", "jit_compile": True}, None),
    "gpu_graph": ({"strategy": "one_device", "jit_compile": False}, None),
    "cpu_xla": ({"strategy": "one_device", "jit_compile": True}, ""),
    "cpu_graph": ({"strategy": "one_device", "jit_compile": False}, ""),
}


def gpus() -> list[str]:
    """The GPUs TensorFlow sees, asked in a subprocess: TensorFlow in this process would reserve
    the GPU's memory for the whole run, leaving none to the timed subprocesses."""
    script = ("from sgh.model.quiet_tensorflow import import_tensorflow; import_tensorflow(); "
              "import tensorflow as tf; "
              "print(','.join(d.name for d in tf.config.list_physical_devices('GPU')))")
    out = subprocess.run([sys.executable, "-c", script], check=True, capture_output=True,
                         text=True, cwd=SCALE.parent.parent).stdout.strip().splitlines()
    return [name for name in (out[-1] if out else "").split(",") if name]


def time_in_subprocess(setting: dict, visible_devices: str | None) -> dict:
    env = dict(os.environ)
    if visible_devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible_devices
    out = subprocess.run([sys.executable, str(SCALE), "--time-setting", json.dumps(setting)],
                         check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    found = gpus()
    names = [name for name in SETTINGS if found or name.startswith("cpu")]
    blocks: dict[str, list[float]] = {name: [] for name in names}
    devices: dict[str, str] = {}
    for _ in range(args.rounds):
        for name in names:  # settings take turns: load drifts over time
            setting, visible = SETTINGS[name]
            result = time_in_subprocess(setting, visible)
            blocks[name] += result["blocks_ms_per_step"]
            devices[name] = result["device"]
    rows = {name: {"ms_per_step": float(np.median(times)),
                   "steps_per_second": 1e3 / float(np.median(times)),
                   "device": devices[name].split("device:")[-1],  # e.g. GPU:0
                   "blocks_ms_per_step": times} for name, times in blocks.items()}
    report = {"gpus": found, "rows": rows, "cpu_count": os.cpu_count(),
              "convention": ("MNIST-sized random data (60000 x 784), 32 bits, batch 500, "
                             f"steps_per_call 100; median over {args.rounds} rounds of 5 blocks "
                             "of 200 steps, each setting in its own process, after warm-up")}
    print(f"GPUs: {', '.join(found) or 'none (CPU rows only)'}; {report['convention']}")
    print(f"{'setting':<11}{'device':<8}{'ms/step':>9}{'steps/s':>9}")
    for name, row in rows.items():
        print(f"{name:<11}{row['device']:<8}{row['ms_per_step']:>9.3f}"
              f"{row['steps_per_second']:>9.0f}")
    if found:
        report["gpu_over_cpu_xla"] = rows["cpu_xla"]["ms_per_step"] / rows["gpu_xla"]["ms_per_step"]
        print(f"GPU (XLA) is {report['gpu_over_cpu_xla']:.1f}x the CPU's (XLA) steps/s")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
