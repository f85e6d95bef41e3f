"""Oracle: torch.optim.SGD and torch.optim.AdamW (single-tensor code, foreach=False)
over several steps on one f64 parameter, for each of several configurations.

Inputs: p (the parameter), g0, g1, ... (the gradient of each step) and cfg, one row
per configuration: [kind (0 SGD, 1 AdamW), steps, lr, a, b, c, d, e] with, for SGD, a
momentum, b dampening, c weight_decay, d nesterov, e maximize; for AdamW a beta1, b
beta2, c eps, d weight_decay, e amsgrad. Writes, for configuration i, c<i>_p<k> after
step k and the optimizer's state: c<i>_buf<k> (SGD with momentum), c<i>_m<k>, c<i>_v<k>
and c<i>_vmax<k> (AdamW, vmax with amsgrad). One run for every configuration: starting
python with torch is what takes the time."""
import sys

import torch

import oracle_io

inp = oracle_io.read(sys.argv[1])
out = {}
for i, row in enumerate(inp["cfg"].tolist()):
    kind, steps, lr, a, b, c, d, e = row
    p = torch.nn.Parameter(inp["p"].clone())
    if kind == 0:
        opt = torch.optim.SGD([p], lr=lr, momentum=a, dampening=b, weight_decay=c, nesterov=bool(d),
                              maximize=bool(e), foreach=False)
    else:
        opt = torch.optim.AdamW([p], lr=lr, betas=(a, b), eps=c, weight_decay=d, amsgrad=bool(e), foreach=False)
    for k in range(int(steps)):
        p.grad = inp["g%d" % k].clone()
        opt.step()
        out["c%d_p%d" % (i, k)] = p.detach().clone()
        state = opt.state[p]
        names = {"momentum_buffer": "buf", "exp_avg": "m", "exp_avg_sq": "v", "max_exp_avg_sq": "vmax"}
        for key, short in names.items():
            if state.get(key) is not None:
                out["c%d_%s%d" % (i, short, k)] = state[key].clone()
oracle_io.write(sys.argv[2], out)
