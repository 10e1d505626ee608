"""A .gitignore's rules are looked up by name, path and ending where they are plain, and
tried one by one only where they are globs: the verdict is the same as trying every rule
(the last match decides), checked here on random rules and paths."""

import random
from pathlib import Path

from porter.engine.discover import GitIgnore

PARTS = ["build", "a", "b.py", "x.tmp", "data", "out", "m.py", ".tmp", "c"]
RULES = ["build", "build/", "/build", "a/b.py", "*.tmp", "*.py", "!m.py", "!*.py", "data/", "!data/", "/out/",
         "**/c", "c/**", "a/*.py", "?.py", "[bc].py", "*", "!build", "x.t?p", "/a/", "\\#x", "*.py/", ".tmp"]


def _brute(ignore: GitIgnore, path: Path, is_dir: bool):
    rel = path.relative_to(ignore.base).as_posix()
    verdict = None
    for pattern, negate, dir_only in ignore.rules:
        if dir_only and not is_dir:
            continue
        if pattern.match(rel):
            verdict = not negate
    return verdict


def test_the_index_decides_as_every_rule_would():
    rng = random.Random(3)
    base = Path("/repo")
    for _ in range(600):
        ignore = GitIgnore(base, [rng.choice(RULES) for _ in range(rng.randint(1, 8))])
        for _ in range(20):
            path = base.joinpath(*[rng.choice(PARTS) for _ in range(rng.randint(1, 4))])
            is_dir = rng.random() < 0.5
            assert ignore.ignored(path, is_dir) == _brute(ignore, path, is_dir), (ignore.rules, path, is_dir)


def test_a_large_gitignore_is_looked_up_not_scanned():
    lines = [f"build_{i}/" for i in range(50_000)] + [f"*.tmp{i}" for i in range(50_000)] + ["!keep.tmp7"]
    ignore = GitIgnore(Path("/repo"), lines)
    assert not ignore._others  # every rule is plain: none is tried one by one
    assert ignore.ignored(Path("/repo/x/build_49999"), is_dir=True) is True
    assert ignore.ignored(Path("/repo/x/build_49999"), is_dir=False) is None
    assert ignore.ignored(Path("/repo/a.tmp123"), is_dir=False) is True
    assert ignore.ignored(Path("/repo/keep.tmp7"), is_dir=False) is False
