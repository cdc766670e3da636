"""Writes PyTorch DDP's bucket assignment for torchvision's vit_l_32 (the reference for
tests/cpu/test_buckets.cpp). Run where torch and torchvision are installed:

    python3 tests/reference/ddp_buckets.py > tests/data/ddp_buckets_vit_l_32.txt

DDP (torch/nn/parallel/distributed.py) rebuilds its buckets after the first iteration in the
order gradients became ready, with limits [_DEFAULT_FIRST_BUCKET_BYTES, bucket_cap_mb MiB]; for
a ViT that order is the reverse of registration order, which is what we pass here.
"""
import torch
import torch.distributed as dist
from torchvision.models import vit_l_32

params = list(vit_l_32(weights=None).parameters())
ready = list(reversed(params))
print(f"# torch {torch.__version__}: cap_mb bucket tensors bytes (first bucket {dist._DEFAULT_FIRST_BUCKET_BYTES} B)")
for cap_mb in (1, 5, 25, 100, 500, 2000):
    limits = [dist._DEFAULT_FIRST_BUCKET_BYTES, int(cap_mb * 1024 * 1024)]
    out = dist._compute_bucket_assignment_by_size(ready, limits, [False] * len(ready), list(range(len(ready))))
    buckets = out[0] if isinstance(out, tuple) else out
    for i, b in enumerate(buckets):
        nbytes = sum(ready[j].numel() * ready[j].element_size() for j in b)
        print(cap_mb, i, len(b), nbytes)
