from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from bridge.cli import EXIT_USAGE, build_parser, main
from bridge.config import FIELDS
from tests.serving import closed_port


@pytest.mark.parametrize(
    ("argv", "env", "expected"),
    [
        (
            ["serve", "--listen", "localhost:x"],
            {},
            "--listen has value 'localhost:x': not a valid port (the flag of PROFILE_BRIDGE_LISTEN)",
        ),
        (["serve", "--listen", "x"], {}, "--listen has value 'x': not HOST:PORT"),
        (["serve", "--otlp-grpc-listen", "4317"], {}, "--otlp-grpc-listen has value '4317': not HOST:PORT"),
        (["serve", "--data-dir", " "], {}, "--data-dir has value ' ': must not be empty"),
        (["serve"], {"PROFILE_BRIDGE_LISTEN": "x"}, "bridge: PROFILE_BRIDGE_LISTEN has value 'x': not HOST:PORT"),
        (["serve"], {"PROFILE_BRIDGE_ENRICH": "nope"}, "PROFILE_BRIDGE_ENRICH has value 'nope'"),
        (["serve", "--pyroscope-url", "ftp://x"], {}, "--pyroscope-url has value 'ftp://x'"),
        (["serve", "--config", "/nonexistent/bridge.toml"], {}, "--config has value '/nonexistent/bridge.toml'"),
        (["demo", "--to", "ftp://x"], {}, "profile-bridge demo: argument --to: 'ftp://x': not an http(s) URL"),
        (["demo", "--frontend-port", "70000"], {}, "argument --frontend-port: '70000': not a port"),
        (["demo", "--load-interval", "0"], {}, "argument --load-interval: '0': not a positive number of seconds"),
        (["provision", "--out", "/tmp/x", "--bridge-url", "bridge:4041"], {}, "argument --bridge-url: 'bridge:4041'"),
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


def _error_lines(stderr: str) -> list[str]:
    """The error lines of the CLI (the log lines before them have a timestamp, gRPC's own start with E)."""
    return [line for line in stderr.splitlines() if line.startswith("profile-bridge")]


def test_serve_reports_a_port_in_use_in_one_line() -> None:

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        proc = subprocess.run(
            [sys.executable, "-m", "bridge", "serve", "--listen", f"127.0.0.1:{port}"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env={
                "PATH": "/usr/bin:/bin",
                "PROFILE_BRIDGE_OTLP_GRPC_ENABLED": "false",
                "PROFILE_BRIDGE_PYROSCOPE_URL": "http://127.0.0.1:9",
                "PROFILE_BRIDGE_TEMPO_URL": "http://127.0.0.1:9",
            },
        )
    assert proc.returncode == 1
    assert _error_lines(proc.stderr) == [
        f"profile-bridge: cannot listen on 127.0.0.1:{port}: Address already in use: --listen HOST:PORT "
        "(PROFILE_BRIDGE_LISTEN) moves the bridge's HTTP port"
    ]
    assert "--listen HOST:PORT (PROFILE_BRIDGE_LISTEN) moves the bridge's HTTP port" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.slow  # `serve` in its own process on a busy port; only its start-up error is read: date-safe
def test_a_failed_start_is_one_line_without_a_traceback(tmp_path: object) -> None:

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        busy = sock.getsockname()[1]
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "bridge",
                "serve",
                "--standalone",
                "--listen",
                "127.0.0.1:0",
                "--otlp-grpc-listen",
                f"127.0.0.1:{busy}",
                "--data-dir",
                str(tmp_path),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env={"PATH": "/usr/bin:/bin"},
        )
    assert proc.returncode == 1, proc.stderr
    assert len(_error_lines(proc.stderr)) == 1, proc.stderr
    assert f"cannot listen for OTLP gRPC on 127.0.0.1:{busy}" in proc.stderr
    assert "--otlp-grpc-listen HOST:PORT (PROFILE_BRIDGE_OTLP_GRPC_LISTEN) moves" in proc.stderr
    assert "PROFILE_BRIDGE_OTLP_GRPC_ENABLED=false" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert "athrow" not in proc.stderr


def test_bare_command_prints_usage_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    """No command is a usage error (exit 2, like argparse's own): the usage and every command go to stderr."""
    assert main([], {}) == EXIT_USAGE
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("usage: profile-bridge")
    for command in ("serve", "provision", "resolve", "doctor", "demo"):
        assert f"    {command} " in captured.err
    assert main(["--config", "x.toml"], {}) == EXIT_USAGE  # an option alone is no command either


SUBCOMMANDS = ["serve", "provision", "resolve", "doctor", "demo"]


@pytest.mark.parametrize("command", SUBCOMMANDS)
def test_every_subcommand_help_describes_it(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    with pytest.raises(SystemExit) as exit_info:
        parser.parse_args([command, "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    description = out.split("\n\n")[1]  # usage, then the description
    assert len(description.split()) >= 20, description  # says what it does, not a one-word label
    assert "--config FILE" in out


@pytest.mark.parametrize("before", [True, False], ids=["before", "after"])
def test_config_goes_before_or_after_the_command(
    before: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "bridge.toml"
    config.write_text('enrich = "sometimes"\n')
    argv = ["--config", str(config), "serve"] if before else ["serve", "--config", str(config)]
    assert build_parser().parse_args(argv).config == str(config)
    assert main(argv, {}) == EXIT_USAGE  # the file was read: its bad value is reported
    assert "PROFILE_BRIDGE_ENRICH has value 'sometimes'" in capsys.readouterr().err


def test_config_after_the_command_wins_over_one_before() -> None:
    args = build_parser().parse_args(["--config", "a.toml", "doctor", "--config", "b.toml"])
    assert args.config == "b.toml"
    assert build_parser().parse_args(["doctor"]).config is None


@pytest.mark.slow  # `serve` in its own process; only its start-up log lines are read: date-safe
def test_proxy_mode_logs_the_tempo_and_pyroscope_urls_it_uses(tmp_path: Path) -> None:
    port, dead = closed_port(), closed_port()
    env = {"PATH": "/usr/bin:/bin", "PROFILE_BRIDGE_OTLP_GRPC_ENABLED": "false"}
    with subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bridge",
            "serve",
            "--listen",
            f"127.0.0.1:{port}",
            "--tempo-url",
            f"http://127.0.0.1:{dead}",
            "--pyroscope-url",
            f"http://127.0.0.1:{dead}/pyro",
        ],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
    ) as proc:
        assert proc.stderr is not None
        lines = []
        try:
            for line in proc.stderr:
                lines.append(line)
                if "proxy mode: Tempo" in line:
                    break
        finally:
            proc.terminate()
            rest = proc.communicate(timeout=60)[1]
    assert proc.returncode == 0, "".join(lines) + rest
    line = lines[-1]
    assert f"Tempo http://127.0.0.1:{dead} (PROFILE_BRIDGE_TEMPO_URL)" in line
    assert f"Pyroscope http://127.0.0.1:{dead}/pyro (PROFILE_BRIDGE_PYROSCOPE_URL)" in line
    assert any(f"listening on http://127.0.0.1:{port} (proxy mode, no authentication)" in x for x in lines)
    assert not any("WITHOUT AUTHENTICATION" in x for x in lines)  # loopback: nobody else reaches it
