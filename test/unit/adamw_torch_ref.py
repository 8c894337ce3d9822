"""Reference AdamW steps with torch.optim.AdamW (foreach=False) for
adamw_test.cpp. Usage: adamw_torch_ref.py IN OUT. IN holds float32:
[n, steps, lr, b1, b2, eps, wd] then p0[n] then grads[steps][n]; OUT gets
the final params, exp_avg and exp_avg_sq as float32."""
import sys

import numpy as np
import torch

raw = np.fromfile(sys.argv[1], dtype=np.float32)
n, steps = int(raw[0]), int(raw[1])
lr, b1, b2, eps, wd = (float(x) for x in raw[2:7])  # float32 values, as the runtime sees them
p = torch.nn.Parameter(torch.from_numpy(raw[7:7 + n].copy()))
grads = raw[7 + n:].reshape(steps, n)
opt = torch.optim.AdamW([p], lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd, foreach=False)
for s in range(steps):
    p.grad = torch.from_numpy(grads[s].copy())
    opt.step()
st = opt.state[p]
np.concatenate([p.detach().numpy(), st["exp_avg"].numpy(), st["exp_avg_sq"].numpy()]).astype(np.float32).tofile(sys.argv[2])
