"""One bench script run from two checkouts of this repository, alternately, and every figure it prints as an
after/before ratio.

    .venv/bin/python bench/revisions.py --before DIR --after DIR [--rounds 3] [--timeout 1800] [--save DIR] \\
        -- bench/enrich.py --rounds 10

Each checkout runs its own copy of the script with its own interpreter (``DIR/.venv/bin/python DIR/SCRIPT ARGS``,
working directory ``DIR``, without ``PYTHONPATH``/``VIRTUAL_ENV`` from here), so each side imports its own
``bridge``. Rounds alternate the two and rotate which goes first (round 1: before, after; round 2: after, before; …):
drift of a shared machine over the run lands on both sides alike, and a round's two runs are neighbours in time.

Figures are read from the script's stdout, not from a format each script would have to adopt: every number on a line
(``12.3``, ``1,234``, ``0.91x``, ``+0.6``, ``5 MiB``) is a figure, unless a word other than a unit is glued to it (the
``3h`` of "3h vs 1h" is label text), and its label is the line with every number masked as ``#`` and this one marked
``[#]``. The same line of both revisions then has the same label, whatever the numbers (a line printed twice with the
same text is told apart by its occurrence). A figure's result is the median over rounds of that round's after/before
ratio, with the lowest and highest round beside it. A script's own load average lines are not figures. Figures equal in
every run of both sides (parameters, counts, targets) are not ratios of anything and are only counted; a label printed
by one side only is named as unpaired (a line one revision added or dropped). Target verdicts (``met``, ``MISSED``, …)
are masked as well, so a line whose verdict flips still pairs. The whole run's wall time is one figure too.

Bounded: each child has ``--timeout`` seconds and runs in its own session, so a timeout stops the servers it started
too. The benches themselves use 127.0.0.1 only; this runs nothing else.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchkit import loadavg  # noqa: E402

SIDES = ("before", "after")
WALL = "(whole run, wall s) [#]"
NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?![\d,]\d)")
# A number glued to a word is part of the label ("3h", "2xx"), unless the word is a unit of what benches measure.
GLUED = re.compile(r"[^\W\d_]+")
UNITS = frozenset({"x", "s", "ms", "us", "µs", "ns", "KiB", "MiB", "GiB", "KB", "MB", "GB"})
VERDICT = re.compile(r"\b(?:met|meets|MISSED|MISSES|OK)\b")  # the benches' target verdicts: not part of a label


@dataclass
class Run:
    """One child's run: its exit (None: stopped at the timeout), wall time and the figures on its stdout."""

    rc: int | None
    seconds: float
    figures: dict[str, float] = field(default_factory=dict)


def figures_of(text: str) -> dict[str, float]:
    """Every number on every line of ``text``, keyed by its label (see the module's notes)."""
    found: dict[str, float] = {}
    seen: dict[str, int] = {}
    for raw in text.splitlines():
        line = VERDICT.sub("<verdict>", " ".join(raw.split()))
        matches = [m for m in NUMBER.finditer(line) if unit_or_none(line, m.end())]
        if not matches or "load average" in line:  # the machine, not the code: printed beside the result instead
            continue
        cuts = [0, *(i for m in matches for i in m.span()), len(line)]
        parts = [line[cuts[k] : cuts[k + 1]] for k in range(0, len(cuts), 2)]
        line_key = "#".join(parts)
        seen[line_key] = seen.get(line_key, 0) + 1
        suffix = f" (occurrence {seen[line_key]})" if seen[line_key] > 1 else ""
        for i, match in enumerate(matches):
            label = "".join(part + ("[#]" if j == i else "#") for j, part in enumerate(parts[:-1])) + parts[-1]
            found[label + suffix] = float(match.group().replace(",", ""))
    return found


def unit_or_none(line: str, end: int) -> bool:
    """Whether the number ending at ``end`` is a figure: nothing glued to it, or a unit (see ``UNITS``)."""
    glued = GLUED.match(line, end)
    return glued is None or glued.group() in UNITS


def run_once(checkout: Path, script: str, args: list[str], timeout: float, save: Path | None, tag: str) -> Run:
    """``checkout``'s interpreter on ``checkout``'s copy of ``script``; its process group stopped at the timeout."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    command = [str(checkout / ".venv" / "bin" / "python"), str(checkout / script), *args]
    started = time.monotonic()
    proc = subprocess.Popen(
        command, cwd=checkout, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    )
    rc: int | None
    try:
        out, err = proc.communicate(timeout=timeout)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        stop_group(proc)
        out, err = proc.communicate()
        rc = None
    seconds = time.monotonic() - started
    stdout, stderr = out.decode(errors="replace"), err.decode(errors="replace")
    if save is not None:
        (save / f"{tag}.out").write_text(stdout)
        (save / f"{tag}.err").write_text(stderr)
        (save / f"{tag}.run").write_text(f"{'timeout' if rc is None else rc} {seconds:.3f}\n")
    return Run(rc, seconds, figures_of(stdout))


def reread(save: Path, tag: str) -> Run:
    """A run saved by ``--save`` (its stdout, and its exit and seconds), read again: a report with a newer parser."""
    rc, seconds = (save / f"{tag}.run").read_text().split()
    return Run(None if rc == "timeout" else int(rc), float(seconds), figures_of((save / f"{tag}.out").read_text()))


def stop_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the child's whole session (its servers too), SIGKILL to what is left after 20 s."""
    for sig, wait in ((signal.SIGTERM, 20.0), (signal.SIGKILL, 20.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def ratio_line(script: str, label: str, rounds: list[dict[str, Run]]) -> str | None:
    """The REVISIONS line of one figure, or None when it is the same number in every run (not a measurement)."""
    values = {side: [r[side].figures.get(label) for r in rounds] for side in SIDES}
    present = [v for side in SIDES for v in values[side] if v is not None]
    if len(set(present)) <= 1:
        return None
    ratios = [
        after / before
        for before, after in zip(values["before"], values["after"], strict=True)
        if before is not None and after is not None and before > 0 and after >= 0
    ]
    if not ratios:
        return f"REVISIONS {script} {label}: no round with a positive before figure and an after figure"
    paired = "" if len(ratios) == len(rounds) else f", {len(ratios)} of {len(rounds)} rounds paired"
    return (
        f"REVISIONS {script} {label}: after/before median {statistics.median(ratios):.2f} "
        f"(rounds {min(ratios):.2f}-{max(ratios):.2f}{paired})"
    )


def report(script: str, rounds: list[dict[str, Run]]) -> list[str]:
    """Every figure's line in first-printed order, then the constants counted and the unpaired labels named."""
    order: dict[str, None] = {}
    sides: dict[str, set[str]] = {side: set() for side in SIDES}
    for r in rounds:
        for side in SIDES:
            order.update(dict.fromkeys(r[side].figures))
            sides[side].update(r[side].figures)
    lines: list[str] = []
    constants, unpaired = 0, dict[str, None]()
    for label in order:
        if not (label in sides["before"] and label in sides["after"]):
            unpaired[f"{'before' if label in sides['before'] else 'after'} only: {label.replace('[#]', '#')}"] = None
            continue
        line = ratio_line(script, label, rounds)
        if line is None:
            constants += 1
        else:
            lines.append(line)
    lines.append(f"REVISIONS {script} {constants} figures equal in every run of both (parameters, counts): no ratio")
    lines += [f"REVISIONS {script} unpaired line, {text}" for text in unpaired]
    return lines


def parse(argv: list[str]) -> tuple[argparse.Namespace, str, list[str]]:
    """Our options before ``--``, the script and its arguments after it; a usage error exits 2."""
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0] if __doc__ else None,
        usage="revisions.py --before DIR --after DIR [--rounds N] [--timeout S] [--save DIR] -- SCRIPT [ARGS...]",
    )
    parser.add_argument("--before", type=Path, required=True, help="checkout of the earlier revision (with .venv)")
    parser.add_argument("--after", type=Path, required=True, help="checkout of the later revision (with .venv)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (each runs both once)")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds one child may run")
    parser.add_argument("--save", type=Path, help="directory for each run's stdout and stderr")
    parser.add_argument("--reread", action="store_true", help="run nothing: report the runs saved in --save")
    if "--" not in argv:
        parser.error("give the script after --: revisions.py --before A --after B -- bench/x.py [ARGS...]")
    cut = argv.index("--")
    args = parser.parse_args(argv[:cut])
    rest = argv[cut + 1 :]
    if not rest:
        parser.error("no script after --")
    if args.rounds < 1 or args.timeout <= 0:
        parser.error("--rounds must be >= 1 and --timeout > 0")
    if args.reread and args.save is None:
        parser.error("--reread reads the runs of --save DIR: give it")
    for side in SIDES:
        checkout: Path = getattr(args, side).resolve()
        setattr(args, side, checkout)
        if args.reread:  # nothing runs: the checkouts may be gone
            continue
        if not (checkout / ".venv" / "bin" / "python").exists():
            parser.error(f"--{side} {checkout}: no .venv/bin/python there (python3 -m venv .venv; pip install -e .)")
        if not (checkout / rest[0]).is_file():
            parser.error(f"--{side} {checkout}: no {rest[0]} at that revision")
    return args, rest[0], rest[1:]


def main(argv: list[str] | None = None) -> int:
    args, script, script_args = parse(sys.argv[1:] if argv is None else argv)
    name, stem = Path(script).name, Path(script).stem
    load = args.save / f"{stem}.load" if args.save is not None else None
    if args.save is not None and not args.reread:
        args.save.mkdir(parents=True, exist_ok=True)
    saved_load = load.read_text().splitlines() if args.reread and load and load.exists() else ["unknown", "unknown"]
    started_load = saved_load[0] if args.reread else loadavg()
    print(f"REVISIONS {name} load average before: {started_load}", flush=True)
    rounds: list[dict[str, Run]] = []
    for number in range(1, args.rounds + 1):
        got: dict[str, Run] = {}
        for side in SIDES if number % 2 else SIDES[::-1]:
            tag = f"{stem}.round{number}.{side}"
            if args.reread:
                run = reread(args.save, tag)
            else:
                run = run_once(getattr(args, side), script, script_args, args.timeout, args.save, tag)
            run.figures[WALL] = run.seconds
            got[side] = run
            status = "timed out" if run.rc is None else f"exit {run.rc}"
            print(f"round {number} {side}: {status}, {run.seconds:.1f} s, {len(run.figures)} figures", flush=True)
        rounds.append(got)
    for line in report(name, rounds):
        print(line)
    ended_load = saved_load[1] if args.reread else loadavg()
    if load is not None and not args.reread:
        load.write_text(f"{started_load}\n{ended_load}\n")
    print(f"REVISIONS {name} load average after: {ended_load}", flush=True)
    failed = any(r[side].rc != 0 for r in rounds for side in SIDES)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
