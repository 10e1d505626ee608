"""SAM 2's own commands, on synthetic images and videos and a tiny random checkpoint written as on CUDA:
the README's image-prediction snippet (build_sam2 + SAM2ImagePredictor, under its
``torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16)``), automatic mask generation as in the
automatic-mask-generator notebook (SAM2AutomaticMaskGenerator), the README's video-prediction snippet
(build_sam2_video_predictor, init_state, add_new_points_or_box, propagate_in_video), tools/vos_inference.py as in
tools/README.md, and training/train.py as in training/README.md (the MOSE fine-tuning config, scaled down): one
epoch from the CUDA checkpoint, a resumed second epoch, and a 2-process run (--num-gpus 2).

The repository's model sizes are fixed in its hydra configs (Hiera-T is the smallest), so prepare() writes a tiny
one the way the README's users write theirs: copies of the repository's own sam2.1_hiera_t.yaml and
sam2.1_hiera_b+_MOSE_finetune.yaml with smaller widths and depths, put in the config package
(sam2/configs/gauntlet/, where hydra's ``initialize_config_module("sam2")`` finds ``configs/...`` names; a copy
stays in _gauntlet/configs/). Everything else in them is the repository's: ``accelerator: cuda``,
``backend: nccl``, bf16 AMP, the checkpoint initializer, the data pipeline and its transforms. Training runs at
``scratch.resolution: 256`` (the config's own knob; the image predictor's feature sizes are fixed for 1024, so
inference keeps 1024), 3 frames (up to 2 of them conditioning frames, whose mask prompts skip the heads), 2 objects, 1 data worker. Never a device flag.
"""

from pathlib import Path

from _recipe import Step, save_cuda_checkpoint

G = "_gauntlet"
CKPT = f"{G}/sam2.1_hiera_gauntlet_cuda.pt"
CFG = "configs/gauntlet/sam2.1_hiera_gauntlet.yaml"  # name inside the sam2 config package
ENV = {"PYTHONPATH": "{tree}"}  # as `pip install -e .`: sam2 and training importable from the repository root

# model overrides, relative to the model node (model. in the inference configs, trainer.model. in training)
TINY = {
    "image_encoder.trunk.embed_dim": 8,
    "image_encoder.trunk.num_heads": 1,
    "image_encoder.trunk.stages": [1, 2, 1, 1],  # global attention off the pooling blocks (1, 3, 4)
    "image_encoder.trunk.global_att_blocks": [2],
    "image_encoder.trunk.window_pos_embed_bkg_spatial_size": [7, 7],
    "image_encoder.neck.d_model": 32,
    "image_encoder.neck.backbone_channel_list": [64, 32, 16, 8],
    "image_encoder.neck.position_encoding.num_pos_feats": 32,
    "memory_attention.d_model": 32,
    "memory_attention.num_layers": 1,
    "memory_attention.layer.d_model": 32,
    "memory_attention.layer.dim_feedforward": 64,
    "memory_attention.layer.self_attention.embedding_dim": 32,
    "memory_attention.layer.cross_attention.embedding_dim": 32,
    "memory_attention.layer.cross_attention.kv_in_dim": 16,
    "memory_encoder.out_dim": 16,
    "memory_encoder.in_dim": 32,
    "memory_encoder.position_encoding.num_pos_feats": 16,
    "memory_encoder.mask_downsampler.embed_dim": 32,
    "memory_encoder.fuser.layer.dim": 32,
    "num_maskmem": 3,
}

# The README's image-prediction snippet, with prompts as in its image predictor notebook.
IMAGE = r'''
import sys
import numpy as np
import torch
from PIL import Image
from sam2.build_sam import build_sam2
from sam2.sam2_image_predictor import SAM2ImagePredictor

model_cfg, checkpoint, image_path, out = sys.argv[1:5]
image = np.array(Image.open(image_path).convert("RGB"))
predictor = SAM2ImagePredictor(build_sam2(model_cfg, checkpoint))

with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
    predictor.set_image(image)
    masks, scores, logits = predictor.predict(point_coords=np.array([[40, 20]]), point_labels=np.array([1]),
                                              multimask_output=True)
    masks2, scores2, _ = predictor.predict(point_coords=np.array([[40, 20], [60, 30]]),
                                           point_labels=np.array([1, 0]), box=np.array([8, 8, 90, 60]),
                                           mask_input=logits[np.argmax(scores)][None, :, :], multimask_output=False)
    masks3, scores3, _ = predictor.predict(box=np.array([[8, 8, 90, 60], [20, 10, 50, 70]]), multimask_output=False)
    predictor.set_image_batch([image, image[:, ::-1].copy()])
    batch_masks, batch_scores, _ = predictor.predict_batch(
        point_coords_batch=[np.array([[40, 20]]), np.array([[30, 30]])], point_labels_batch=[np.array([1])] * 2,
        multimask_output=True)
print("masks", masks.shape, masks2.shape, masks3.shape, len(batch_masks), "scores", scores, scores2)
np.savez(out, masks=masks, scores=scores, masks2=masks2, masks3=masks3, batch0=batch_masks[0])
'''

# Automatic mask generation, as in notebooks/automatic_mask_generator_example.ipynb (the grid shrunk by its own
# arguments, score filters off: random weights predict no confident mask).
AMG = r'''
import json
import sys
import numpy as np
import torch
from PIL import Image
from sam2.build_sam import build_sam2
from sam2.automatic_mask_generator import SAM2AutomaticMaskGenerator


# Not CUDA, the same on every device: PyPI's torchvision is built against CUDA torch, so on this CPU torch its
# C++ ops (nms) never load. A plain-torch torchvision nms.
def _nms(boxes, scores, iou_threshold):
    from torchvision.ops.boxes import box_iou

    order = scores.argsort(descending=True)
    keep = []
    while order.numel() > 0:
        i = order[0]
        keep.append(i)
        if order.numel() == 1:
            break
        iou = box_iou(boxes[i][None], boxes[order[1:]])[0]
        order = order[1:][iou <= iou_threshold]
    return torch.stack(keep) if keep else torch.empty(0, dtype=torch.long, device=boxes.device)


import torchvision.extension
import torchvision.ops.boxes

if not torchvision.extension._has_ops():
    torchvision.extension._assert_has_ops = lambda: None
    torchvision.ops.boxes._assert_has_ops = lambda: None
    torchvision.ops.boxes.nms = _nms
    torchvision.ops.nms = _nms

model_cfg, checkpoint, image_path, out = sys.argv[1:5]
image = np.array(Image.open(image_path).convert("RGB"))
sam2 = build_sam2(model_cfg, checkpoint, apply_postprocessing=False)
mask_generator = SAM2AutomaticMaskGenerator(sam2, points_per_side=4, points_per_batch=8, pred_iou_thresh=0.0,
                                            stability_score_thresh=0.0, min_mask_region_area=4,
                                            output_mode="binary_mask")
masks = mask_generator.generate(image)
print("masks", len(masks), sorted(masks[0].keys()) if masks else None)
json.dump([{k: v for k, v in m.items() if k != "segmentation"} for m in masks], open(out, "w"))
'''

# The README's video-prediction snippet, with a click, a box and a second object, as in its video notebook.
VIDEO = r'''
import sys
import numpy as np
import torch
from sam2.build_sam import build_sam2_video_predictor

model_cfg, checkpoint, video_dir, out = sys.argv[1:5]
predictor = build_sam2_video_predictor(model_cfg, checkpoint)

with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
    state = predictor.init_state(video_dir)
    frame_idx, object_ids, masks = predictor.add_new_points_or_box(
        state, frame_idx=0, obj_id=1, points=np.array([[40, 20]], dtype=np.float32), labels=np.array([1], np.int32))
    frame_idx, object_ids, masks = predictor.add_new_points_or_box(
        state, frame_idx=0, obj_id=2, box=np.array([8, 8, 60, 50], dtype=np.float32))
    results = {}
    for frame_idx, object_ids, masks in predictor.propagate_in_video(state):
        results[frame_idx] = (masks > 0.0).cpu().numpy()
    predictor.reset_state(state)
print("frames", sorted(results), "objects", object_ids)
np.savez(out, **{str(k): v for k, v in results.items()})
'''

TRAIN = "python training/train.py -c configs/gauntlet/{config}.yaml --use-cluster 0 --num-gpus {gpus}"


def _tiny(node, resolution=None):
    from omegaconf import OmegaConf

    for key, value in TINY.items():
        OmegaConf.update(node, key, value, merge=False)
    if resolution is not None:  # RoPE's initial feature grid (recomputed anyway when the input differs)
        side = resolution // 16
        for attention in ("self_attention", "cross_attention"):
            OmegaConf.update(node, f"memory_attention.layer.{attention}.feat_sizes", [side, side], merge=False)


def _write(cfg, name: str, tree: Path) -> None:
    from omegaconf import OmegaConf

    text = "# @package _global_\n\n" + OmegaConf.to_yaml(cfg, resolve=False)
    for folder in (tree / G / "configs", tree / "sam2" / "configs" / "gauntlet"):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{name}.yaml").write_text(text)


def _data(tree: Path) -> None:
    """Two DAVIS-style videos: JPEGImages/<video>/00000.jpg..., palettised Annotations/<video>/00000.png..."""
    import numpy as np
    from PIL import Image

    generator = np.random.default_rng(0)
    palette = [0, 0, 0, 128, 0, 0, 0, 128, 0, 128, 128, 0] + [0] * (256 * 3 - 12)
    for video, (h, w) in (("vid_a", (72, 96)), ("vid_b", (64, 64))):
        images = tree / G / "data" / "JPEGImages" / video
        annotations = tree / G / "data" / "Annotations" / video
        images.mkdir(parents=True, exist_ok=True)
        annotations.mkdir(parents=True, exist_ok=True)
        for t in range(3):
            pixels = generator.integers(0, 256, size=(h, w, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(images / f"{t:05d}.jpg")
            mask = np.zeros((h, w), dtype=np.uint8)
            mask[8 + t:40 + t, 10:50] = 1
            mask[h // 2:h - 4, w // 2 + t:w - 4] = 2
            png = Image.fromarray(mask, mode="P")
            png.putpalette(palette)
            png.save(annotations / f"{t:05d}.png")
    (tree / G / "data" / "val.txt").write_text("vid_a\n")  # one video: vos_inference autocasts to bf16, slow on a CPU
    (tree / G / "data" / "image.jpg").write_bytes((tree / G / "data" / "JPEGImages" / "vid_a" / "00000.jpg").read_bytes())


def prepare(tree: Path) -> None:
    import copy
    import sys

    import torch
    from omegaconf import OmegaConf

    _data(tree)
    for name, text in (("image.py", IMAGE), ("amg.py", AMG), ("video.py", VIDEO)):
        (tree / G / name).write_text(text)

    configs = tree / "sam2" / "configs"
    model = OmegaConf.load(configs / "sam2.1" / "sam2.1_hiera_t.yaml")
    _tiny(model.model)
    _write(model, "sam2.1_hiera_gauntlet", tree)

    train = OmegaConf.load(configs / "sam2.1_training" / "sam2.1_hiera_b+_MOSE_finetune.yaml")
    scratch = train.scratch
    scratch.resolution, scratch.num_train_workers, scratch.num_frames, scratch.max_num_objects = 256, 1, 3, 2
    scratch.num_epochs = 1
    train.dataset.img_folder = f"{G}/data/JPEGImages"
    train.dataset.gt_folder = f"{G}/data/Annotations"
    train.dataset.file_list_txt = None
    train.dataset.multiplier = 1
    _tiny(train.trainer.model, resolution=256)
    train.trainer.logging.log_freq = 1
    train.trainer.checkpoint.model_weight_initializer.state_dict.checkpoint_path = CKPT
    train.launcher.experiment_log_dir = f"{G}/sam2_logs/train"
    _write(train, "train", tree)
    resume = copy.deepcopy(train)
    resume.scratch.num_epochs = 2  # same log dir: the trainer resumes from its checkpoints/checkpoint.pt
    _write(resume, "train_resume", tree)
    ddp = copy.deepcopy(train)
    ddp.launcher.experiment_log_dir = f"{G}/sam2_logs/train_ddp"
    _write(ddp, "train_ddp", tree)

    # the tiny model, built by the repository's own config and hydra (in a child process: this recipe's module is
    # itself named sam2), saved as the released checkpoints are
    import os
    import subprocess

    build = ("import sys, torch; from hydra.utils import instantiate; from omegaconf import OmegaConf; "
             "torch.manual_seed(0); cfg = OmegaConf.load(sys.argv[1]); "
             "torch.save(instantiate(cfg.model, _recursive_=True).state_dict(), sys.argv[2])")
    plain = tree / G / "plain_state_dict.pt"
    subprocess.run([sys.executable, "-c", build, str(tree / G / "configs" / "sam2.1_hiera_gauntlet.yaml"), str(plain)],
                   cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)}, check=True)
    save_cuda_checkpoint({"model": torch.load(plain, map_location="cpu")}, tree / CKPT)
    plain.unlink()


RESUMED = (f"python -c \"import torch; c = torch.load('{G}/sam2_logs/train/checkpoints/checkpoint.pt', "
           "map_location='cpu', weights_only=False); print('epoch', c['epoch'], 'steps', c['steps']); "
           "assert c['epoch'] == 2, c['epoch']\"")

STEPS = [
    Step("image_predict", f"python {G}/image.py {CFG} {CKPT} {G}/data/image.jpg {G}/image.npz",
         outputs=[f"{G}/image.npz"], timeout=300, env=ENV),
    Step("amg", f"python {G}/amg.py {CFG} {CKPT} {G}/data/image.jpg {G}/amg.json",
         outputs=[f"{G}/amg.json"], timeout=300, env=ENV),
    Step("video_predict", f"python {G}/video.py {CFG} {CKPT} {G}/data/JPEGImages/vid_a {G}/video.npz",
         outputs=[f"{G}/video.npz"], timeout=300, env=ENV),
    Step("vos_inference", f"python ./tools/vos_inference.py --sam2_cfg {CFG} --sam2_checkpoint {CKPT}"
         f" --base_video_dir {G}/data/JPEGImages --input_mask_dir {G}/data/Annotations"
         f" --video_list_file {G}/data/val.txt --output_mask_dir {G}/vos_pred",
         outputs=[f"{G}/vos_pred/vid_a/00002.png"], timeout=300, env=ENV),
    Step("train", TRAIN.format(config="train", gpus=1),
         outputs=[f"{G}/sam2_logs/train/checkpoints/checkpoint.pt"], timeout=300, env=ENV),
    Step("resume", TRAIN.format(config="train_resume", gpus=1) + " && " + RESUMED,
         outputs=[f"{G}/sam2_logs/train/checkpoints/checkpoint.pt"], timeout=300, env=ENV),
    Step("train_ddp", TRAIN.format(config="train_ddp", gpus=2),
         outputs=[f"{G}/sam2_logs/train_ddp/checkpoints/checkpoint.pt"], timeout=300, env=ENV),
]
