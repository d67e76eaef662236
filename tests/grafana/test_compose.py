"""Static checks of docker-compose.yaml, the Dockerfile and the files they mount (there is no Docker engine here):
the Compose Specification schema (vendored in tests/schemas/), pinned images, healthchecks and depends_on
conditions, mounted paths, published ports, and that the pieces agree with each other (provisioning URLs, dashboard
path, Prometheus target, the bridge's settings, the demo's command line)."""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

import jsonschema
import pytest
import yaml

from bridge.cli import build_parser
from bridge.config import Settings
from tests.paths import COMPOSE_SCHEMA, ROOT

VENDORED_SCHEMA = COMPOSE_SCHEMA
COMPOSE_FILE = ROOT / "docker-compose.yaml"
DOCKERFILE = ROOT / "Dockerfile"


def _compose() -> dict[str, Any]:
    doc = yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))
    assert isinstance(doc, dict)
    return doc


def _services() -> dict[str, dict[str, Any]]:
    return dict(_compose()["services"])


def _dockerfile_stages() -> dict[str, list[str]]:
    """stage name -> its instructions (continuation lines joined)."""
    text = DOCKERFILE.read_text(encoding="utf-8").replace("\\\n", " ")
    stages: dict[str, list[str]] = {}
    current: list[str] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = re.match(r"FROM\s+(\S+)(?:\s+AS\s+(\S+))?", line, re.IGNORECASE)
        if match:
            current = stages.setdefault(match.group(2) or f"stage{len(stages)}", [])
        current.append(line)
    return stages


def _image_is_pinned(image: str) -> bool:
    name, _, tag = image.rpartition(":")
    return bool(name) and "/" not in tag and tag != "latest" and any(c.isdigit() for c in tag)


def test_vendored_schema_is_unchanged_and_documented() -> None:
    """The vendored schema is byte for byte the one SOURCE.txt names (its SHA-256 is recorded there)."""
    source = (VENDORED_SCHEMA.parent / "SOURCE.txt").read_text(encoding="utf-8")
    assert "compose-spec/compose-spec" in source and "170098ba07d9" in source
    assert f"sha256 {hashlib.sha256(VENDORED_SCHEMA.read_bytes()).hexdigest()}" in source


def test_compose_file_validates_against_the_compose_specification() -> None:
    schema = json.loads(VENDORED_SCHEMA.read_text(encoding="utf-8"))
    jsonschema.Draft7Validator.check_schema(schema)
    errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(_compose()), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors)


def test_the_schema_validation_catches_a_broken_file() -> None:
    """The validator is not vacuous: a misspelt key and a bad type are reported."""
    schema = json.loads(VENDORED_SCHEMA.read_text(encoding="utf-8"))
    broken = _compose()
    broken["services"]["bridge"]["healthcheck"]["intervall"] = "5s"
    broken["services"]["grafana"]["ports"] = "3000:3000"
    messages = [e.message for e in jsonschema.Draft7Validator(schema).iter_errors(broken)]
    assert len(messages) >= 2, messages


def test_services_are_the_stack_issue_4_describes() -> None:
    assert set(_services()) == {"grafana", "tempo", "pyroscope", "prometheus", "bridge", "demo"}


@pytest.mark.parametrize("name", sorted(_services()))
def test_every_service_is_pinned_and_health_checked(name: str) -> None:
    service = _services()[name]
    assert _image_is_pinned(service["image"]), service["image"]
    health = service["healthcheck"]
    assert health["test"][0] in ("CMD", "CMD-SHELL") and len(health["test"]) >= 2
    for key in ("interval", "timeout", "retries"):
        assert key in health


# --------------------------------------------------------------------------------------------- what each image holds
#
# A healthcheck runs inside its container: CMD runs argv[0] directly, CMD-SHELL runs `/bin/sh -c STRING`. Distroless
# images have neither a shell nor wget/curl, so a check that names one never passes and every service that waits for
# it never starts (this is how `docker compose up` once hung on Tempo). What each pinned image contains is recorded
# here with where it was read; a new image or tag fails the test until its row is written.

DEFAULT_PATH: Final = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
SH_BUILTINS: Final = frozenset({"exit", "true", "false", "test", "[", "echo", "printf", "set", "exec", ":", "!"})


@dataclass(frozen=True)
class ImageFacts:
    """The executables of an image (absolute paths) and the PATH a bare name is looked up in."""

    base: str
    programs: frozenset[str]
    source: str
    path: tuple[str, ...] = DEFAULT_PATH

    def has(self, program: str) -> bool:
        if "/" in program:
            return program in self.programs
        return any(f"{directory}/{program}" in self.programs for directory in self.path)

    def with_programs(self, *programs: str, source: str) -> ImageFacts:
        return ImageFacts(self.base, self.programs | frozenset(programs), f"{self.source}; {source}", self.path)


BUSYBOX_APPLETS: Final = ("sh", "wget", "grep", "cat", "ls", "busybox")

PULLED_IMAGES: Final[dict[str, ImageFacts]] = {
    "grafana/tempo:3.0.3": ImageFacts(
        base="gcr.io/distroless/static-debian12",
        programs=frozenset({"/tempo"}),
        source="grafana/tempo cmd/tempo/Dockerfile: final stage FROM gcr.io/distroless/static-debian12 (busybox "
        "removed in grafana/tempo#5717, on release-v3.0), COPY tempo /tempo, ENTRYPOINT /tempo; "
        "`/tempo --health` GETs http://localhost:3200/ready and exits 0/1 (Tempo docs, Command line "
        "flags > Health check; grafana/tempo#6608)",
    ),
    "grafana/pyroscope:2.2.1": ImageFacts(
        base="gcr.io/distroless/static",
        programs=frozenset({"/usr/bin/pyroscope", "/usr/bin/profilecli"}),
        source="grafana/pyroscope cmd/pyroscope/Dockerfile: FROM gcr.io/distroless/static, COPY profilecli "
        "/usr/bin/profilecli, COPY pyroscope /usr/bin/pyroscope; `profilecli ready --url URL` GETs URL/ready "
        "(cmd/profilecli/ready.go, --url from cmd/profilecli/client.go)",
    ),
    "prom/prometheus:v3.5.0": ImageFacts(
        base="quay.io/prometheus/busybox",
        programs=frozenset({"/bin/prometheus", "/bin/promtool"} | {f"/bin/{a}" for a in BUSYBOX_APPLETS}),
        source="prometheus/prometheus Dockerfile: FROM quay.io/prometheus/busybox-${OS}-${ARCH}:latest, COPY "
        "prometheus /bin/prometheus, promtool /bin/promtool; busybox applets in /bin (prometheus/busybox "
        "README); the distroless variant is a separate -distroless tag since v3.10 "
        "(prometheus/prometheus#17876)",
    ),
    "grafana/grafana:13.2.1": ImageFacts(
        base="alpine",
        programs=frozenset(
            {"/usr/share/grafana/bin/grafana", "/usr/bin/curl", "/bin/bash", "/bin/sh", "/bin/busybox", "/usr/bin/wget"}
        ),
        source="grafana/grafana Dockerfile: final stage FROM ${BASE_IMAGE} (alpine), `apk add --no-cache "
        "ca-certificates bash curl tzdata musl-utils`, PATH /usr/share/grafana/bin:...; alpine's busybox gives "
        "/bin/sh and /usr/bin/wget",
        path=("/usr/share/grafana/bin", *DEFAULT_PATH),
    ),
}

# base images of our own Dockerfile; what its stages add is derived from the Dockerfile itself (_built_image)
BASE_IMAGES: Final[dict[str, ImageFacts]] = {
    "python:3.11-slim-bookworm": ImageFacts(
        base="debian:bookworm-slim",
        programs=frozenset(
            {"/bin/sh", "/bin/bash", "/usr/local/bin/python", "/usr/local/bin/python3", "/usr/local/bin/pip"}
        ),
        source="docker-library/python 3.11/slim-bookworm/Dockerfile: FROM debian:bookworm-slim (dash as /bin/sh, "
        "bash), CPython and pip in /usr/local/bin; wget is installed only to download the sources and purged "
        "in the same layer, curl never",
    ),
}


def _console_scripts() -> list[str]:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return sorted(pyproject["project"]["scripts"])


def _built_image(target: str) -> ImageFacts:
    """What a stage of our Dockerfile holds: its base image's programs, plus the console scripts of
    pyproject.toml once a RUN in the stage (or a stage it builds on) pip-installs this package. What apt-get installs
    there is purged in the same RUN (the Dockerfile test checks it), so it adds nothing."""
    stages = _dockerfile_stages()
    lines = stages[target]
    base = lines[0].split()[1]
    facts = _built_image(base) if base in stages else {**PULLED_IMAGES, **BASE_IMAGES}[base]
    for line in lines[1:]:
        if line.startswith("RUN ") and re.search(r"\bpip install \.(\[\w+\])?", line.replace('"', "")):
            scripts = [f"/usr/local/bin/{name}" for name in _console_scripts()]
            facts = facts.with_programs(*scripts, source=f"Dockerfile stage {target}: pip install . → {scripts}")
    return facts


def image_facts(service: dict[str, Any]) -> ImageFacts:
    if "build" in service:
        return _built_image(service["build"]["target"])
    image = service["image"]
    assert image in PULLED_IMAGES, (
        f"{image}: record what this image contains (base image, executables, where you read it) in PULLED_IMAGES "
        "before using it: a healthcheck can only run programs the image has"
    )
    return PULLED_IMAGES[image]


def shell_commands(script: str) -> list[str]:
    """The programs a `sh -c` script runs: the first word of each simple command (builtins left out)."""
    lexer = shlex.shlex(script, posix=True, punctuation_chars=";&|()")
    lexer.whitespace_split = True
    programs: list[str] = []
    at_start = True
    for token in lexer:
        if token in {";", "&&", "||", "|", "&", "(", ")"}:
            at_start = True
            continue
        if at_start and "=" not in token.split("/")[0] and token not in SH_BUILTINS:
            programs.append(token)
        at_start = False
    return programs


def missing_programs(test: list[str], image: ImageFacts) -> list[str]:
    """The programs a healthcheck's ``test`` needs that ``image`` does not have."""
    kind, *args = test
    if kind == "NONE":
        return []
    if kind == "CMD":
        needed = args[:1]
    elif kind == "CMD-SHELL":
        needed = ["/bin/sh", *shell_commands(" ".join(args))]
    else:
        raise AssertionError(f"healthcheck test must start with CMD, CMD-SHELL or NONE, not {kind!r}")
    return [program for program in needed if not image.has(program)]


@pytest.mark.parametrize("name", sorted(_services()))
def test_every_healthcheck_runs_a_program_its_image_has(name: str) -> None:
    service = _services()[name]
    facts = image_facts(service)
    test = service["healthcheck"]["test"]
    missing = missing_programs(test, facts)
    assert not missing, f"{name}: healthcheck {test} needs {missing}, which {facts.base} does not have ({facts.source})"


@pytest.mark.parametrize(
    ("image", "test", "missing"),
    [
        # the check that kept `docker compose up` from ever finishing: distroless Tempo has no shell and no wget
        (
            "grafana/tempo:3.0.3",
            ["CMD-SHELL", "wget -q -O /dev/null http://localhost:3200/ready || exit 1"],
            ["/bin/sh", "wget"],
        ),
        ("grafana/tempo:3.0.3", ["CMD", "wget", "-q", "http://localhost:3200/ready"], ["wget"]),
        ("grafana/tempo:3.0.3", ["CMD", "/tempo", "--health"], []),
        ("grafana/pyroscope:2.2.1", ["CMD", "curl", "-f", "http://localhost:4040/ready"], ["curl"]),
        ("grafana/pyroscope:2.2.1", ["CMD", "/usr/bin/profilecli", "ready"], []),
        ("prom/prometheus:v3.5.0", ["CMD-SHELL", "wget -qO- localhost:9090/-/ready | grep -q Ready"], []),
        ("prom/prometheus:v3.5.0", ["CMD", "curl", "localhost:9090/-/ready"], ["curl"]),
        ("grafana/grafana:13.2.1", ["CMD-SHELL", "curl -fsS localhost:3000/api/health && grafana --version"], []),
    ],
)
def test_a_healthcheck_naming_a_missing_program_is_caught(image: str, test: list[str], missing: list[str]) -> None:
    assert missing_programs(test, PULLED_IMAGES[image]) == missing


def test_our_images_have_python_and_the_console_scripts_but_no_curl() -> None:
    """Derived from the Dockerfile: python slim has neither curl nor wget; `pip install .` adds profile-bridge."""
    for target in ("bridge", "demo"):
        facts = _built_image(target)
        assert facts.has("python") and facts.has("profile-bridge") and facts.has("/bin/sh")
        assert missing_programs(["CMD", "curl", "-f", "http://localhost:4041/healthz"], facts) == ["curl"]
        assert missing_programs(["CMD-SHELL", "wget -q localhost:4041/healthz"], facts) == ["wget"]


@pytest.mark.parametrize("name", sorted(_services()))
def test_every_healthcheck_probes_its_own_service(name: str) -> None:
    """A probe URL in the check names a port the container listens on (Tempo's --health probes :3200, its
    http_listen_port; see test_tempo_is_monolithic_with_local_storage_and_otlp_on_all_interfaces)."""
    service = _services()[name]
    text = " ".join(service["healthcheck"]["test"][1:])
    ports = {int(port) for port in re.findall(r"http://localhost:(\d+)", text)}
    if name == "tempo":
        assert service["healthcheck"]["test"] == ["CMD", "/tempo", "--health"]
        ports = {3200}
    assert ports, f"{name}: the healthcheck probes no http://localhost:PORT"
    assert ports <= _container_ports(service), (name, ports)


def test_depends_on_uses_conditions_on_healthy_services_without_cycles() -> None:
    services = _services()
    roots = {name for name, service in services.items() if "depends_on" not in service}
    assert roots == {"tempo", "pyroscope"}  # the two storage backends depend on nothing
    for name, service in services.items():
        for dep, spec in service.get("depends_on", {}).items():
            assert isinstance(spec, dict), f"{name}: depends_on {dep} needs the long form with a condition"
            assert spec["condition"] == "service_healthy", (name, dep)
            assert dep in services and "healthcheck" in services[dep]
    # topological order exists
    done: set[str] = set()
    while len(done) < len(services):
        ready = {n for n, s in services.items() if n not in done and set(s.get("depends_on", {})) <= done}
        assert ready, f"depends_on cycle among {set(services) - done}"
        done |= ready
    assert set(services["grafana"]["depends_on"]) >= {"bridge", "tempo", "pyroscope", "prometheus"}
    assert set(services["bridge"]["depends_on"]) == {"tempo", "pyroscope"}


def test_every_mounted_path_exists_and_named_volumes_are_declared() -> None:
    compose = _compose()
    declared = set(compose.get("volumes") or {})
    binds = 0
    for name, service in compose["services"].items():
        for volume in service.get("volumes", []):
            source, target = volume.split(":")[:2]
            assert target.startswith("/"), (name, volume)
            if source.startswith((".", "/")):
                assert (ROOT / source).exists(), f"{name} mounts {source}, which is not in the repository"
                binds += 1
            else:
                assert source in declared, f"{name}: named volume {source} not declared"
        build = service.get("build")
        if build:
            assert (ROOT / build["context"] / build.get("dockerfile", "Dockerfile")).is_file()
            assert build["target"] in _dockerfile_stages(), build
    assert binds >= 3  # tempo.yaml, prometheus.yml, provisioning/ (which holds the dashboards too)


def _published(service: dict[str, Any]) -> dict[int, tuple[str, int]]:
    """``{host port: (host address, container port)}`` of a service's ``ports`` (``ADDRESS:HOST:CONTAINER``)."""
    out: dict[int, tuple[str, int]] = {}
    for port in service.get("ports", []):
        address, host, container = str(port).split(":")
        out[int(host)] = (address, int(container))
    return out


def test_every_port_is_published_on_loopback_only() -> None:
    """Issue 19: Grafana is anonymous Admin and the bridge has no tokens in this stack; a port published without an
    address listens on every interface of the host (README says the stack is for this machine)."""
    for name, service in _services().items():
        for port in service.get("ports", []):
            assert isinstance(port, str) and port.count(":") == 2, f"{name}: publish as 127.0.0.1:HOST:CONTAINER"
            assert port.startswith("127.0.0.1:"), f"{name} publishes {port} on every interface"


def test_no_published_host_port_collides() -> None:
    published: dict[int, str] = {}
    for name, service in _services().items():
        for host in _published(service):
            assert host not in published, f"{name} and {published.get(host)} both publish {host}"
            published[host] = name
    assert {3000, 4041, 3200, 4040, 9090, 8080} <= set(published)


def _host_path(mounts: dict[str, str], container_path: str) -> Path:
    """The repository file a path inside a container is, through its bind mounts (source -> target)."""
    for source, target in mounts.items():
        if container_path == target or container_path.startswith(target + "/"):
            return ROOT / source / container_path.removeprefix(target).lstrip("/")
    raise AssertionError(f"{container_path} is not under any bind mount: {mounts}")


def test_grafana_mounts_the_committed_provisioning_and_the_dashboards_where_the_provider_looks() -> None:
    grafana = _services()["grafana"]
    mounts = dict(tuple(v.split(":")[:2]) for v in grafana["volumes"])
    assert mounts["./provisioning"] == "/etc/grafana/provisioning"
    assert set(mounts) == {"./provisioning"}  # the render holds the dashboards: nothing else to mount
    provider = yaml.safe_load((ROOT / "provisioning" / "dashboards" / "profile-bridge.yaml").read_text())
    path = provider["providers"][0]["options"]["path"]
    dashboards = _host_path(mounts, path)
    assert sorted(p.name for p in dashboards.glob("*.json")) == ["profile-bridge.json", "span-profiles.json"]
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home.startswith(path + "/")
    assert _host_path(mounts, home).is_file() and Path(home).name == "span-profiles.json"
    assert grafana["environment"]["GF_AUTH_ANONYMOUS_ENABLED"] == "true"
    assert grafana["environment"]["GF_AUTH_ANONYMOUS_ORG_ROLE"] == "Admin"


def _container_ports(service: dict[str, Any]) -> set[int]:
    return {int(str(p).split(":")[-1]) for p in service.get("ports", [])}


def test_provisioned_data_sources_reach_compose_services() -> None:
    services = _services()
    doc = yaml.safe_load((ROOT / "provisioning" / "datasources" / "profile-bridge.yaml").read_text())
    known_ports = {"bridge": 4041, "tempo": 3200, "pyroscope": 4040, "prometheus": 9090}
    for ds in doc["datasources"]:
        url = urlsplit(ds["url"])
        assert url.hostname in services, ds
        assert url.port == known_ports[url.hostname] and url.port in _container_ports(services[url.hostname])


def test_bridge_runs_serve_in_proxy_mode_with_valid_settings() -> None:
    bridge = _services()["bridge"]
    args = build_parser().parse_args(bridge["command"])
    assert args.command == "serve" and args.proxy
    settings = Settings.from_env({k: str(v) for k, v in bridge["environment"].items()})
    assert settings.mode == "proxy"
    assert urlsplit(settings.tempo_url).hostname == "tempo"
    assert urlsplit(settings.pyroscope_url).hostname == "pyroscope"
    assert settings.listen_port == 4041 and 4041 in _container_ports(bridge)
    # the bridge listens on loopback unless told otherwise: in a container that reaches nobody, so compose (and
    # the image) say every interface explicitly
    assert settings.listen_host == "0.0.0.0" and settings.otlp_grpc_listen == ("0.0.0.0", 4317)
    assert Settings.from_env({}).listen_host == "127.0.0.1"


def test_the_image_listens_on_every_interface_explicitly() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    bridge_stage = dockerfile.split("FROM bridge AS demo")[0]
    env = dict(re.findall(r"(PROFILE_BRIDGE_[A-Z_]+)=(\S+)", bridge_stage))
    settings = Settings.from_env(env)
    assert (settings.listen_host, settings.listen_port) == ("0.0.0.0", 4041)
    assert settings.otlp_grpc_listen == ("0.0.0.0", 4317)


def test_prometheus_scrapes_the_bridge() -> None:
    prometheus = _services()["prometheus"]
    config = yaml.safe_load((ROOT / "deploy" / "prometheus.yml").read_text())
    (job,) = config["scrape_configs"]
    assert job["metrics_path"] == "/metrics"
    assert job["static_configs"][0]["targets"] == ["bridge:4041"]
    assert "--config.file=/etc/prometheus/prometheus.yml" in prometheus["command"]


def test_tempo_is_monolithic_with_local_storage_and_otlp_on_all_interfaces() -> None:
    tempo = _services()["tempo"]
    assert tempo["command"] == ["-target=all", "-config.file=/etc/tempo.yaml"]
    config = yaml.safe_load((ROOT / "deploy" / "tempo.yaml").read_text())
    protocols = config["distributor"]["receivers"]["otlp"]["protocols"]
    assert protocols["grpc"]["endpoint"] == "0.0.0.0:4317" and protocols["http"]["endpoint"] == "0.0.0.0:4318"
    assert config["server"]["http_listen_port"] == 3200
    storage = config["storage"]["trace"]
    assert storage["backend"] == "local"
    assert storage["wal"]["path"].startswith("/var/tempo/") and storage["local"]["path"].startswith("/var/tempo/")
    assert "tempo-data:/var/tempo" in tempo["volumes"]
    assert config["usage_report"]["reporting_enabled"] is False


def test_demo_sends_to_the_stack_and_its_command_parses() -> None:
    demo = _services()["demo"]
    args = build_parser().parse_args(demo["command"])
    assert args.command == "demo" and args.load and args.host == "0.0.0.0"
    assert {args.frontend_port, args.backend_port} <= _container_ports(demo) | {8081}
    assert args.frontend_port in _container_ports(demo)
    assert urlsplit(args.traces_to).netloc == "tempo:4318"  # Tempo's OTLP/HTTP receiver (deploy/tempo.yaml)
    assert urlsplit(args.profiles_to).netloc == "pyroscope:4040"


def test_the_demo_image_runs_profile_bridge_demo() -> None:
    """The demo stage builds on the bridge stage (ENTRYPOINT profile-bridge) and its CMD is a valid `demo` command."""
    stages = _dockerfile_stages()
    demo = stages["demo"]
    assert demo[0].split()[1] == "bridge"
    (cmd,) = [line for line in demo if line.startswith("CMD ")]
    args = build_parser().parse_args(json.loads(cmd[4:]))
    assert args.command == "demo" and args.host == "0.0.0.0" and args.frontend_port == 8080
    assert not [line for line in demo if line.startswith("ENTRYPOINT ")]


def _readme_install_target() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    first_block = re.search(r"```sh\n(.*?)```", readme, re.DOTALL)
    assert first_block
    words = shlex.split(first_block.group(1).replace("&&", " ; "))
    index = words.index("install")
    assert words[index - 1].endswith("pip")
    target = next(w for w in words[index + 1 :] if not w.startswith("-"))
    return target


def test_dockerfile_installs_the_package_like_the_readme() -> None:
    readme_target = _readme_install_target()  # e.g. ".[dev]": a pip install of the repository itself
    assert readme_target.split("[")[0] == "."
    stages = _dockerfile_stages()
    for name, lines in stages.items():
        image = lines[0].split()[1]
        assert image in stages or _image_is_pinned(image), f"stage {name}: base image {image} is not pinned"
    runs = [line for line in stages["bridge"] if line.startswith("RUN ")]
    installs = [shlex.split(seg) for line in runs for seg in line[4:].split("&&") if "pip install" in seg]
    assert installs == [["pip", "install", "."]]
    # the optional native linker is built: a C compiler is there for that pip install, and the build is checked
    (install_run,) = [line for line in runs if "pip install" in line]
    assert "gcc" in install_run and "import bridge.otlp._fastlink" in install_run
    copies = [line.split()[1:-1] for line in stages["bridge"] if line.startswith("COPY ")]
    for sources in copies:
        for source in sources:
            assert (ROOT / source).exists(), source
    assert {"pyproject.toml", "README.md", "bridge"} <= {s for sources in copies for s in sources}
    assert 'ENTRYPOINT ["profile-bridge"]' in stages["bridge"]
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert 'profile-bridge = "bridge.cli:main"' in pyproject
    demo_installs = [line for line in stages["demo"] if "pip install" in line]
    assert demo_installs == ['RUN pip install ".[demo]"'] and "demo = [" in pyproject


def test_docs_describe_the_stack_as_composed() -> None:
    """docs/grafana.md's table of services names each pinned image and each published host port."""
    docs = (ROOT / "docs" / "grafana.md").read_text(encoding="utf-8")
    section = docs[docs.index("<!-- section:compose -->") : docs.index("<!-- /section:compose -->")]
    rows = {line.split("|")[1].strip(" `"): line for line in section.splitlines() if line.startswith("| `")}
    assert set(rows) == set(_services())
    for name, service in _services().items():
        row = rows[name]
        if "build" not in service:
            assert f"`{service['image']}`" in row, name
        cells = [c.strip() for c in row.split("|")]
        host_ports = {str(host) for host in _published(service)}
        assert host_ports == {p.strip() for p in cells[3].split(",")}, name


# --------------------------------------------------------------------------------------------- the Grafana app plugin

PLUGIN_SRC = ROOT / "grafana" / "profile-bridge-app"
GRAFANA_PLUGINS_DIR = "/var/lib/grafana/plugins"  # GF_PATHS_PLUGINS' default in Grafana's image


def _plugin_id() -> str:
    plugin_id = json.loads((PLUGIN_SRC / "src" / "plugin.json").read_text(encoding="utf-8"))["id"]
    assert isinstance(plugin_id, str)
    return plugin_id


def test_the_plugin_stage_builds_the_plugin_from_its_lock_file() -> None:
    stages = _dockerfile_stages()
    plugin = stages["plugin"]
    image = plugin[0].split()[1]
    assert image.startswith("node:20.") and _image_is_pinned(image), image
    runs = [line.removeprefix("RUN ").strip() for line in plugin if line.startswith("RUN ")]
    assert runs == ["npm ci --no-audit --no-fund", "npm run build"]
    copies = [line.split()[1:] for line in plugin if line.startswith("COPY ")]
    # the manifest and the lock file first (npm ci needs both), then the sources; each is in the repository
    assert copies[0][:-1] == ["grafana/profile-bridge-app/package.json", "grafana/profile-bridge-app/package-lock.json"]
    for sources in copies:
        for source in sources[:-1]:
            assert (ROOT / source).exists(), source
    ignored = (ROOT / ".dockerignore").read_text(encoding="utf-8").split()
    assert "**/node_modules" in ignored  # the build context never carries a local node_modules


def test_grafanas_image_carries_the_built_plugin_and_compose_loads_it_unsigned() -> None:
    plugin_id = _plugin_id()
    stages = _dockerfile_stages()
    grafana_stage = stages["grafana"]
    assert grafana_stage[0].split()[1] == "grafana/grafana:13.2.1"
    copies = [line.split() for line in grafana_stage if line.startswith("COPY ")]
    # the plugin stage's build output (webpack's dist/: module.js, plugin.json) is the plugin's directory in Grafana
    assert copies == [["COPY", "--from=plugin", "/src/dist", f"{GRAFANA_PLUGINS_DIR}/{plugin_id}"]]
    assert "WORKDIR /src" in stages["plugin"]
    dist_dir = json.loads((PLUGIN_SRC / "package.json").read_text(encoding="utf-8"))["scripts"]["build"]
    assert "webpack" in dist_dir and "--env production" in dist_dir
    constants = (PLUGIN_SRC / ".config" / "bundler" / "constants.ts").read_text(encoding="utf-8")
    assert re.search(r"DIST_DIR\s*=\s*'dist'", constants)

    grafana = _services()["grafana"]
    assert grafana["build"] == {"context": ".", "dockerfile": "Dockerfile", "target": "grafana"}
    assert grafana["environment"]["GF_PLUGINS_ALLOW_LOADING_UNSIGNED_PLUGINS"] == plugin_id  # exactly this one


def test_grafana_provisions_the_plugin_with_urls_that_reach_the_bridge() -> None:
    plugin_id = _plugin_id()
    services = _services()
    grafana = services["grafana"]
    mounts = dict(tuple(v.split(":")[:2]) for v in grafana["volumes"])
    provisioned = _host_path(mounts, "/etc/grafana/provisioning/plugins/profile-bridge-app.yaml")
    (app,) = yaml.safe_load(provisioned.read_text(encoding="utf-8"))["apps"]
    assert app["type"] == plugin_id and app["disabled"] is False
    data = app["jsonData"]
    # Grafana's server reaches the bridge by its service name; the browser by the port compose publishes
    server = urlsplit(data["bridgeServerUrl"])
    assert server.hostname == "bridge" and server.port in _container_ports(services["bridge"])
    browser = urlsplit(data["bridgeUrl"])
    published = _published(services["bridge"])
    assert browser.hostname == "localhost" and published[browser.port] == ("127.0.0.1", server.port)
    # the span pages the links open are the ones the bridge's Explore links point back from
    assert services["bridge"]["environment"]["PROFILE_BRIDGE_GRAFANA_URL"] == "http://localhost:3000"


def test_a_plain_docker_build_builds_the_bridge() -> None:
    """``docker build .`` builds the last stage: it must be the bridge, as the Dockerfile's header promises."""
    froms = [
        line.split() for line in DOCKERFILE.read_text(encoding="utf-8").splitlines() if line.upper().startswith("FROM ")
    ]
    assert froms[-1][1] == "bridge", froms[-1]
