#!/usr/bin/env bash
# The manifests against Kubernetes' own schemas, offline (kubernetes-validate
# carries them), strictly: an unknown or misspelt field fails.
set -euo pipefail
cd "$(dirname "$0")"
python3 -m kubernetes_validate --strict --kubernetes-version "${K8S_VERSION:-1.33.0}" job.yaml volumes.yaml secret.example.yaml
