"""porter_runtime.detectron2_config on yacs' real CfgNode, detectron2's base class
(TP710; the end-to-end port of a detectron2 project is tests/test_detectron2_config.py)."""
from __future__ import annotations

import pytest

import porter_runtime

pytest.importorskip("yacs")


def _config():
    from yacs.config import CfgNode as CN

    cfg = CN()
    cfg.MODEL = CN({"DEVICE": "cuda:1"})
    cfg.SOLVER = CN({"AMP": CN({"ENABLED": True})})
    return cfg


def test_on_cuda_the_config_is_untouched(simulate):
    simulate("cuda")
    cfg = _config()
    assert porter_runtime.detectron2_config(cfg) is cfg and type(cfg).__name__ == "CfgNode"
    assert type(cfg) is type(_config()) and cfg.MODEL.DEVICE == "cuda:1" and cfg.SOLVER.AMP.ENABLED


@pytest.mark.parametrize("machine,device", [("mps", "mps:0"), ("cpu", "cpu")])
def test_off_cuda_the_device_and_amp_follow_the_machine_before_the_freeze(simulate, machine, device):
    simulate(machine)
    cfg = _config()
    with pytest.warns(UserWarning, match="AMPTrainer"):
        assert porter_runtime.detectron2_config(cfg) is cfg
    assert cfg.MODEL.DEVICE == device and not cfg.SOLVER.AMP.ENABLED
    cfg.merge_from_other_cfg(_config())  # a YAML merge after get_cfg()
    assert cfg.MODEL.DEVICE == "cuda:1"
    with pytest.warns(UserWarning, match="AMPTrainer"):
        porter_runtime.detectron2_config(cfg).freeze()
    assert cfg.is_frozen() and cfg.MODEL.DEVICE == device and not cfg.SOLVER.AMP.ENABLED
    assert type(cfg) is type(_config()) and porter_runtime.detectron2_config(cfg) is cfg  # frozen: as it is
    assert porter_runtime.detectron2_config(None) is None
