"""CUT / CycleGAN's save_networks off CUDA (issue 27): the nets stay DataParallel-wrapped
(gpu_ids=[0]) while the ported GPU test is False, so the wrapper's state ('module.' keys) is
saved, and load_networks loads it into net.module. The port (PT905) makes that load work;
run here with real torch on this CPU."""

from textwrap import dedent

import torch

from porter.engine.process import Options, migrate_source
from porter.engine.registry import all_rules

SOURCE = dedent("""\
    import torch


    class BaseModel:
        def __init__(self, gpu_ids):
            self.gpu_ids = gpu_ids
            self.netG = torch.nn.Linear(3, 2)

        def parallelize(self):
            self.netG = torch.nn.DataParallel(self.netG, self.gpu_ids)

        def save_networks(self, path):
            net = self.netG
            if len(self.gpu_ids) > 0 and torch.cuda.is_available():
                torch.save(net.module.cpu().state_dict(), path)
                net.cuda(self.gpu_ids[0])
            else:
                torch.save(net.cpu().state_dict(), path)

        def load_networks(self, path):
            net = self.netG
            if isinstance(net, torch.nn.DataParallel):
                net = net.module
            net.load_state_dict(torch.load(path))
    """)


def _run(source: str, tmp_path) -> torch.nn.Module:
    scope: dict = {}
    exec(compile(source, "base_model.py", "exec"), scope)
    model = scope["BaseModel"]([0])
    model.parallelize()
    model.save_networks(tmp_path / "latest_net_G.pth")
    restored = scope["BaseModel"]([0])
    restored.parallelize()
    restored.load_networks(tmp_path / "latest_net_G.pth")
    return model.netG.module, restored.netG.module


def test_the_original_fails_to_reload_its_own_checkpoint_on_this_cpu(tmp_path):
    try:
        _run(SOURCE, tmp_path)
    except RuntimeError as error:
        assert "Unexpected key(s) in state_dict" in str(error)
    else:
        raise AssertionError("the unported load was expected to fail on the module. keys")


def test_the_port_reloads_it(tmp_path):
    ported = migrate_source(SOURCE.encode(), Options(rules=all_rules())).new.decode()
    assert "porter_runtime.load_state_dict(net, torch.load(path" in ported
    saved, loaded = _run(ported, tmp_path)
    assert torch.equal(saved.weight, loaded.weight) and torch.equal(saved.bias, loaded.bias)
