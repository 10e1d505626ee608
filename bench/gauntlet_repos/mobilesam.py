"""MobileSAM's README commands, on synthetic images (and MobileSAMv2's own test images) with tiny random checkpoints
written as on CUDA:

- scripts/amg.py (segment-anything's automatic mask generation script, kept in MobileSAM) with --model-type vit_t on
  a folder of two images: COCO RLE json with small-region post-processing (its point grid shrunk by its own
  --points-per-side 4 --points-per-batch 8, its score filters off: random weights predict no confident mask);
- the README's "Getting Started" snippet verbatim in its device choice (``"cuda" if torch.cuda.is_available() else
  "cpu"``, ``mobile_sam.to(device=device)``): SamPredictor with a point and a box prompt, then
  ``SamAutomaticMaskGenerator(mobile_sam).generate(image)`` (its own points_per_side / points_per_batch shrink the
  grid; its score filters off, since random weights predict no confident mask);
- the README's ONNX export, ``scripts/export_onnx_model.py --checkpoint ./weights/mobile_sam.pt --model-type vit_t``
  (checked by onnxruntime on the CPU; --quantize-out is not run);
- MobileSAMv2's ``experiments/mobilesamv2.sh``: ``Inference.py --img_path ./test_images/ --encoder_type
  efficientvit_l2`` from MobileSAMv2/, on the repository's two test images, with --output_dir pointed into _gauntlet
  and the YOLO image size shrunk by its own --imgsz 64.

Weights: weights/mobile_sam.pt (the path the README loads; a blob absent from the snapshot) is the repository's own
vit_t at full size (TinyViT-5M + SAM's decoder), random, saved as a CUDA state dict. MobileSAMv2's files sit where
Inference.py's create_model and encoder_path hard-code them: weight/ObjectAwareModel.pt (an ultralytics checkpoint
pickling the whole model: a YOLOv8-seg from the vendored ultralytics' own yolov8-seg.yaml with nc 1 and width 1/16,
half precision as ultralytics saves; its class-score biases set so that only the 4 stride-32 anchors of a 64-px
input pass --conf, so a handful of boxes reach SAM), PromptGuidedDecoder/Prompt_guided_Mask_Decoder.pt (the
repository's own prompt encoder + mask decoder, full size) and weight/l2.pt (an EfficientViT-SAM image encoder under
"state_dict" with the "image_encoder." prefix, as the released one), all saved as on CUDA.

Size: Inference.py's create_model builds a random ViT-H SAM (632M parameters) only to replace its encoder and
decoders, and its l2 encoder is EfficientViT-L2 (about 50M parameters at 512 px). _gauntlet/run.py (which runs the
script named on its command line as __main__, as yolov7's recipe does) shrinks both through the repository's own
builders: mobilesamv2.build_sam._build_sam gets a 2-block, 32-wide ViT, and build_efficientvit_l2_encoder's
EfficientViTLargeBackbone / SamNeck get width_list [8, 16, 16, 32, 32], one block a stage, a 32-wide single-block
neck (its 256-channel 64x64 output, its loading code and checkpoint format unchanged).

Not CUDA matters, handled the same on the original and the port (run.py): PyPI's torchvision is built against CUDA
torch, so its C++ ops (nms) do not load on this CPU torch: a plain-torch nms; torch >= 2.9 exports ONNX through
torch.export by default, which refuses the script's dynamic_axes: torch.onnx.export defaults to dynamo=False;
TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1, since ultralytics checkpoints pickle the whole model and torch >= 2.6 loads
weights-only by default. YOLO_CONFIG_DIR keeps ultralytics' settings file inside the tree. Never a device flag.
"""

from pathlib import Path

from _recipe import Step, save_cuda_checkpoint, write_images

G = "_gauntlet"
ENV = {"PYTHONPATH": "{tree}", "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1", "MPLBACKEND": "Agg",
       "YOLO_CONFIG_DIR": "{tree}/_gauntlet/yolo_config"}

RUN_PY = r'''
"""Runs argv[1] as __main__ with the rest of argv (sys.path[0] its folder), after not-CUDA shims and the tiny sizes."""
import importlib
import os
import runpy
import sys


def _nms(boxes, scores, iou_threshold):
    import torch
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


def compat():
    import torch
    import torchvision.extension
    import torchvision.ops
    import torchvision.ops.boxes

    if not torchvision.extension._has_ops():
        torchvision.extension._assert_has_ops = lambda: None
        torchvision.ops.boxes._assert_has_ops = lambda: None
        torchvision.ops.boxes.nms = lambda boxes, scores, iou_threshold: _nms(boxes, scores, iou_threshold)
        torchvision.ops.nms = torchvision.ops.boxes.nms
    export = torch.onnx.export

    def export_legacy(*args, **kwargs):
        kwargs.setdefault("dynamo", False)
        return export(*args, **kwargs)

    torch.onnx.export = export_legacy


def tiny_v2():
    """MobileSAMv2's builders at a tiny size: the ViT-H that create_model makes (and whose encoder Inference.py
    replaces), and the EfficientViT-L2 image encoder (same classes, same 256x64x64 output, same loading)."""
    build_sam = importlib.import_module("mobilesamv2.build_sam")
    if getattr(build_sam, "_gauntlet_tiny", False):
        return build_sam
    full_sam, backbone, neck = build_sam._build_sam, build_sam.EfficientViTLargeBackbone, build_sam.SamNeck

    def tiny_sam(**kwargs):
        kwargs.update(encoder_embed_dim=32, encoder_depth=2, encoder_num_heads=2, encoder_global_attn_indexes=[1])
        return full_sam(**kwargs)

    def tiny_backbone(**kwargs):
        kwargs.update(width_list=[8, 16, 16, 32, 32], depth_list=[1, 1, 1, 1, 1])
        return backbone(**kwargs)

    def tiny_neck(**kwargs):
        kwargs.update(in_channel_list=[32, 32, 16], head_width=32, head_depth=1)
        return neck(**kwargs)

    build_sam._build_sam, build_sam.EfficientViTLargeBackbone, build_sam.SamNeck = tiny_sam, tiny_backbone, tiny_neck
    build_sam._gauntlet_tiny = True
    return build_sam


compat()

if __name__ == "__main__" and len(sys.argv) > 1:
    script = sys.argv.pop(1)
    sys.argv[0] = script
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    if os.path.isdir(os.path.join(sys.path[0], "mobilesamv2")):
        tiny_v2()
    runpy.run_path(script, run_name="__main__")
'''

# The README's "Getting Started" snippet (the predictor, then the automatic mask generator), prompts as in SAM's
# predictor notebook.
README = r'''
import sys

import numpy as np
import torch
from PIL import Image
from mobile_sam import sam_model_registry, SamAutomaticMaskGenerator, SamPredictor

image = np.array(Image.open(sys.argv[1]).convert("RGB"))
out = sys.argv[2]

model_type = "vit_t"
sam_checkpoint = "./weights/mobile_sam.pt"

device = "cuda" if torch.cuda.is_available() else "cpu"

mobile_sam = sam_model_registry[model_type](checkpoint=sam_checkpoint)
mobile_sam.to(device=device)
mobile_sam.eval()

predictor = SamPredictor(mobile_sam)
predictor.set_image(image)
masks, scores, logits = predictor.predict(point_coords=np.array([[20, 10]]), point_labels=np.array([1]),
                                          multimask_output=True)
masks2, scores2, _ = predictor.predict(point_coords=np.array([[20, 10], [40, 30]]), point_labels=np.array([1, 0]),
                                       box=np.array([4, 4, 50, 40]), mask_input=logits[np.argmax(scores)][None, :, :],
                                       multimask_output=False)

mask_generator = SamAutomaticMaskGenerator(mobile_sam, points_per_side=4, points_per_batch=8, pred_iou_thresh=0,
                                           stability_score_thresh=0)
generated = mask_generator.generate(image)
print("masks", masks.shape, masks2.shape, "scores", scores, scores2, "generated", len(generated))
np.savez(out, masks=masks, scores=scores, masks2=masks2,
         generated=np.stack([m["segmentation"] for m in generated]) if generated else np.zeros(0))
'''

RUN = f"python {G}/run.py "
AMG = (RUN + "scripts/amg.py --checkpoint ./weights/mobile_sam.pt --model-type vit_t --input {input} --output {output}"
       " --points-per-side 4 --points-per-batch 8 --pred-iou-thresh 0 --stability-score-thresh 0")


def prepare(tree: Path) -> None:
    import os
    import runpy
    import sys

    import numpy as np
    import torch
    from PIL import Image

    work = tree / G
    write_images(work / "images", count=1, size=64, class_folders=False)  # images/img_0000.png, 64x64
    pixels = np.random.default_rng(1).integers(0, 256, size=(48, 64, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(work / "images" / "wide_0000.png")  # resize-longest-side, padding, crop back
    (work / "run.py").write_text(RUN_PY)
    (work / "readme.py").write_text(README)
    (work / "v2out").mkdir(exist_ok=True)

    # MobileSAM: the repository's vit_t, random, as a CUDA state dict where the README loads it.
    sys.path.insert(0, str(tree))
    run = runpy.run_path(str(work / "run.py"))
    from mobile_sam import sam_model_registry

    torch.manual_seed(0)
    save_cuda_checkpoint(sam_model_registry["vit_t"]().state_dict(), tree / "weights" / "mobile_sam.pt")

    # MobileSAMv2: imports resolve from MobileSAMv2/ (Inference.py runs there).
    v2 = tree / "MobileSAMv2"
    sys.path.insert(0, str(v2))
    os.environ["YOLO_CONFIG_DIR"] = str(work / "yolo_config")
    build_sam = run["tiny_v2"]()
    torch.manual_seed(1)
    decoder = build_sam.build_PromptGuidedDecoder()
    save_cuda_checkpoint({"PromtEncoder": decoder["PromtEncoder"].state_dict(),
                          "MaskDecoder": decoder["MaskDecoder"].state_dict()},
                         v2 / "PromptGuidedDecoder" / "Prompt_guided_Mask_Decoder.pt")
    # build_efficientvit_l2_encoder loads its checkpoint unconditionally: build the tiny encoder's modules directly.
    backbone = build_sam.EfficientViTLargeBackbone(width_list=[32, 64, 128, 256, 512], depth_list=[1, 2, 2, 8, 8],
                                                   in_channels=3, qkv_dim=32, norm="bn2d", act_func="gelu")
    neck = build_sam.SamNeck(fid_list=["stage4", "stage3", "stage2"], in_channel_list=[512, 256, 128], head_width=256,
                             head_depth=12, expand_ratio=1, middle_op="fmbconv", out_dim=256)
    encoder = build_sam.EfficientViTSamImageEncoder(backbone, neck)
    build_sam.set_norm_eps(encoder, 1e-6)
    state = {"image_encoder." + k: v for k, v in encoder.state_dict().items()}
    save_cuda_checkpoint({"state_dict": state}, v2 / "weight" / "l2.pt")

    # The object-aware prompt model: a tiny YOLOv8-seg of the vendored ultralytics, one class, saved whole.
    import yaml
    from ultralytics.nn.tasks import SegmentationModel

    cfg = yaml.safe_load((v2 / "ultralytics" / "models" / "v8" / "yolov8-seg.yaml").read_text())
    cfg.pop("scales", None)
    cfg.update(nc=1, depth_multiple=0.33, width_multiple=0.0625)
    torch.manual_seed(2)
    model = SegmentationModel(cfg, nc=1, verbose=False)
    head = model.model[-1]
    with torch.no_grad():  # only the stride-32 level scores above --conf: 4 anchors at --imgsz 64
        for level, bias in zip(head.cv3, (-10.0, -10.0, 4.0)):
            level[-1].weight.zero_()
            level[-1].bias.fill_(bias)
    model.names = {0: "object"}
    model.args = {"task": "segment", "imgsz": 1024}
    ckpt = {"epoch": -1, "best_fitness": None, "model": model.half(), "ema": None, "updates": None,
            "optimizer": None, "train_args": {"task": "segment", "imgsz": 1024}, "date": "2023-12-01",
            "version": "8.0.120"}
    save_cuda_checkpoint(ckpt, v2 / "weight" / "ObjectAwareModel.pt")


STEPS = [
    Step("amg", AMG.format(input=f"{G}/images", output=f"{G}/amg") + " --convert-to-rle --min-mask-region-area 4",
         outputs=[f"{G}/amg/img_0000.json", f"{G}/amg/wide_0000.json"], timeout=600, env=ENV),
    Step("readme", RUN + f"{G}/readme.py {G}/images/wide_0000.png {G}/readme.npz", outputs=[f"{G}/readme.npz"],
         timeout=600, env=ENV),
    Step("export_onnx", RUN + "scripts/export_onnx_model.py --checkpoint ./weights/mobile_sam.pt --model-type vit_t"
         f" --output {G}/mobile_sam.onnx", outputs=[f"{G}/mobile_sam.onnx"], timeout=600, env=ENV),
    Step("v2_inference", f"cd MobileSAMv2 && python ../{G}/run.py Inference.py --img_path ./test_images/"
         f" --output_dir ../{G}/v2out/ --encoder_type efficientvit_l2 --imgsz 64",
         outputs=[f"{G}/v2out/1.jpg", f"{G}/v2out/2.jpg"], timeout=600, env=ENV),
]
