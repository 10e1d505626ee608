"""PT605 knows an array's dtype from the code around it (porter.rulebase.families.dtypes.numpy_dtypes):
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


def pt605(code: str) -> list[tuple[int, str]]:
    """(line, "finding" | "note") for each PT605 result."""
    result = migrate_source(dedent(code).encode(), Options(rules=[FromNumpyToDevice]), path="m.py")
    return [(f.line, "note" if f.severity == "info" else "finding") for f in result.findings if f.code == "PT605"]


def test_an_array_whose_dtype_nothing_shows_is_a_note_and_a_float64_maker_a_finding():
    # yolov5's DetectMultiBackend: the CoreML arm (the Mac's own backend) makes float64
    # with .astype(float); the other arms' outputs are whatever the backend gives.
    assert pt605("""\
        import numpy as np
        import torch


        class DetectMultiBackend:
            def forward(self, im):
                if self.coreml:
                    y = self.model.predict({"image": im})
                    conf, cls = y["confidence"].max(1), y["confidence"].argmax(1).astype(float)
                    y = np.concatenate((y["coordinates"], conf.reshape(-1, 1), cls.reshape(-1, 1)), 1)
                else:
                    y = self.session.run(self.output_names, {self.input_name: im})
                return self.from_numpy(y)

            def from_numpy(self, x):
                return torch.from_numpy(x).to(self.device) if isinstance(x, np.ndarray) else x

            def load_labels(self, path):
                with np.load(path) as f:
                    return torch.from_numpy(f["labels"]).to(self.device)
        """) == [(16, "finding"), (20, "note")]


def test_a_parameter_is_float64_only_where_a_caller_in_the_module_passes_one():
    code = """\
        import numpy as np
        import torch


        def to_device(arr, device):
            return torch.from_numpy(arr).to(device)


        def main(device):
            weights = np.ones(10, dtype=np.float32)
            to_device(weights, device)
            {extra}
        """
    assert pt605(code.format(extra="")) == [(6, "note")]
    assert pt605(code.format(extra="to_device(np.linspace(0, 1, 10), device)")) == [(6, "finding")]


def test_a_nested_helpers_return_and_a_generator_draw_are_followed():
    # consistency_models' karras_diffusion: an orthogonal matrix from np.linalg.qr
    assert pt605("""\
        import numpy as np
        import torch as th


        def colorize(x, device):
            def obtain_orthogonal_matrix():
                vector = np.asarray([0.2989, 0.5870, 0.1140])
                vector = vector / np.linalg.norm(vector)
                matrix = np.eye(3)
                matrix[:, 0] = vector
                return np.linalg.qr(matrix)[0]

            Q = th.from_numpy(obtain_orthogonal_matrix()).to(device).to(th.float32)
            rng = np.random.default_rng(0)
            noise = th.from_numpy(rng.standard_normal(x.shape, dtype=np.float32)).to(device)
            z = th.from_numpy(rng.standard_normal(x.shape)).to(device)
            return Q, noise, z
        """) == [(13, "finding"), (16, "finding")]


def test_a_helper_elsewhere_in_the_module_is_read_whatever_the_engine_leaves_out():
    code = """\
        import numpy as np
        import torch


        def noise(n):
            return np.random.randn(n, 4)


        class Other:
            def f(self):
                return 1


        def main(device):
            return torch.from_numpy(noise(3)).to(device)
        """
    for segments in (True, False):
        result = migrate_source(dedent(code).encode(), Options(rules=[FromNumpyToDevice]), path="m.py",
                                segments=segments)
        assert [(f.line, f.severity) for f in result.findings] == [(15, "")], segments
