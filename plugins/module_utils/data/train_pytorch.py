"""kubegpu training check: a few optimiser steps of a small MLP on fixed random data.

Runs on one GPU, or under torchrun on several GPUs and nodes (DistributedDataParallel over NCCL).
Prints one line per rank that starts with KUBEGPU-TRAIN PASS or KUBEGPU-TRAIN FAIL, and exits
non-zero on failure. The loss on a fixed batch must fall: that proves the forward pass, the
backward pass and (with several ranks) the gradient all-reduce ran on the GPUs.
"""

import os
import sys
import time

import torch
import torch.distributed as dist
from torch import nn

steps = int(os.environ.get("KUBEGPU_STEPS", "50"))
world = int(os.environ.get("WORLD_SIZE", "1"))
rank = int(os.environ.get("RANK", "0"))
local_rank = int(os.environ.get("LOCAL_RANK", "0"))


def report(ok, text):
    verdict = "PASS" if ok else "FAIL"
    print("KUBEGPU-TRAIN %s rank=%d/%d %s" % (verdict, rank, world, text), flush=True)
    return 0 if ok else 1


if not torch.cuda.is_available():
    sys.exit(report(False, "no CUDA device visible (torch %s, CUDA_VISIBLE_DEVICES=%r)" % (
        torch.__version__, os.environ.get("CUDA_VISIBLE_DEVICES"))))
torch.cuda.set_device(local_rank)
device = torch.device("cuda", local_rank)
if world > 1:
    dist.init_process_group("nccl")
torch.manual_seed(1234)
model = nn.Sequential(nn.Linear(1024, 2048), nn.ReLU(), nn.Linear(2048, 10)).to(device)
if world > 1:
    model = nn.parallel.DistributedDataParallel(model, device_ids=[local_rank])
optimiser = torch.optim.SGD(model.parameters(), lr=0.05)
generator = torch.Generator(device=device).manual_seed(4321 + rank)
inputs = torch.randn(512, 1024, device=device, generator=generator)
targets = torch.randint(0, 10, (512,), device=device, generator=generator)
loss_fn = nn.CrossEntropyLoss()
started = time.monotonic()
first = last = None
for _ in range(steps):
    optimiser.zero_grad(set_to_none=True)
    loss = loss_fn(model(inputs), targets)
    loss.backward()
    optimiser.step()
    value = loss.item()
    first = value if first is None else first
    last = value
torch.cuda.synchronize()
elapsed = time.monotonic() - started
name = torch.cuda.get_device_name(device)
if world > 1:
    dist.destroy_process_group()
sys.exit(report(last < first, "gpu=%r steps=%d loss %.4f -> %.4f in %.2fs torch=%s" % (
    name, steps, first, last, elapsed, torch.__version__)))
