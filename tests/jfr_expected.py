"""Reads grafana/jfr-parser's expected outputs (``parser/testdata/*_expected.txt.gz``: google/pprof's
``Profile.String()`` of what jfr-parser made of a recording, with ``Time`` as nanoseconds) into comparable form:
{(frames root first, label pairs sorted): [values…]}, summed over samples with the same stack and labels. Written
for the tests from the format itself (pprof's ``profile.go`` ``String``); it shares nothing with the bridge."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

_LOCATION = re.compile(r"^\s*(\d+): 0x[0-9a-f]+ M=\d+ (.*) :(-?\d+):\d+ s=\d+\(\)$")
_LABEL = re.compile(r"(\S+?):\[(.*?)\]")

Samples = dict[tuple[tuple[str, ...], tuple[tuple[str, str], ...]], list[int]]


def read_expected(path: Path) -> tuple[list[str], str, Samples]:
    """(sample types as ``type/unit``, period type as ``type unit``, samples)."""
    lines = gzip.decompress(path.read_bytes()).decode().split("\n")
    period = lines[0].removeprefix("PeriodType: ").strip()
    start = lines.index("Samples:")
    types = lines[start + 1].split()
    raw: list[tuple[list[int], list[int], tuple[tuple[str, str], ...]]] = []
    i = start + 2
    while not lines[i].startswith("Locations"):
        line = lines[i]
        if ":" in line and not line.startswith("                "):
            head, _, locs = line.partition(":")
            raw.append(([int(v) for v in head.split()], [int(x) for x in locs.split()], ()))
        elif line.strip():
            raw[-1] = (raw[-1][0], raw[-1][1], tuple(sorted(_LABEL.findall(line.strip()))))
        i += 1
    names: dict[int, str] = {}
    for line in lines[i + 1 :]:
        m = _LOCATION.match(line)
        if m:
            names[int(m.group(1))] = m.group(2)
        elif line.strip() and not line.startswith("Mappings") and "M=" not in line:
            break
    out: Samples = {}
    for values, locs, labels in raw:
        if not any(values):
            continue
        key = (tuple(names[loc] for loc in reversed(locs)), labels)
        got = out.setdefault(key, [0] * len(values))
        for n, v in enumerate(values):
            got[n] += v
    return types, period, out
