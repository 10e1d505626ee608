"""Segment Anything's README commands, on synthetic images and a tiny random checkpoint written as on CUDA:
scripts/amg.py (automatic mask generation: PNG masks, and COCO RLE json with small-region post-processing), the
README's SamPredictor snippet (a point, a point+box+mask prompt, a batch of boxes through predict_torch, the image
embedding), and scripts/export_onnx_model.py (prompt encoder + mask decoder to ONNX, checked by onnxruntime on the
CPU; its --quantize-out is not run: onnxruntime 1.32 dropped quantize_dynamic(optimize_model=)).

The repository has no training code and no model-size flag: its model types (vit_h/l/b) are fixed in
build_sam.py, and a random vit_b costs about 3 minutes an image encoding on the shared 2-core runner. So
``_gauntlet/tiny.py`` adds one entry, ``vit_tiny``, to the repository's own ``sam_model_registry``, built by its
own ``_build_sam`` (encoder width 32, depth 2, 2 heads, one windowed and one global-attention block; the prompt
encoder, mask decoder, 1024-px input and checkpoint loading are the repository's, unchanged), and then runs the
script named on its command line as ``__main__`` (runpy), with the script's own arguments. The scripts' own flags
shrink the rest: amg.py's point grid (--points-per-side 4, --points-per-batch 8) and its score filters off (random
weights predict no confident mask), so NMS, RLE encoding and small-region removal all see masks. The checkpoint is
written as on CUDA, as the released ones were (build_sam loads it with a bare torch.load). Never a --device flag.
"""

from pathlib import Path

from _recipe import Step, save_cuda_checkpoint, write_images

G = "_gauntlet"
CKPT = f"{G}/sam_vit_tiny_cuda.pth"
ENV = {"PYTHONPATH": "{tree}"}  # as `pip install -e .` from the README: segment_anything importable from scripts/

TINY = r'''
"""Adds a tiny SAM ("vit_tiny") to segment_anything's registry, then runs argv[1] as __main__ with the rest."""
import importlib
import runpy
import sys

build_sam = importlib.import_module("segment_anything.build_sam")  # the package re-exports a function by that name


def build_sam_vit_tiny(checkpoint=None):
    return build_sam._build_sam(encoder_embed_dim=32, encoder_depth=2, encoder_num_heads=2,
                                encoder_global_attn_indexes=[1], checkpoint=checkpoint)


build_sam.sam_model_registry["vit_tiny"] = build_sam_vit_tiny


# Not CUDA matters, the same on every device: PyPI's torchvision is built against CUDA torch, so on this CPU torch
# its C++ ops (nms) never load; and torch >= 2.9 exports ONNX through torch.export by default, which refuses the
# script's dynamic_axes. A plain-torch torchvision::nms, and the exporter the script was written for.
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


def _compat():
    import torch
    import torchvision.extension
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


_compat()

if __name__ == "__main__" and len(sys.argv) > 1:
    script = sys.argv.pop(1)
    sys.argv[0] = script
    runpy.run_path(script, run_name="__main__")
'''

# The README's "Getting Started" snippet, with prompts as in its predictor notebook.
PREDICT = r'''
import sys
import numpy as np
import torch
from PIL import Image
from segment_anything import SamPredictor, sam_model_registry

checkpoint, image_path, out = sys.argv[1:4]
image = np.array(Image.open(image_path).convert("RGB"))
sam = sam_model_registry["vit_tiny"](checkpoint=checkpoint)
predictor = SamPredictor(sam)
predictor.set_image(image)
masks, scores, logits = predictor.predict(point_coords=np.array([[20, 10]]), point_labels=np.array([1]),
                                          multimask_output=True)
masks2, scores2, _ = predictor.predict(point_coords=np.array([[20, 10], [40, 30]]), point_labels=np.array([1, 0]),
                                       box=np.array([4, 4, 50, 40]), mask_input=logits[np.argmax(scores)][None, :, :],
                                       multimask_output=False)
boxes = torch.tensor([[4, 4, 50, 40], [10, 5, 30, 45]], device=predictor.device)
boxes = predictor.transform.apply_boxes_torch(boxes, image.shape[:2])
masks3, scores3, _ = predictor.predict_torch(point_coords=None, point_labels=None, boxes=boxes,
                                             multimask_output=False)
embedding = predictor.get_image_embedding().cpu().numpy()
print("masks", masks.shape, masks2.shape, tuple(masks3.shape), "scores", scores, scores2, "embedding", embedding.shape)
np.savez(out, masks=masks, scores=scores, masks2=masks2, masks3=masks3.cpu().numpy(), embedding=embedding)
'''

RUN = f"python {G}/tiny.py "
AMG = (RUN + "scripts/amg.py --checkpoint " + CKPT + " --model-type vit_tiny --input {input} --output {output}"
       " --points-per-side 4 --points-per-batch 8 --pred-iou-thresh 0 --stability-score-thresh 0")


def prepare(tree: Path) -> None:
    import runpy

    import numpy as np
    import torch
    from PIL import Image

    work = tree / G
    write_images(work / "images", count=1, size=64, class_folders=False)  # images/img_0000.png, 64x64
    # a non-square one too: resize-longest-side, padding, and masks cropped back to 48x64
    pixels = np.random.default_rng(1).integers(0, 256, size=(48, 64, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(work / "images" / "wide_0000.png")
    (work / "tiny.py").write_text(TINY)
    (work / "predict.py").write_text(PREDICT)

    import sys

    sys.path.insert(0, str(tree))
    tiny = runpy.run_path(str(work / "tiny.py"))
    torch.manual_seed(0)
    sam = tiny["build_sam_vit_tiny"]()
    save_cuda_checkpoint(sam.state_dict(), tree / CKPT)


STEPS = [
    Step("amg", AMG.format(input=f"{G}/images/wide_0000.png", output=f"{G}/amg"),
         outputs=[f"{G}/amg/wide_0000/metadata.csv", f"{G}/amg/wide_0000/0.png"], timeout=300, env=ENV),
    Step("amg_rle", AMG.format(input=f"{G}/images", output=f"{G}/amg_rle") + " --convert-to-rle"
         " --min-mask-region-area 4",
         outputs=[f"{G}/amg_rle/img_0000.json", f"{G}/amg_rle/wide_0000.json"], timeout=300, env=ENV),
    Step("predict", RUN + f"{G}/predict.py {CKPT} {G}/images/wide_0000.png {G}/predict.npz",
         outputs=[f"{G}/predict.npz"], timeout=300, env=ENV),
    Step("export_onnx", RUN + "scripts/export_onnx_model.py --checkpoint " + CKPT + " --model-type vit_tiny"
         f" --output {G}/sam.onnx --return-single-mask",
         outputs=[f"{G}/sam.onnx"], timeout=300, env=ENV),
]
