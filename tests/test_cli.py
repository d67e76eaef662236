from __future__ import annotations

import subprocess
import sys

import pytest

from bridge.cli import EXIT_USAGE, main
from bridge.config import FIELDS


@pytest.mark.parametrize(
    ("argv", "env", "expected"),
    [
        (["serve", "--listen", "localhost:x"], {}, "PROFILE_BRIDGE_LISTEN has value 'localhost:x': not a valid port"),
        (["serve"], {"PROFILE_BRIDGE_ENRICH": "nope"}, "PROFILE_BRIDGE_ENRICH has value 'nope'"),
        (["serve", "--pyroscope-url", "ftp://x"], {}, "PROFILE_BRIDGE_PYROSCOPE_URL has value 'ftp://x'"),
        (["serve", "--standalone", "--proxy"], {}, "not allowed with argument"),
        (["frobnicate"], {}, "invalid choice"),
        (["--config", "/nonexistent/bridge.toml", "serve"], {}, "--config has value '/nonexistent/bridge.toml'"),
        (["resolve", "abc"], {}, "the following arguments are required: SPAN_ID"),
    ],
)
def test_bad_usage_is_one_line_and_exit_2(
    argv: list[str], env: dict[str, str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv, env) == EXIT_USAGE
    err = capsys.readouterr().err
    assert expected in err
    assert err.count("\n") == 1, err
    assert "Traceback" not in err


def test_serve_help_documents_every_setting() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "bridge", "serve", "--help"], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0
    for spec in FIELDS:
        assert spec.key in proc.stdout


def test_serve_reports_a_port_in_use_in_one_line() -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        proc = subprocess.run(
            [sys.executable, "-m", "bridge", "serve", "--listen", f"127.0.0.1:{port}"],
            capture_output=True, text=True, timeout=60, check=False,
            env={"PATH": "/usr/bin:/bin", "PROFILE_BRIDGE_OTLP_GRPC_ENABLED": "false",
                 "PROFILE_BRIDGE_PYROSCOPE_URL": "http://127.0.0.1:9", "PROFILE_BRIDGE_TEMPO_URL": "http://127.0.0.1:9"},
        )
    assert proc.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_failed_start_is_one_line_without_a_traceback(tmp_path: object) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        busy = sock.getsockname()[1]
        proc = subprocess.run(
            [sys.executable, "-m", "bridge", "serve", "--standalone", "--listen", "127.0.0.1:0",
             "--otlp-grpc-listen", f"127.0.0.1:{busy}", "--data-dir", str(tmp_path)],
            capture_output=True, text=True, timeout=60, check=False, env={"PATH": "/usr/bin:/bin"},
        )
    assert proc.returncode == 1, proc.stderr
    assert "cannot start (standalone mode)" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert "athrow" not in proc.stderr
