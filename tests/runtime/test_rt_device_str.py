"""``device_str``: what PT005 and PT201 put where a setting said "cuda" (a parameter
default, a module constant, an argparse default), often evaluated at import."""

import argparse

import pytest
import torch

import porter_runtime


def test_it_is_the_original_string_on_cuda(simulate):
    simulate("cuda")
    assert porter_runtime.device_str() == "cuda"
    assert porter_runtime.device_str(1) == "cuda:1"
    assert porter_runtime.device_str("cuda:0") == "cuda:0"
    assert type(porter_runtime.device_str()) is str


@pytest.mark.parametrize("machine", ["mps", "cpu"])
def test_elsewhere_it_names_the_resolved_device(simulate, machine):
    simulate(machine)
    assert porter_runtime.device_str() == machine
    assert porter_runtime.device_str(1) == ("mps:0" if machine == "mps" else machine)  # as a tensor there says
    assert porter_runtime.device_str("cpu") == "cpu"


def test_it_works_as_a_string_default(simulate):
    simulate("cpu")
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default=porter_runtime.device_str())
    args = parser.parse_args([])
    assert args.device == "cpu" and f"on {args.device}" == "on cpu"
    assert torch.zeros(1, device=args.device).device.type == "cpu"
    assert parser.parse_args(["--device", "cuda"]).device == "cuda"  # the user's choice stays theirs


def test_it_prints_nothing_and_leaves_the_info_line_to_device(simulate, monkeypatch, capsys):
    monkeypatch.delenv("PORTER_QUIET")
    simulate("mps")
    porter_runtime.device_str()
    porter_runtime.device_str(1)
    assert capsys.readouterr().err == ""
    porter_runtime.device()
    assert capsys.readouterr().err.count("porter_runtime: using mps (") == 1


def test_an_old_torch_on_mps_is_said_once(simulate, monkeypatch):
    from porter_runtime import _compat
    simulate("mps")
    monkeypatch.setattr(_compat, "at_least", lambda major, minor: (2, 4) >= (major, minor))
    with pytest.warns(UserWarning, match="needs torch 2.5 or newer there"):
        porter_runtime.device()


@pytest.mark.parametrize("machine", ["cuda", "mps", "cpu"])
def test_device_option_parses_a_cuda_request_to_the_resolved_device(simulate, machine):
    """PT007's ``type=``: the README's ``--device "cuda"`` on every machine; on CUDA every
    string comes back as it was given."""
    simulate(machine)
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", type=porter_runtime.device_option, default="cpu")
    parser.add_argument("--gpu", type=porter_runtime.device_option, default="0")
    expected = {"cuda": ("cuda", "cuda:1"), "mps": ("mps", "mps:0"), "cpu": ("cpu", "cpu")}[machine]
    assert parser.parse_args(["--device", "cuda"]).device == expected[0]
    assert parser.parse_args(["--device=cuda:1"]).device == expected[1]
    assert parser.parse_args([]).device == "cpu"
    for given in ("cpu", "mps", "0", "0,1", "cuda_graphs", "CUDA"):  # not a CUDA device string, or not a device
        assert parser.parse_args(["--device", given]).device == given
    assert parser.parse_args([]).gpu == "0"
    assert porter_runtime.device_option(None) is None
