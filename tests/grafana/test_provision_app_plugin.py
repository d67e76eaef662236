"""``provision`` enables the Grafana app plugin only when asked (issue 19): Grafana refuses to start when a provisioned
app is not installed, so README's "Wire Grafana" command must not write ``plugins/profile-bridge-app.yaml`` for a
Grafana without the plugin — and a render without it removes the copy an earlier render wrote (only that one)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from bridge.cli import main
from bridge.provisioning.render import PLUGIN_HEADER, PLUGIN_OUT

BRIDGE = ["--bridge-url", "http://profile-bridge.internal:4041"]

# the plugin file as `provision` wrote it before it had --app-plugin (main at 2484604): a later render recognises it
EARLIER_RENDER = """\
# The profile-bridge Grafana app plugin (grafana/profile-bridge-app): enabled, with the bridge's URLs.
# Rendered by `profile-bridge provision`: change the PROFILE_BRIDGE_* settings and render again instead of editing.
# Grafana refuses to start when a provisioned app is not installed: install the plugin first, or render with
# PROFILE_BRIDGE_PROVISION_BROWSER_URL empty to leave this file out (docs/grafana-plugin.md).
apiVersion: 1

apps:
  - type: "profile-bridge-app"
    org_id: 1
    disabled: false
"""


def _provision(out_dir: Path, *flags: str, environ: dict[str, str] | None = None) -> int:
    return main(["provision", *flags, "--out", str(out_dir)], environ=environ or {})


def test_readmes_command_leaves_the_app_plugin_out_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _provision(tmp_path, *BRIDGE) == 0
    assert not (tmp_path / PLUGIN_OUT).exists()
    assert (tmp_path / "datasources" / "profile-bridge.yaml").is_file()
    out = capsys.readouterr().out
    assert (
        "the Grafana app plugin profile-bridge-app is not enabled: install it in Grafana, then render again with "
        "--app-plugin" in out
    )
    assert "wrote" in out and PLUGIN_OUT not in out.replace("(plugins/", "")


def test_app_plugin_writes_the_file_and_says_what_grafana_then_needs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _provision(tmp_path, *BRIDGE, "--app-plugin") == 0
    text = (tmp_path / PLUGIN_OUT).read_text(encoding="utf-8")
    assert text.startswith(PLUGIN_HEADER)
    (app,) = yaml.safe_load(text)["apps"]
    assert app["type"] == "profile-bridge-app" and app["jsonData"]["bridgeUrl"] == "http://profile-bridge.internal:4041"
    out = capsys.readouterr().out
    assert f"wrote {tmp_path / PLUGIN_OUT}" in out
    assert (
        "profile-bridge-app is enabled (plugins/profile-bridge-app.yaml): Grafana refuses to start unless the "
        "plugin is installed" in out
    )


def test_compose_asks_for_the_app_plugin(tmp_path: Path) -> None:
    """The compose stack's Grafana image carries the plugin (Dockerfile target ``grafana``)."""
    assert _provision(tmp_path, "--compose") == 0
    assert (tmp_path / PLUGIN_OUT).read_text(encoding="utf-8").startswith(PLUGIN_HEADER)


@pytest.mark.parametrize("earlier", ["this-version", "before-the-flag"])
def test_a_render_without_the_flag_removes_the_copy_an_earlier_render_wrote(
    earlier: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if earlier == "this-version":
        assert _provision(tmp_path, *BRIDGE, "--app-plugin") == 0
    else:
        (tmp_path / PLUGIN_OUT).parent.mkdir(parents=True)
        (tmp_path / PLUGIN_OUT).write_text(EARLIER_RENDER, encoding="utf-8")
    capsys.readouterr()
    assert _provision(tmp_path, *BRIDGE) == 0
    assert not (tmp_path / PLUGIN_OUT).exists()
    out = capsys.readouterr().out
    assert f"removed {tmp_path / PLUGIN_OUT}: an earlier render wrote it, this one leaves the app plugin out" in out


def test_a_plugin_file_provision_did_not_write_is_left_and_said(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mine = "# my own app settings\napiVersion: 1\napps:\n  - type: profile-bridge-app\n"
    (tmp_path / PLUGIN_OUT).parent.mkdir(parents=True)
    (tmp_path / PLUGIN_OUT).write_text(mine, encoding="utf-8")
    (tmp_path / "plugins" / "other-app.yaml").write_text("apiVersion: 1\n", encoding="utf-8")
    assert _provision(tmp_path, *BRIDGE) == 0
    assert (tmp_path / PLUGIN_OUT).read_text(encoding="utf-8") == mine
    assert (tmp_path / "plugins" / "other-app.yaml").exists()
    out = capsys.readouterr().out
    assert f"left {tmp_path / PLUGIN_OUT}: not written by `profile-bridge provision`" in out


def test_the_empty_browser_url_escape_still_leaves_the_file_out_of_a_compose_render(tmp_path: Path) -> None:
    assert _provision(tmp_path, "--compose", environ={"PROFILE_BRIDGE_PROVISION_BROWSER_URL": ""}) == 0
    assert not (tmp_path / PLUGIN_OUT).exists()


def test_app_plugin_with_an_empty_browser_url_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_dir = tmp_path / "out"
    code = _provision(out_dir, *BRIDGE, "--app-plugin", environ={"PROFILE_BRIDGE_PROVISION_BROWSER_URL": ""})
    assert code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("profile-bridge: PROFILE_BRIDGE_PROVISION_BROWSER_URL has value '': empty, but --app-plugin")
    assert not out_dir.exists()
