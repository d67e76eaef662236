"""The repository is what ships: a plain clone runs its own tests, benchmarks and scripts with nothing beside it."""

from __future__ import annotations

import re

from tests.paths import FIXTURES, ROOT

# a path that climbs out of the repository: ROOT.parent, "../shared", parents[N] past the root, …
_ESCAPES = re.compile(r"ROOT\.parent|\.\./shared/(fixtures|schemas)|\bSHARED\b")
_CHECKED = ("bridge", "tests", "bench", "scripts")


def test_no_code_reads_outside_the_repository() -> None:
    offenders = []
    for folder in _CHECKED:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path == ROOT / "tests" / "service" / "test_self_contained.py":
                continue
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if _ESCAPES.search(line):
                    offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


def test_every_fixture_the_tests_use_is_in_the_repository_and_described() -> None:
    readme = (FIXTURES / "README.md").read_text(encoding="utf-8")
    for sub in ("shop-capture", "tempo", "pyroscope"):
        assert (FIXTURES / sub).is_dir() and f"## {sub}/" in readme
    assert len(list((FIXTURES / "shop-capture").glob("*.bin"))) == 18
