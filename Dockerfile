# profile-bridge, (target "demo") the same image with the demo shop's SDKs (`profile-bridge demo`), and (target
# "grafana") Grafana with the profile-bridge app plugin (grafana/profile-bridge-app) built in.
#   docker build -t profile-bridge .                 # the bridge: `profile-bridge serve`
#   docker build --target demo -t profile-bridge-demo .
#   docker build --target grafana -t profile-bridge-grafana .
# The package is installed the way README's quick start does it: pip install of this repository.
FROM python:3.11-slim-bookworm AS bridge

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
# setup.py declares the optional native linker (bridge/otlp/_fastlink.c, README "Speed") and the JFR reader's varint
# loop (bridge/jfr/_fastjfr.c). gcc is installed only for the `pip install .` that builds them and purged in the same
# layer, so the image carries both but no compiler.
COPY pyproject.toml setup.py README.md ./
COPY bridge ./bridge
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && pip install . \
    && python -c "import bridge.otlp._fastlink, bridge.jfr._fastjfr" \
    && apt-get purge -y --auto-remove gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/* /src/build \
    && useradd --system --uid 10001 --home-dir /data --create-home bridge

USER bridge
WORKDIR /data
# HTTP (Grafana, ingest, pages, API, /metrics) and the OTLP gRPC receiver. The bridge listens on loopback unless told
# otherwise; in a container that would reach nobody, so the image says every interface — and the start line warns
# while no authentication is configured (docs/security.md).
ENV PROFILE_BRIDGE_LISTEN=0.0.0.0:4041 \
    PROFILE_BRIDGE_OTLP_GRPC_LISTEN=0.0.0.0:4317
EXPOSE 4041 4317
ENTRYPOINT ["profile-bridge"]
CMD ["serve"]

FROM bridge AS demo

USER root
WORKDIR /src
RUN pip install ".[demo]"
USER bridge
WORKDIR /data
EXPOSE 8080 8081
# where it sends comes from --to (a standalone bridge) or --traces-to/--profiles-to (Tempo, Pyroscope): see compose
CMD ["demo", "--host", "0.0.0.0", "--frontend-port", "8080", "--backend-port", "8081"]

# The Grafana app plugin, built from its lock file with the Node.js its CI uses; dist/ is the plugin directory.
FROM node:20.19.5-bookworm-slim AS plugin

WORKDIR /src
COPY grafana/profile-bridge-app/package.json grafana/profile-bridge-app/package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY grafana/profile-bridge-app/ ./
RUN npm run build

# Grafana with the plugin in its plugins directory. The plugin is not signed: compose allows exactly this id
# (GF_PLUGINS_ALLOW_LOADING_UNSIGNED_PLUGINS=profile-bridge-app); docs/grafana-plugin.md says how to sign it instead.
FROM grafana/grafana:13.2.1 AS grafana

COPY --from=plugin /src/dist /var/lib/grafana/plugins/profile-bridge-app

# What `docker build .` builds with no --target: the bridge itself (stages above are picked by name).
FROM bridge
