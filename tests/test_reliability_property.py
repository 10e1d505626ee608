"""Property (issue 29): over random trees, with the owner saving random files while porter
writes, a --write run never loses an edit, never writes outside the root, and leaves the
vendored runtime whole or absent. In process (porter.engine.run with apply's writer): fast."""

import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from porter.files import safe_io
from porter.files.apply import apply_changes, runtime_files
from porter.engine.options import Options
from porter.engine.registry import all_rules
from porter.engine.run import RunConfig, run

BODIES = {
    "cuda": b"import torch\nx = torch.ones(1).cuda()\n",
    "device": b"import torch\nd = torch.device('cuda')\n",
    "clean": b"import os\nprint(os.sep)\n",
}

trees = st.lists(
    st.tuples(st.sampled_from(["", "a/", "a/b/", "c/"]), st.sampled_from(sorted(BODIES)), st.booleans()),
    min_size=1, max_size=8,
)


@settings(max_examples=int(os.environ.get("PORTER_RELIABILITY_EXAMPLES", "15")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tree=trees, link_out=st.booleans())
def test_random_trees_and_edits_lose_nothing_and_stay_inside(tmp_path_factory, tree, link_out):
    base = tmp_path_factory.mktemp("t")
    root, outside = base / "repo", base / "outside"
    outside.mkdir()
    (outside / "victim.py").write_bytes(BODIES["cuda"])
    files, edited = {}, {}
    for i, (folder, kind, edit) in enumerate(tree):
        rel = f"{folder}m{i}.py"
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(BODIES[kind])
        files[rel] = BODIES[kind]
        if edit:
            edited[rel] = BODIES[kind] + f"# the owner's edit {i}\n".encode()
    if link_out:
        (root / "c").mkdir(exist_ok=True)
        (root / "c" / "out").symlink_to(outside, target_is_directory=True)

    def owner_saves(rel):
        if rel in edited:
            (root / rel).write_bytes(edited[rel])

    failed = []
    config = RunConfig(paths=[root], root=root, options=Options(rules=all_rules()), jobs=1, write=True)
    old_hook = safe_io.before_replace
    safe_io.before_replace = owner_saves
    try:
        run(config, sink=lambda changes: failed.extend(apply_changes(root, changes)))
    finally:
        safe_io.before_replace = old_hook

    assert (outside / "victim.py").read_bytes() == BODIES["cuda"]
    assert sorted(p.name for p in outside.iterdir()) == ["victim.py"]
    for rel, old in files.items():
        now = (root / rel).read_bytes()
        if rel in edited and now != old:
            assert now == edited[rel], rel  # the owner's save is what is there, never porter's
        elif now != old:
            assert b"porter_runtime" in now, rel
    vendored = root / "porter_runtime"
    if vendored.exists():
        names = {p.relative_to(vendored).as_posix() for p in vendored.rglob("*") if p.is_file()}
        assert "VENDORED.txt" in names and "PORTER-PARTIAL.txt" not in names
        assert names <= set(runtime_files())
    assert not [p for p in root.rglob("*") if "porter-partial" in p.name or "porter-tmp" in p.name]
