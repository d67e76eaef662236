"""External programs some tests drive for real (Debian's chromium, golang-go). Missing one skips the test with the
reason on a developer's machine, and fails it when ``CI`` is set: CI must run them (``.ci/run`` installs them)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Final, NoReturn

import pytest


def require_file(path: Path, *, package: str, purpose: str) -> Path:
    """``path`` when it exists (a module or data file a Debian package installs); otherwise skip, or fail under CI."""
    if path.exists():
        return path
    _missing(f"{path} is not installed (apt-get install -y {package}); needed to {purpose}")


def _missing(reason: str) -> NoReturn:
    if os.environ.get("CI"):
        pytest.fail(f"{reason}; CI is set, so this test must run")
    pytest.skip(reason)


def require_tool(*names: str, package: str, purpose: str) -> str:
    """The path of the first of ``names`` on PATH; otherwise skip (or fail under CI) saying how to install it."""
    for name in names:
        found = shutil.which(name)
        if found:
            return found
    _missing(f"{names[0]} is not installed (apt-get install -y {package}); needed to {purpose}")


# Go 1.26 where the machine image puts it (and CI's), else Debian's golang-go on PATH
GO_CANDIDATES: Final = ("/usr/local/go/bin/go",)


def require_go(purpose: str) -> str:
    """The Go toolchain that builds the tests' Go programs (tests/sdk/go needs Go >= 1.26); otherwise skip (or fail
    under CI) saying how to get it."""
    for candidate in GO_CANDIDATES:
        if os.access(candidate, os.X_OK):
            return candidate
    return require_tool("go", package="golang-go", purpose=purpose)


def go_pprof_top(profile: Path, work_dir: Path, *args: str) -> str:
    """``go tool pprof -top [args] profile``'s output (``go_pprof``)."""
    return go_pprof(profile, work_dir, "-top", *args)


def go_pprof(profile: Path, work_dir: Path, *args: str) -> str:
    """``go tool pprof [args] profile``'s output, from the Go toolchain found on PATH (Debian's golang-go puts it
    in /usr/bin, an upstream Go install in /usr/local/go/bin: the PATH given to the child is the one it was found on).
    Fails the test with pprof's own message when it cannot read the file."""
    import subprocess

    go = require_tool("go", package="golang-go", purpose=f"read {profile.name} with go tool pprof")
    done = subprocess.run(
        [go, "tool", "pprof", *args, str(profile)],
        capture_output=True,
        text=True,
        timeout=600,
        # the user's build cache: Go builds `go tool pprof` on first use (minutes on a loaded 2-core machine) and
        # keeps it there; HOME (where pprof would save) is the test's own directory
        env={
            "HOME": str(work_dir),
            "PATH": os.environ.get("PATH", ""),
            "GOCACHE": os.environ.get("GOCACHE") or str(Path.home() / ".cache" / "go-build"),
        },
    )
    assert done.returncode == 0, done.stderr
    return done.stdout
