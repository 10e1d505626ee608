"""Dependency manifests (DEP1xx): the rewritten files parse, keep comments and order,
report every change, and their markers evaluate as intended per platform."""

import ast
import difflib
import json
import re
import shutil
import tomllib

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from porter.engine.process import Options, migrate_text
from porter.project import requirements as reqs
from porter.rules.manifest_cuda_markers import PyprojectCudaOnly
from porter_test_utils import FIXTURES, ROOT, run_porter

SOURCE = FIXTURES / "manifests"
PIP_FILES = ["requirements.txt", "requirements-dev.txt"]
MANIFESTS = PIP_FILES + ["pyproject.toml", "setup.py", "environment.yml"]


def env(sys_platform, system, machine, python="3.11"):
    return {**default_environment(), "sys_platform": sys_platform, "platform_system": system,
            "platform_machine": machine, "os_name": "nt" if system == "Windows" else "posix",
            "python_version": python, "python_full_version": python + ".0"}


DARWIN_ARM64 = env("darwin", "Darwin", "arm64")
LINUX_CPU = env("linux", "Linux", "x86_64")  # a marker can't tell a CUDA machine from this one
LINUX_CUDA = env("linux", "Linux", "x86_64")
WINDOWS_CUDA = env("win32", "Windows", "AMD64")
OFF_MAC = [LINUX_CPU, LINUX_CUDA, WINDOWS_CUDA, env("linux", "Linux", "aarch64", "3.9"),
           env("linux", "Linux", "x86_64", "3.12")]


def installs(req: Requirement, environment: dict) -> bool:
    return req.marker is None or req.marker.evaluate({**environment, "extra": ""})


@pytest.fixture(scope="module")
def ported(tmp_path_factory):
    repo = tmp_path_factory.mktemp("manifests") / "repo"
    shutil.copytree(SOURCE, repo)
    report = repo.parent / "report.json"
    done = run_porter("migrate", repo, "--write", "--report", report, "-j", "1")
    assert done.returncode in (0, 1), done.stderr.decode()
    files = {f["path"].replace("\\", "/").rsplit("/", 1)[-1]: f for f in json.loads(report.read_text())["files"]}
    return repo, files


def _pip_requirements(text: str) -> dict[int, Requirement]:
    out = {}
    for site in reqs.requirements_sites(text):
        out[site.line] = Requirement(text[site.start:site.end])
    return out


def _toml_requirements(text: str) -> dict[int, list[tuple[str, Requirement]]]:
    out: dict = {}
    for site in reqs.pyproject_sites(text):
        out.setdefault(site.line, []).append((site.group, Requirement(text[site.start:site.end])))
    return out


def _comments(text: str) -> list[str]:
    return re.findall(r"(?:^|\s)(#.*)$", text, re.M)


@pytest.mark.parametrize("name", MANIFESTS)
def test_every_changed_line_is_reported_and_comments_and_order_are_kept(ported, name):
    repo, files = ported
    old = (SOURCE / name).read_text().splitlines()
    new = (repo / name).read_text().splitlines()
    assert len(new) == len(old)  # the marker form adds and removes no line
    changed = {i + 1 for i, (a, b) in enumerate(zip(old, new)) if a != b}
    reported = {f["line"] for f in files.get(name, {}).get("rewrites", [])}
    assert changed == reported
    assert _comments("\n".join(new)) == _comments("\n".join(old))
    for a, b in zip(old, new):  # every change only appends to a line's requirement
        if a != b:
            ops = [op for op in difflib.SequenceMatcher(None, a, b).get_opcodes() if op[0] != "equal"]
            assert all(op[0] == "insert" for op in ops) or "torch" in a, (a, b)


def test_rewritten_files_parse(ported):
    repo, _ = ported
    tomllib.loads((repo / "pyproject.toml").read_text())
    ast.parse((repo / "setup.py").read_text())
    yaml = pytest.importorskip("yaml")
    assert yaml.safe_load((repo / "environment.yml").read_text()) == \
        yaml.safe_load((SOURCE / "environment.yml").read_text())
    for name in PIP_FILES:
        _pip_requirements((repo / name).read_text())


def _pairs(repo):
    """(name, old requirement, new requirement) for every requirement of the manifests."""
    for name in PIP_FILES:
        old, new = _pip_requirements((SOURCE / name).read_text()), _pip_requirements((repo / name).read_text())
        assert old.keys() == new.keys()
        for line in old:
            yield name, old[line], new[line]
    old, new = _toml_requirements((SOURCE / "pyproject.toml").read_text()), \
        _toml_requirements((repo / "pyproject.toml").read_text())
    assert old.keys() == new.keys()
    for line in old:
        for (group, a), (_, b) in zip(old[line], new[line]):
            yield f"pyproject.toml[{group}]", a, b
    setup_old, setup_new = (ast.literal_eval(_install_requires(p)) for p in (SOURCE / "setup.py", repo / "setup.py"))
    for a, b in zip(setup_old, setup_new):
        yield "setup.py", Requirement(a), Requirement(b)


def _install_requires(path) -> str:
    call = next(n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Call))
    return ast.unparse(next(k.value for k in call.keywords if k.arg == "install_requires"))


def test_markers_evaluate_as_intended(ported):
    repo, _ = ported
    seen = 0
    for where, old, new in _pairs(repo):
        assert new.name == old.name and new.extras == old.extras and new.url == old.url
        cuda_only = reqs.is_cuda_only(new.name) and "cuda" not in where and "cu12" not in new.name
        for environment in OFF_MAC:  # Linux (with or without CUDA) and Windows: as before
            assert installs(new, environment) == installs(old, environment), (where, str(new))
        if cuda_only:
            seen += 1
            assert not installs(new, DARWIN_ARM64), (where, str(new))
            assert installs(new, LINUX_CUDA) == installs(old, LINUX_CUDA)
        else:
            assert installs(new, DARWIN_ARM64) == installs(old, DARWIN_ARM64), (where, str(new))
    assert seen >= 15


def test_torch_bound_is_never_raised_and_reported_only_where_it_excludes_what_the_port_needs(ported):
    repo, files = ported
    assert "torch>=1.13  # any CUDA build" in (repo / "requirements.txt").read_text()  # what CUDA installs
    assert '"torch>=2.0,<2.3",' in (repo / "pyproject.toml").read_text()  # a cap: reported
    codes = {(name, f["code"]) for name, file in files.items() for f in file.get("findings", [])}
    assert {("pyproject.toml", "DEP106"), ("requirements-dev.txt", "DEP106")} <= codes
    assert ("requirements.txt", "DEP106") not in codes


def test_cuda_wheel_sources_and_conda_packages_are_reported(ported):
    _, files = ported
    lines = {(name, f["code"], f["line"]) for name, file in files.items() for f in file.get("findings", [])}
    assert {("requirements.txt", "DEP105", 4), ("requirements-dev.txt", "DEP105", 8),
            ("pyproject.toml", "DEP105", 34), ("environment.yml", "DEP105", 15)} <= lines
    assert {("environment.yml", "DEP104", n) for n in (9, 10, 11, 16)} <= lines
    assert "requirements-base.txt" not in files or not files["requirements-base.txt"].get("findings")


def test_a_second_run_changes_nothing(ported, tmp_path):
    repo, _ = ported
    again = tmp_path / "again"
    shutil.copytree(repo, again)
    report = tmp_path / "again.json"
    run_porter("migrate", again, "--write", "--report", report, "-j", "1")
    assert not any(f.get("rewrites") for f in json.loads(report.read_text())["files"])


# -- the extra form of pyproject.toml ----------------------------------------

def _extra(text: str) -> str:
    """The extra form, chosen as a user does: ``dependencies = "extra"`` in the settings."""
    options = Options(rules=[PyprojectCudaOnly], dependencies="extra")
    return migrate_text(text.encode(), options, path="pyproject.toml").new.decode()


def test_extra_form_makes_plain_install_cuda_free_and_keeps_the_cuda_extra():
    # the fixture's one-line `cuda = [...]` can't take more lines: a multi-line one can
    old_text = (SOURCE / "pyproject.toml").read_text().replace(
        'cuda = ["nvidia-nccl-cu12"]', 'cuda = [\n    "nvidia-nccl-cu12",\n]')
    new_text = _extra(old_text)
    old, new = tomllib.loads(old_text)["project"], tomllib.loads(new_text)["project"]
    plain = [Requirement(r) for r in new["dependencies"]]
    assert not any(reqs.is_cuda_only(r.name) for r in plain)  # pip install . works on CPU-only Linux
    assert new["optional-dependencies"]["cuda"] == ["flash-attn>=2.5.8", 'xformers; python_version < "3.12"',
                                                     "nvidia-nccl-cu12"]
    assert sorted(new["dependencies"] + new["optional-dependencies"]["cuda"]) == \
        sorted(old["dependencies"] + old["optional-dependencies"]["cuda"])
    assert "# attention kernels" in new_text and _extra(new_text) == new_text


@pytest.mark.parametrize("before,after", [
    ('[project]\nname = "x"\ndependencies = [\n    "numpy",\n    "triton",  # kernels\n]\n\n[tool.ruff]\nx = 1\n',
     '[project]\nname = "x"\ndependencies = [\n    "numpy",\n]\n\n[project.optional-dependencies]\ncuda = [\n'
     '    "triton",  # kernels\n]\n\n[tool.ruff]\nx = 1\n'),
    ('[project]\ndependencies = [\n    "apex"\n]\n',
     '[project]\ndependencies = [\n]\n\n[project.optional-dependencies]\ncuda = [\n    "apex",\n]\n'),
    ('[project]\ndependencies = [\n  "xformers",\n]\n[project.optional-dependencies]\ncuda = [\n  "apex",\n]\n',
     '[project]\ndependencies = [\n]\n[project.optional-dependencies]\ncuda = [\n  "xformers",\n  "apex",\n]\n'),
    # a one-line array can't lose an element cleanly: the marker instead
    ('[project]\ndependencies = ["apex", "numpy"]\n',
     '[project]\ndependencies = ["apex; sys_platform != \'darwin\'", "numpy"]\n'),
])
def test_extra_form_cases(before, after):
    assert _extra(before) == after
    tomllib.loads(after)


# -- the pieces ---------------------------------------------------------------

@pytest.mark.parametrize("line", [
    "flash-attn", "flash-attn==2.5.8", 'flash-attn==2.5.8; python_version >= "3.9"',
    "xformers ; python_version < '3.12' or platform_machine == 'x86_64'",
    "apex[extra] @ https://example.com/apex.tar.gz", 'triton>=2; extra == "x" or python_version > "3"',
])
def test_platform_marker_is_true_exactly_off_mac_where_the_original_was(line):
    old = Requirement(line)
    new = Requirement(reqs.with_platform_marker(reqs.parse(line)))
    for environment in OFF_MAC:
        assert installs(new, environment) == installs(old, environment)
    assert not installs(new, DARWIN_ARM64)
    assert reqs.with_platform_marker(reqs.parse(str(new))) is None


@pytest.mark.parametrize("name,cuda_only", [
    ("Flash_Attn", True), ("flash.attn", True), ("NVIDIA-cudnn-cu12", True), ("cupy-cuda12x", True),
    ("nvidia-ml-py", False), ("flash-attention-jax", False), ("torch", False), ("triton", True),
])
def test_names_are_normalised(name, cuda_only):
    assert reqs.is_cuda_only(name) is cuda_only


@pytest.mark.parametrize("spec,verdict", [
    (">=1.10", ("raise", ">=2.5")), (">1.10,<3", ("raise", ">=2.5,<3")), ("~=2.1", ("raise", "~=2.5")),
    ("==1.13", ("pinned", None)), (">=1.10,<2.0", ("pinned", None)), ("~=2.1.0", ("pinned", None)),
    ("==2.1.*", ("pinned", None)), ("<2.5", ("pinned", None)), (">=2.5", ("ok", None)), ("==2.*", ("ok", None)),
    ("<=2.6", ("ok", None)), ("!=2.0", ("ok", None)),
])
def test_torch_bound(spec, verdict):
    assert reqs.torch_bound(spec) == verdict
    if verdict[0] == "raise":
        new = SpecifierSet(verdict[1])
        assert not new.contains("2.4.1") and new.contains(reqs.TORCH_MINIMUM_TEXT + ".0")
        assert set(new.filter(["2.5.0", "2.6.0", "2.7.1"])) <= set(SpecifierSet(spec).filter(["2.5.0", "2.6.0", "2.7.1"]))


def test_torch_minimum_is_what_the_runtime_calls():
    runtime = "".join(p.read_text() for p in (ROOT / "src" / "porter_runtime").rglob("*.py"))
    # torch.amp.custom_fwd(device_type=...) is torch 2.4, recommended_max_memory 2.5
    assert "torch.amp.custom_fwd" in runtime and "torch.mps.recommended_max_memory" in runtime
    assert reqs.TORCH_MINIMUM == (2, 5) and reqs.TORCH_MINIMUM_TEXT == "2.5"
