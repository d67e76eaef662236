#!/usr/bin/env bash
# Regenerate bridge/_proto/*_pb2.py(i) from the project's own .proto files (needs the dev extra: grpcio-tools).
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-.venv/bin/python}
"$python" -m grpc_tools.protoc -I. --python_out=. --pyi_out=. bridge/_proto/*.proto
echo "regenerated: $(ls bridge/_proto/*_pb2.py | tr '\n' ' ')"
