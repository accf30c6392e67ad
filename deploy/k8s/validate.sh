#!/usr/bin/env bash
# The manifests against Kubernetes' own schemas, offline (kubernetes-validate
# carries them), strictly: an unknown or misspelt field fails. And job.yaml's
# send against what send wants of parts: the pool sizes itself, so a part
# caps it (--max-connections N) and never fixes it (--connections N).
set -euo pipefail
cd "$(dirname "$0")"
python3 -m kubernetes_validate --strict --kubernetes-version "${K8S_VERSION:-1.33.0}" job.yaml volumes.yaml secret.example.yaml
if grep -Eq -- '(^|[[:space:]])--connections([[:space:]=]|$)' job.yaml; then
  echo "validate.sh: job.yaml passes a fixed --connections; the pool sizes itself, cap each part with --max-connections N instead." >&2
  exit 1
fi
if ! grep -Eq -- 'campaign send .*--journal .*--max-connections[[:space:]=][0-9]+' job.yaml; then
  echo "validate.sh: job.yaml's first run of a part passes no --max-connections N, so parts at once could open 64 connections each from one key." >&2
  exit 1
fi
