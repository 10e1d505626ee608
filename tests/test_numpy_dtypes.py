"""PT605 knows an array's dtype from the code around it (porter.rulebase.families.numpy_dtypes):
a PIL image's pixels are never float64, and a name reassigned from itself
(``img = img.transpose(2, 0, 1)``) keeps what its other assignments make."""

from textwrap import dedent

from porter.engine.process import Options, migrate_source
from porter.rules.from_numpy_to_device import FromNumpyToDevice


def pt605_lines(code: str) -> list[int]:
    result = migrate_source(dedent(code).encode(), Options(rules=[FromNumpyToDevice]), path="m.py")
    return [f.line for f in result.findings if f.code == "PT605"]


def test_pil_pixels_are_not_float64_through_image_methods_and_a_transpose():
    assert pt605_lines("""\
        import numpy as np
        import torch
        from PIL import Image

        def load(path, device):
            img = Image.open(path).convert("RGB").resize((64, 64))
            arr = np.asarray(img)
            arr = arr.transpose(2, 0, 1)
            return torch.from_numpy(arr).to(device)
        """) == []


def test_an_image_reassigned_to_something_else_or_scaled_pixels_stay_findings():
    assert pt605_lines("""\
        import numpy as np
        import torch
        from PIL import Image

        def load(path, device, transform):
            img = Image.open(path)
            img = transform(img)
            return torch.from_numpy(np.array(img)).to(device)

        def scaled(path, device):
            arr = np.array(Image.open(path))
            arr = arr / 255.0
            return torch.from_numpy(arr).to(device)

        def divided(path, device):
            arr = np.array(Image.open(path))
            arr /= 255
            return torch.from_numpy(arr).to(device)
        """) == [8, 13, 18]
