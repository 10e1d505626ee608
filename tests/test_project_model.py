"""The project model (porter.project, porter.project.value_flow): what one file's rules learn of the repository."""

import pickle

from porter.project.model import build_from
from porter.project.value_flow import Kind

OPTIONS = b"""import torch

def parse(opt):
    opt.gpu_ids = [int(i) for i in opt.gpu_ids.split(",")]
    torch.cuda.set_device(opt.gpu_ids[0])
    return opt
"""
NETWORKS = b"""def init_net(net, gpu_ids=[]):
    if len(gpu_ids) > 0:
        net.to(gpu_ids[0])
    return net

def define_G(width, gpu_ids=[]):
    return init_net(make(width), gpu_ids)
"""
MODEL = b"""from . import networks

class Model:
    def __init__(self, opt):
        self.gpu_ids = opt.gpu_ids
        self.netG = networks.define_G(4, self.gpu_ids)
"""


def test_a_list_of_cuda_indices_is_followed_across_modules():
    model = build_from({"options.py": OPTIONS, "models/networks.py": NETWORKS, "models/model.py": MODEL})
    assert model.attr_kind("gpu_ids") == Kind.INDEX_LIST
    assert model.name_kind(("models/networks.py", "define_G"), "gpu_ids") == Kind.INDEX_LIST
    assert model.name_kind(("models/networks.py", "init_net"), "gpu_ids") == Kind.INDEX_LIST
    assert pickle.loads(pickle.dumps(model)).flow.names == model.flow.names  # it travels to worker processes


def test_a_caller_that_passes_something_else_blocks_the_parameter():
    other = b"from models.networks import init_net\n\ninit_net(net, gpu_ids=choose())\n"
    model = build_from({"options.py": OPTIONS, "models/networks.py": NETWORKS, "models/model.py": MODEL,
                        "other.py": other})
    assert model.name_kind(("models/networks.py", "init_net"), "gpu_ids") != Kind.INDEX_LIST


def test_an_index_source_and_where_it_goes():
    main = b"import torch\nfrom sampler import run\n\ndef main(rank):\n" \
           b"    device = rank % torch.cuda.device_count()\n    run(device=device)\n"
    sampler = b"import torch\n\ndef run(device=None, n=2):\n    if device is None:\n        device = 'cpu'\n" \
              b"    return torch.zeros(n, device=device) + n\n"
    model = build_from({"main.py": main, "sampler.py": sampler})
    assert model.name_kind(("main.py", "main"), "device") == Kind.INDEX
    (run,) = model.flow.callees["run"]
    assert run.device_only == frozenset({"device"})  # `n` is used in arithmetic too


def test_names_other_modules_read_and_classes_with_their_own_cuda():
    sources = {
        "pkg/__init__.py": b"from torch.cuda.amp import GradScaler\nfrom .nets import Net\nimport os\n",
        "pkg/nets.py": b"import torch\n\nclass Base(torch.nn.Module):\n    def cuda(self, device=None):\n"
                       b"        return super().cuda(device)\n\nclass Net(Base):\n    pass\n",
        "train.py": b"import pkg\nfrom pkg import Net\n\nscaler = pkg.GradScaler()\n",
    }
    model = build_from(sources)
    assert model.read_elsewhere("pkg/__init__.py", "GradScaler")
    assert model.read_elsewhere("pkg/__init__.py", "Net")
    assert not model.read_elsewhere("pkg/__init__.py", "os")
    assert model.overrides_method("Net", "cuda") and not model.overrides_method("Net", "to")


def test_another_accelerators_current_device_is_no_cuda_index():
    neuron = b"import torch\n\ndef shard(x):\n    device = torch.neuron.current_device()\n    return x.to(device)\n"
    model = build_from({"tp.py": neuron})
    assert model.name_kind(("tp.py", "shard"), "device") is None
