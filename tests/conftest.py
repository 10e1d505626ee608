import os
import shutil
from pathlib import Path

import pytest

# One torch thread per process. The suite runs on two xdist workers (pyproject's addopts), each
# starting torch subprocesses (fixture trainings, porter verify's children); at torch's default
# of one thread per core they oversubscribe the cores and spend their time spinning: training a
# fixture took about three times the CPU. Set before anything imports torch, and inherited by
# every subprocess the tests start; a value already in the environment is kept.
os.environ.setdefault("OMP_NUM_THREADS", "1")


def _compile_porter() -> None:
    """Byte-compile porter's own source once. The tests start hundreds of ``porter``
    processes; where the environment sets PYTHONDONTWRITEBYTECODE (this project's machines
    do), none of them may write a ``.pyc``, so each compiled porter's hundred modules from
    source again: about 0.3 s of CPU a process. Reading a ``.pyc`` is still allowed, so
    writing them here once serves every process; an up-to-date file is skipped."""
    import compileall

    source = Path(__file__).resolve().parent.parent / "src"
    if source.is_dir():
        compileall.compile_dir(source, quiet=2, workers=1)


_compile_porter()


@pytest.fixture
def copy_tree(tmp_path):
    def copy(src: Path, name: str = "repo") -> Path:
        dest = tmp_path / name
        shutil.copytree(src, dest, symlinks=True)
        return dest
    return copy


# -- how xdist shares the tests out (pyproject: -n 2 --dist loadfile) ------------------------
#
# A test file stays on one worker (its module fixtures are made once), except the files in
# SPLIT, whose slow tests are independent (no module fixture, or a cheap one): each of their
# tests is handed out on its own. The slowest work is handed out first, so that the two workers
# end together instead of one running a long file alone at the end.

#: Files whose tests are handed out one by one.
SPLIT = {"tests/test_fixture_repos.py", "tests/test_verify_emulate.py", "tests/test_verify_run.py"}

#: Roughly how long each took on CI's two cores (seconds), to hand out the slowest first: a
#: test of a SPLIT file by its node id, any other file as a whole. What is not listed follows,
#: in collection order. Only the order depends on these numbers, never a result.
COST = {
    "tests/test_fixture_repos.py::test_fixture_repo_ports_and_runs[chat_lm]": 144,
    "tests/test_fixture_repos.py::test_fixture_repo_ports_and_runs[cifar_cnn]": 124,
    "tests/test_fixture_repos.py::test_fixture_repo_ports_and_runs[llm_scratch]": 109,
    "tests/test_fixture_repos.py::test_fixture_repo_ports_and_runs[paper_repro]": 99,
    "tests/test_fixture_repos.py::test_fixture_repo_ports_and_runs[multipkg]": 88,
    "tests/test_fixture_repos.py::test_fixture_repo_ports_and_runs[hrm_reasoning]": 52,
    "tests/test_fixture_repos.py::test_fixture_repo_ports_and_runs[act_probe]": 44,
    "tests/test_verify_run.py::test_accelerate_launch_failures_are_mapped_to_the_script": 62,
    "tests/test_verify_run.py::test_torchrun_rank_failure_is_mapped_to_its_line_and_named": 53,
    "tests/test_verify_run.py::test_a_real_mpiexec_rank_failure_is_read_from_its_tagged_lines": 30,
    "tests/test_verify_run.py::test_torchrun_missing_module_is_a_missing_dependency": 29,
    "tests/test_verify_run.py::test_interleaved_mpi_ranks_are_read_apart": 26,
    "tests/test_verify_emulate.py::test_a_gloo_collective_of_a_device_tensor_fails_at_its_line": 53,
    "tests/test_verify_emulate.py::test_a_missing_mps_kernel_fails_at_its_line": 53,
    "tests/test_verify_emulate.py::test_float64_on_the_device_fails_at_its_line_and_is_named": 52,
    "tests/test_verify_emulate.py::test_a_lambda_in_a_dataset_fails_with_spawn_as_on_macos": 46,
    "tests/test_verify_emulate.py::test_a_flag_that_picks_legacy_cuda_types_keeps_a_mac_on_the_cpu": 32,
    "tests/test_verify_emulate.py::test_with_the_fallback_the_summary_lists_the_operators": 28,
    "tests/test_verify_emulate.py::test_the_text_output_labels_the_emulation_and_lists_the_fallbacks": 25,
    "tests/test_verify_emulate.py::test_a_float64_buffer_of_a_module_moved_to_the_device_runs": 25,
    "tests/test_verify_emulate.py::test_ddp_in_a_one_process_group_runs_on_the_cpu_of_a_mac": 23,
    "tests/test_verify_emulate.py::test_a_dataloader_told_to_pin_runs_unpinned_as_on_a_mac": 25,
    "tests/test_verify_emulate.py::test_a_device_kept_from_before_the_process_group_is_still_mps": 60,
    "tests/test_safe_writes.py": 110,
    "tests/test_emulate_cuda.py": 150,
    "tests/test_lightning.py": 40,
    "tests/test_fit.py": 100,
    "tests/test_harm.py": 90,
    "tests/test_layouts_fixture.py": 60,
    "tests/test_import_cleanup.py": 55,
    "tests/test_harm_property.py": 47,
    "tests/test_flow_classes_fixture.py": 47,
    "tests/test_triton_import.py": 45,
    "tests/test_xformers_vit.py": 36,
    "tests/test_port_only_what_cuda_needs.py": 32,
    "tests/test_idioms_fixture.py": 32,
    "tests/runtime/test_rt_gloo_teardown.py": 27,
    "tests/test_mpi_loader_spawn.py": 26,
    "tests/test_integration_workflow.py": 26,
    "tests/test_mps_ready_fixture.py": 26,
    "tests/test_prefilter_equivalence.py": 26,
}


def _file(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def _cost(nodeid: str) -> float:
    file = _file(nodeid)
    return COST.get(nodeid, 0) if file in SPLIT else COST.get(file, 0)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """On an xdist worker, the slowest first (a file not in SPLIT stays in one piece): the
    scheduler below hands work out in this order. A run without xdist keeps pytest's order."""
    if not hasattr(config, "workerinput"):
        return
    order = {id(item): n for n, item in enumerate(items)}
    items.sort(key=lambda item: (-_cost(item.nodeid), order[id(item)]))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """--dist loadfile, with SPLIT's tests handed out one by one and the order above kept."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SlowestFirst(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            file = _file(nodeid)
            return nodeid if file in SPLIT else file

    config.option.loadscopereorder = False  # xdist would put the files with the most tests first
    return SlowestFirst(config, log)
