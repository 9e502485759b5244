"""Writes the server benchmarks' model into a model repository: `bench`, an MLP 512 -> 4096 ->
16 (FP32, seeded), as PyTorch's nn.Sequential exported by examples/server/export_model.py.

    python3 bench/server/bench_model.py REPOSITORY [WINDOW_US]

max_batch_size 64; dynamic_batching with max_queue_delay_microseconds WINDOW_US (default 2000).
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "server"))
import torch  # noqa: E402
from torch import nn  # noqa: E402
from export_model import export  # noqa: E402

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(512, 4096), nn.ReLU(), nn.Linear(4096, 16)).eval()
window = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
export(model, sys.argv[1], "bench", [512], torch.float32, max_batch_size=64,
       dynamic_batching={"max_queue_delay_microseconds": window})
