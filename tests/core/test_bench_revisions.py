"""bench/revisions.py on two fake checkouts: each a tmp dir with a ``.venv/bin/python`` (a link to this interpreter)
and a tiny "bench" that prints what the real ones print. The figures pair up by their masked line, the ratio is the
median of each round's after/before, parameters are counted not ratioed, a line of one side only is named."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.faketime import both_clocks_ahead

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "bench" / "revisions.py"

# The round number comes from a counter file beside the script, so each run of one side prints its own figures.
FAKE = """\
import pathlib, sys
here = pathlib.Path(__file__).parent
count = here / "runs"
n = int(count.read_text()) + 1 if count.exists() else 1
count.write_text(str(n))
work = {work}[n - 1]
print(f"config: {{sys.argv[1]}} spans, 2h window")
print(f"  encode   median {{work:8.2f}} ms  p99 {{work * 2:8.2f}} ms")
print(f"RATIO encode / tree: median {{work / 10:.2f}}x (target <= 1.5x)")
print(f"throughput {{1000 * 10 / work:,.0f}} spans/s")
print(f"throughput {{500 * 10 / work:,.0f}} spans/s")
print(f"under 15: {{'met' if work < 15 else 'MISSED'}} with {{work}}")
print(f"load average at start: {{work / 7:.2f}} 0.50 0.25")
{extra}
"""


def checkout(tmp: Path, name: str, work: list[float], extra: str = "") -> Path:
    root = tmp / name
    (root / ".venv" / "bin").mkdir(parents=True)
    (root / ".venv" / "bin" / "python").symlink_to(sys.executable)
    (root / "bench").mkdir()
    (root / "bench" / "fake.py").write_text(FAKE.format(work=work, extra=extra))
    return root


def run(*args: str) -> subprocess.CompletedProcess[str]:
    # the tool waits on its children with timeouts (time.sleep), which libfaketime's wall-clock-only mode breaks
    env = both_clocks_ahead()
    return subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True, timeout=60, env=env)


def test_figures_pair_by_masked_line_and_ratio_per_round(tmp_path: Path) -> None:
    before = checkout(tmp_path, "before", [10.0, 20.0, 10.0], extra='print("old only: 7 things")')
    after = checkout(tmp_path, "after", [5.0, 10.0, 30.0], extra='print("new only: 9 things")')
    got = run(
        "--before", str(before), "--after", str(after), "--rounds", "3", "--save", str(tmp_path / "raw"),
        "--", "bench/fake.py", "1000",
    )  # fmt: skip
    assert got.returncode == 0, got.stderr
    lines = {line.split(": after/before")[0]: line for line in got.stdout.splitlines() if "after/before" in line}
    # Per round after/before: 0.5, 0.5, 3.0 -> median 0.50, range 0.50-3.00 (a median of ratios, not of values).
    labels = ("encode median [#] ms p99 # ms", "RATIO encode / tree: median [#]x", "under #: <verdict> with [#]")
    for label in labels:  # the verdict flips (30 > 15 in round 3): masked, the line still pairs
        assert next(v for k, v in lines.items() if k.startswith(f"REVISIONS fake.py {label}")).endswith(
            "after/before median 0.50 (rounds 0.50-3.00)"
        )
    # Throughput is the inverse (2.0, 2.0, 0.33); the second line with the same text pairs with its own occurrence.
    for label in ("throughput [#] spans/s", "throughput [#] spans/s (occurrence 2)"):
        assert lines[f"REVISIONS fake.py {label}"].endswith("after/before median 2.00 (rounds 0.33-2.00)")
    assert "REVISIONS fake.py (whole run, wall s) [#]" in lines
    assert not any("load average at start" in line for line in got.stdout.splitlines())  # the machine, not a figure
    # 1000 spans, 1.5x, under 15: the same in every run of both, counted and not ratioed ("2h" is glued to a word,
    # not a unit: label text, not a fourth).
    assert "REVISIONS fake.py 3 figures equal in every run of both (parameters, counts): no ratio" in got.stdout
    assert "REVISIONS fake.py unpaired line, before only: old only: # things" in got.stdout
    assert "REVISIONS fake.py unpaired line, after only: new only: # things" in got.stdout
    assert got.stdout.splitlines()[0].startswith("REVISIONS fake.py load average before: ")
    assert got.stdout.splitlines()[-1].startswith("REVISIONS fake.py load average after: ")
    # Alternating, first side rotating: before, after | after, before | before, after.
    order = [line.split(":")[0] for line in got.stdout.splitlines() if line.startswith("round ")]
    sides = ["before", "after", "after", "before", "before", "after"]
    assert order == [f"round {i // 2 + 1} {side}" for i, side in enumerate(sides)]
    assert (tmp_path / "raw" / "fake.round2.after.out").read_text().splitlines()[1].split()[2] == "10.00"
    assert int((before / "bench" / "runs").read_text()) == 3 and int((after / "bench" / "runs").read_text()) == 3
    # The saved runs read again: the same report, nothing run (the checkouts may be gone by then).
    (before / "bench" / "fake.py").unlink()
    again = run(
        "--before", str(before), "--after", str(after), "--rounds", "3", "--save", str(tmp_path / "raw"), "--reread",
        "--", "bench/fake.py", "1000",
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert [line for line in again.stdout.splitlines() if "wall" not in line] == [
        line for line in got.stdout.splitlines() if "wall" not in line
    ]
    assert int((before / "bench" / "runs").read_text()) == 3


def test_a_script_missing_at_one_revision_is_a_usage_error(tmp_path: Path) -> None:
    before = checkout(tmp_path, "before", [1.0])
    after = checkout(tmp_path, "after", [1.0])
    (before / "bench" / "fake.py").unlink()
    got = run("--before", str(before), "--after", str(after), "--", "bench/fake.py", "1")
    assert got.returncode == 2
    assert f"--before {before}: no bench/fake.py at that revision" in got.stderr.strip().splitlines()[-1]
    assert not (after / "bench" / "runs").exists()
    got = run("--before", str(before), "--after", str(after), "--")
    assert got.returncode == 2 and "no script after --" in got.stderr
