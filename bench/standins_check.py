"""On a CUDA machine: the runtime's stand-ins on CUDA and with PORTER_DEVICE=cpu give the
same structure (compile's wrapper and state-dict keys, autocast's dtype, the scaler's
state_dict keys, sdpa_kernel's switches). Prints one JSON line per device and exits 1
when they differ. Usage: python bench/standins_check.py (from the repository root)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

CHILD = r'''
import json, sys, warnings
warnings.simplefilter("ignore")
sys.path.insert(0, "src")
import torch
import porter_runtime as pr
dev = pr.device()
model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()).to(dev)
compiled = pr.compile(model)
x = torch.randn(4, 8, device=dev)
with pr.autocast():
    y = compiled(x)
scaler = pr.GradScaler()
with pr.sdpa_kernel(enable_flash=False, enable_math=True, enable_mem_efficient=False):
    switches = [torch.backends.cuda.flash_sdp_enabled(), torch.backends.cuda.math_sdp_enabled()]
print(json.dumps({
    "device": str(dev), "compile": type(compiled).__name__, "keys": list(compiled.state_dict()),
    "orig_mod": compiled._orig_mod is model, "dtype": str(y.dtype),
    "numpy": str(y.detach().cpu().numpy().dtype), "scaler": sorted(scaler.state_dict()),
    "sdp": switches, "index_device": str(pr.device(pr.current_device())).split(":")[0],
}))
'''


def run(env_device: str | None) -> dict:
    env = dict(os.environ, PORTER_QUIET="1")
    if env_device:
        env["PORTER_DEVICE"] = env_device
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True)
    if out.returncode:
        sys.exit(out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    cuda, cpu = run(None), run("cpu")
    print(json.dumps(cuda))
    print(json.dumps(cpu))
    same = [k for k in cuda if k not in ("device", "index_device") and cuda[k] == cpu[k]]
    differ = [k for k in cuda if k not in ("device", "index_device") and cuda[k] != cpu[k]]
    print("same:", same, "differ:", differ)
    return 1 if differ or cuda["device"] != "cuda" or cpu["index_device"] != "cpu" else 0


if __name__ == "__main__":
    sys.exit(main())
