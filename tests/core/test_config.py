from __future__ import annotations

from pathlib import Path

import pytest

from bridge.config import FIELDS, ConfigError, Settings, load_toml, settings_help


def test_defaults_on_a_fresh_machine_are_standalone() -> None:
    s = Settings.from_env({})
    assert s.mode == "standalone"
    assert (s.listen_host, s.listen_port) == ("127.0.0.1", 4041)  # loopback: nothing else reaches a fresh bridge
    assert s.otlp_grpc_listen == ("127.0.0.1", 4317) and s.auth_tokens == ()
    assert s.pyroscope_url == "http://localhost:4040"
    assert s.tempo_url == "http://localhost:3200"
    assert s.capture_window == 15.0
    assert s.label_map == (("service.name", "service_name"),)
    assert s.max_body_bytes == 32 * 1024 * 1024
    assert s.enrich == "all"
    assert s.pyroscope_grpc_target == "localhost:4040"


def test_a_configured_backend_url_selects_proxy_mode() -> None:
    s = Settings.from_env({"PROFILE_BRIDGE_PYROSCOPE_URL": "http://pyro:4040/"})
    assert s.mode == "proxy"
    assert s.pyroscope_url == "http://pyro:4040"
    assert s.pyroscope_grpc_target == "pyro:4040"


def test_explicit_mode_wins_over_urls() -> None:
    s = Settings.from_env({"PROFILE_BRIDGE_TEMPO_URL": "http://tempo:3200", "PROFILE_BRIDGE_MODE": "standalone"})
    assert s.mode == "standalone"


@pytest.mark.parametrize(
    ("key", "value", "attr", "expected"),
    [
        ("LISTEN", "127.0.0.1:9000", "listen_port", 9000),
        ("LISTEN", ":9000", "listen_host", "0.0.0.0"),
        ("UPSTREAM_TIMEOUT", "250ms", "upstream_timeout", 0.25),
        ("CAPTURE_WINDOW", "10s", "capture_window", 10.0),
        ("RETENTION_AGE", "2h", "retention_age", 7200.0),
        ("MAX_BODY_BYTES", "1MiB", "max_body_bytes", 1024 * 1024),
        ("RETENTION_BYTES", "5GB", "retention_bytes", 5 * 1000**3),
        (
            "LABEL_MAP",
            "service.name=service_name, k8s.pod.name=pod",
            "label_map",
            (("service.name", "service_name"), ("k8s.pod.name", "pod")),
        ),
        ("ENRICH", "profiled-services", "enrich", "profiled-services"),
        ("LINK_KEYS", "a/b,/c", "link_keys", (("a", "b"), ("", "c"))),
        (
            "PPROF_TARGETS",
            "http://a:6060/debug/pprof/profile?seconds=5",
            "pprof_targets",
            ("http://a:6060/debug/pprof/profile?seconds=5",),
        ),
        ("OTLP_GRPC_ENABLED", "false", "otlp_grpc_enabled", False),
        ("GRAFANA_URL", "", "grafana_url", ""),
    ],
)
def test_each_parser(key: str, value: str, attr: str, expected: object) -> None:
    s = Settings.from_env({"PROFILE_BRIDGE_" + key: value})
    assert getattr(s, attr) == expected


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("LISTEN_PORT_TYPO", "x", None),  # unknown env keys are ignored: other tools share the prefix space
        ("LISTEN", "localhost:x", "PROFILE_BRIDGE_LISTEN has value 'localhost:x': not a valid port"),
        ("LISTEN", "localhost:70000", "not a valid port"),
        ("LISTEN", "nohostport", "not HOST:PORT"),
        ("PYROSCOPE_URL", "pyroscope:4040", "not an http(s) URL"),
        ("UPSTREAM_TIMEOUT", "soon", "not a duration"),
        ("UPSTREAM_TIMEOUT", "0", "must be a positive duration"),
        ("MAX_BODY_BYTES", "-3", "must be a positive size"),
        ("LABEL_MAP", "service.name", "not a list like"),
        ("LABEL_MAP", "service.name=9bad", "not a valid profile label name"),
        ("ENRICH", "some", "must be one of all, profiled-services, off"),
        ("SPAN_CACHE_SIZE", "many", "not a whole number"),
        ("OTLP_GRPC_ENABLED", "maybe", "must be true or false"),
    ],
)
def test_bad_values_name_the_setting_and_the_value(key: str, value: str, message: str | None) -> None:
    env = {"PROFILE_BRIDGE_" + key: value}
    if message is None:
        Settings.from_env(env)
        return
    with pytest.raises(ConfigError) as info:
        Settings.from_env(env)
    text = str(info.value)
    assert text.startswith(f"PROFILE_BRIDGE_{key} has value {value!r}: ")
    assert message in text
    assert "\n" not in text


def test_precedence_file_then_env_then_flags(tmp_path: Path) -> None:
    cfg = tmp_path / "bridge.toml"
    cfg.write_text('tempo_url = "http://file:3200"\ncapture_window = "10s"\nlabel_map = "service.name=svc"\n')
    values = load_toml(str(cfg))
    s = Settings.from_env(
        {"PROFILE_BRIDGE_TEMPO_URL": "http://env:3200"},
        file_values=values,
        overrides={"PROFILE_BRIDGE_LISTEN": "127.0.0.1:1"},
    )
    assert s.tempo_url == "http://env:3200"
    assert s.capture_window == 10.0
    assert s.label_map == (("service.name", "svc"),)
    assert s.listen_port == 1
    assert s.mode == "proxy"


def test_file_errors_are_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("this is = = not toml")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_toml(str(bad))
    with pytest.raises(ConfigError, match="--config"):
        load_toml(str(tmp_path / "missing.toml"))
    with pytest.raises(ConfigError, match="unknown setting"):
        Settings.from_env({}, file_values={"no_such_setting": 1})


def test_every_field_is_documented_in_serve_help() -> None:
    text = settings_help()
    for spec in FIELDS:
        assert spec.key in text
        assert spec.help
        # the documented default parses (where it is a literal value)
        if not spec.default.startswith("(") and spec.default:
            spec.parse(spec.default)
