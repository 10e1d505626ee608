"""PT602 on a legacy CUDA tensor type kept as a value (SPADE's Pix2PixModel, blind round 8:
``self.FloatTensor = torch.cuda.FloatTensor if self.use_gpu() else torch.FloatTensor``, then
``self.FloatTensor(bs, nc, h, w)``): the port runs on the CPU, where the original raises."""

from textwrap import dedent

import pytest
import torch

from porter.engine.process import Options, migrate_source
from porter.engine.registry import all_rules

PIX2PIX = dedent("""\
    import torch


    class Pix2PixModel(torch.nn.Module):
        def __init__(self, gpu_ids):
            super().__init__()
            self.gpu_ids = gpu_ids
            self.FloatTensor = torch.cuda.FloatTensor if self.use_gpu() \\
                else torch.FloatTensor
            self.ByteTensor = torch.cuda.ByteTensor if self.use_gpu() \\
                else torch.ByteTensor

        def preprocess_input(self, label_map, label_nc):
            bs, _, h, w = label_map.size()
            input_label = self.FloatTensor(bs, label_nc, h, w).zero_()
            return input_label.scatter_(1, label_map, 1.0)

        def get_edges(self, t):
            edge = self.ByteTensor(t.size()).zero_()
            edge[:, :, :, 1:] = edge[:, :, :, 1:] | (t[:, :, :, 1:] != t[:, :, :, :-1])
            return edge.float()

        def use_gpu(self):
            return len(self.gpu_ids) > 0
    """)


def _run(code: str):
    namespace: dict = {}
    exec(compile(code, "pix2pix_model.py", "exec"), namespace)
    model = namespace["Pix2PixModel"]([0])
    label = torch.randint(0, 3, (2, 1, 4, 4))
    return model.preprocess_input(label, 3), model.get_edges(label)


def test_a_legacy_type_kept_as_a_value_builds_on_the_device_once_ported(monkeypatch):
    monkeypatch.setenv("PORTER_QUIET", "1")
    with pytest.raises(TypeError, match="torch.cuda.FloatTensor not available"):
        _run(PIX2PIX)
    new = migrate_source(PIX2PIX.encode(), Options(rules=all_rules()), path="pix2pix_model.py").new.decode()
    assert "porter_runtime.legacy_tensor_type(torch.cuda.FloatTensor) if self.use_gpu()" in new
    one_hot, edges = _run(new)
    assert one_hot.shape == (2, 3, 4, 4) and torch.equal(one_hot.sum(1), torch.ones(2, 4, 4))
    assert edges.shape == (2, 1, 4, 4) and edges.dtype == torch.float32


CLIP_GRADS = dedent("""\
    import torch


    def get_grad_norm_fp32(parameters):
        grads = []
        for param in parameters:
            assert param.grad.type() == 'torch.cuda.FloatTensor'
            grads.append(param.grad.detach())
        return torch.stack([g.norm() for g in grads]).norm()
    """)


def test_a_tensors_type_compared_with_a_cuda_name_holds_once_ported(monkeypatch):
    """Megatron-LM's clip_grads.py (blind round 8, silent then): the assert fails on the
    CPU as written and holds once ported; the norm is the same."""
    monkeypatch.setenv("PORTER_QUIET", "1")
    layer = torch.nn.Linear(4, 2)
    layer(torch.randn(3, 4)).sum().backward()

    def norm(code):
        namespace: dict = {}
        exec(compile(code, "clip_grads.py", "exec"), namespace)
        return namespace["get_grad_norm_fp32"](layer.parameters())

    with pytest.raises(AssertionError):
        norm(CLIP_GRADS)
    new = migrate_source(CLIP_GRADS.encode(), Options(rules=all_rules()), path="clip_grads.py").new.decode()
    assert "assert porter_runtime.tensor_type(param.grad) == 'torch.cuda.FloatTensor'" in new
    expected = torch.stack([p.grad.norm() for p in layer.parameters()]).norm()
    assert torch.allclose(norm(new), expected)
