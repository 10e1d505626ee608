"""I-JEPA (facebookresearch/ijepa): the README's local pretraining command, tiny.

- ``train``: ``python main.py --fname CONFIG`` (the README's "Single-GPU training"; --devices left at its default
  ``cuda:0``: one process, spawned by main.py) with configs/in1k_vith14_ep300.yaml scaled down by its own keys: the
  repository's smallest model name (vit_tiny, patch 8 at 96 px: a 12x12 patch grid, on which the masks of the config (min_keep 10) are found), a 2-block predictor of width
  48, batch 2, no loader workers, 1 epoch; bfloat16 autocast + GradScaler (use_bfloat16: true) and pin_mem kept as
  the config has them. On a synthetic ImageNet-style folder (2 classes x 4 images of 96 px: 4 iterations).
- ``resume``: the same with ``load_checkpoint: true`` and 2 epochs, in a folder where prepare() wrote
  ``jepa-latest.pth.tar`` after epoch 1 as a CUDA machine writes it (storages tagged cuda:0; the DDP-wrapped
  encoder / predictor / target encoder with their ``module.`` keys, AdamW state, an enabled GradScaler's state).
  load_checkpoint() swallows every exception and restarts at epoch 0, so the step then checks main.py's own CSV
  log: only epoch 2 ran.
- ``train-2proc``: the README's multi-device local command (``--devices cuda:0 cuda:1``): main.py spawns two
  processes and init_distributed() joins them in one process group; rank 1 writes its own CSV log (jepa_r1.csv)
  only when the group has two ranks.

main.py's parent process exits 0 whatever its children do (mp.Process, never joined on error): the steps are judged
by their outputs.
"""

from pathlib import Path

from _recipe import Step, save_cuda_checkpoint, write_images

G = "_gauntlet"
CROP, PATCH, BATCH = 96, 8, 2

CHECK_RESUME = '''\
"""main.py resumed epoch 1 of 2: its CSV log holds rows of epoch 2 only (a failed load restarts at epoch 1)."""
import csv
import sys

rows = list(csv.DictReader(open(sys.argv[1])))
epochs = sorted({int(r["epoch"]) for r in rows})
print(f"gauntlet: {len(rows)} logged iterations, epochs {epochs}")
sys.exit(0 if rows and epochs == [2] else 1)
'''


def _config(original: dict, folder: str, epochs: int, load: bool) -> dict:
    import copy

    config = copy.deepcopy(original)
    config["data"].update(batch_size=BATCH, crop_size=CROP, num_workers=0, root_path=f"{G}/data",
                          image_folder="imagenet/")
    config["logging"]["folder"] = folder
    config["mask"].update(patch_size=PATCH)
    config["meta"].update(model_name="vit_tiny", pred_depth=2, pred_emb_dim=48, load_checkpoint=load)
    config["optimization"].update(epochs=epochs)
    return config


def prepare(tree: Path) -> None:
    import sys

    import torch
    import yaml

    work = tree / G
    write_images(work / "data" / "imagenet" / "train", count=4, size=CROP, classes=("n01440764", "n01443537"))
    original = yaml.safe_load((tree / "configs" / "in1k_vith14_ep300.yaml").read_text())
    configs = {"train": (1, False), "resume": (2, True), "ddp": (1, False)}
    for name, (epochs, load) in configs.items():
        folder = work / "logs" / name
        folder.mkdir(parents=True, exist_ok=True)  # main.py writes params-ijepa.yaml there before anything else
        config = _config(original, f"{G}/logs/{name}/", epochs, load)
        (work / "configs").mkdir(parents=True, exist_ok=True)
        (work / "configs" / f"{name}.yaml").write_text(yaml.safe_dump(config))
    (work / "check_resume.py").write_text(CHECK_RESUME)

    # jepa-latest.pth.tar after epoch 1 of 2, as src/train.py's save_checkpoint writes it on a CUDA machine.
    sys.path.insert(0, str(tree))
    try:
        import copy

        from src.helper import init_model

        torch.manual_seed(0)
        encoder, predictor = init_model(device=torch.device("cpu"), patch_size=PATCH, crop_size=CROP, pred_depth=2,
                                        pred_emb_dim=48, model_name="vit_tiny")
        target_encoder = copy.deepcopy(encoder)
        # init_opt's parameter groups (without its GradScaler, which off CUDA is a disabled one)
        groups = [
            {"params": [p for n, p in encoder.named_parameters() if ("bias" not in n) and (len(p.shape) != 1)]},
            {"params": [p for n, p in predictor.named_parameters() if ("bias" not in n) and (len(p.shape) != 1)]},
            {"params": [p for n, p in encoder.named_parameters() if ("bias" in n) or (len(p.shape) == 1)],
             "WD_exclude": True, "weight_decay": 0},
            {"params": [p for n, p in predictor.named_parameters() if ("bias" in n) or (len(p.shape) == 1)],
             "WD_exclude": True, "weight_decay": 0},
        ]
        optimizer = torch.optim.AdamW(groups)
        for p in list(encoder.parameters()) + list(predictor.parameters()):
            p.grad = torch.zeros_like(p)
        optimizer.step()  # AdamW moments exist, as after a real epoch
        optimizer.zero_grad()

        def ddp(module):  # saved from the DistributedDataParallel wrappers
            return {"module." + k: v.detach().clone() for k, v in module.state_dict().items()}

        checkpoint = {
            "encoder": ddp(encoder),
            "predictor": ddp(predictor),
            "target_encoder": ddp(target_encoder),
            "opt": optimizer.state_dict(),
            "scaler": {"scale": 65536.0, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2000,
                       "_growth_tracker": 4},
            "epoch": 1,
            "loss": 0.5,
            "batch_size": BATCH,
            "world_size": 1,
            "lr": 0.001,
        }
        save_cuda_checkpoint(checkpoint, work / "logs" / "resume" / "jepa-latest.pth.tar")
    finally:
        sys.path.remove(str(tree))


STEPS = [
    Step("train", f"python main.py --fname {G}/configs/train.yaml",
         outputs=[f"{G}/logs/train/jepa-latest.pth.tar", f"{G}/logs/train/jepa_r0.csv"], timeout=300),
    Step("resume", f"python main.py --fname {G}/configs/resume.yaml && "
                   f"python {G}/check_resume.py {G}/logs/resume/jepa_r0.csv",
         outputs=[f"{G}/logs/resume/jepa-latest.pth.tar"], timeout=300),
    Step("train-2proc", f"python main.py --fname {G}/configs/ddp.yaml --devices cuda:0 cuda:1",
         outputs=[f"{G}/logs/ddp/jepa-latest.pth.tar", f"{G}/logs/ddp/jepa_r1.csv"], timeout=300),
]
