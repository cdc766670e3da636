"""Prints what torch.optim.AdamW (single-tensor implementation) makes of a few scalars in 3 steps,
in float64 and float32: the reference values in tests/cpu/test_optim.cpp. Needs torch:

    python3 tests/reference/adamw_scalars.py
"""
import torch

P0 = [1.0, -2.0, 0.5, 0.0, 3e-3]
GRADS = [[0.5, -1.0, 1e-3, 2.0, -4e-9], [0.25, 0.5, -1e-3, -1.0, 1e-9], [-0.1, 0.3, 2e-3, 0.5, 3e-9]]
CASES = [(1e-3, 0.9, 0.999, 1e-8, 1e-2), (0.05, 0.8, 0.99, 1e-6, 0.1), (0.01, 0.9, 0.95, 1e-8, 0.0)]

print(f"# torch {torch.__version__}: lr betas eps weight_decay -> parameters after 3 steps")
for dtype in (torch.float64, torch.float32):
    for lr, b1, b2, eps, wd in CASES:
        p = torch.tensor(P0, dtype=dtype, requires_grad=True)
        opt = torch.optim.AdamW([p], lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd, foreach=False)
        for g in GRADS:
            p.grad = torch.tensor(g, dtype=dtype)
            opt.step()
        fmt = repr if dtype == torch.float64 else (lambda x: f"{x:.9g}f")
        print(dtype, lr, (b1, b2), eps, wd, ", ".join(fmt(float(x)) for x in p.detach()))
