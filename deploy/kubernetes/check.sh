#!/usr/bin/env bash
# Renders every overlay under deploy/kubernetes/overlays/ with `kubectl kustomize` and validates it
# offline against the schemas of one Kubernetes version (kubernetes-validate --strict: unknown or
# misspelt fields fail too), then runs tests/test_kubernetes.py on the same renders: selectors,
# Service ports, Secret / ConfigMap names and keys, non-root read-only containers with resource
# requests and limits, the GPU overlay's GPUs. No cluster and no network needed. .ci/run runs it.
#
#   bash deploy/kubernetes/check.sh            # from the repository root, after `make venv`
#   KUBE_VERSION=1.34.0 bash deploy/kubernetes/check.sh
set -euo pipefail
cd "$(dirname "$0")/../.."

# The Kubernetes version the manifests must be valid for: the one place it is pinned.
KUBE_VERSION="${KUBE_VERSION:-1.33.0}"
VALIDATE=.venv/bin/kubernetes-validate
PYTHON=.venv/bin/python

if ! command -v kubectl >/dev/null 2>&1; then
  echo "deploy/kubernetes/check.sh: kubectl is missing: install it (it renders the overlays with its" \
       "built-in kustomize, \`kubectl kustomize\`; no cluster needed)" >&2
  exit 1
fi
if [ ! -x "$VALIDATE" ]; then
  echo "deploy/kubernetes/check.sh: $VALIDATE is missing: \`make venv\` installs it (the test extra)" >&2
  exit 1
fi

out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
overlays=(deploy/kubernetes/overlays/*/)
[ "${#overlays[@]}" -gt 0 ] && [ -d "${overlays[0]}" ] || { echo "check.sh: no overlay found" >&2; exit 1; }
for dir in "${overlays[@]}"; do
  name="$(basename "$dir")"
  kubectl kustomize "$dir" > "$out/$name.yaml"
  "$VALIDATE" --strict --quiet -k "$KUBE_VERSION" "$out/$name.yaml"
  echo "deploy/kubernetes: overlays/$name renders and validates against Kubernetes $KUBE_VERSION" \
       "($(grep -c '^kind:' "$out/$name.yaml") objects)"
done

# cross-references and security settings (the test must not skip here: kubectl is present)
CALIBO_REQUIRE_KUBECTL=1 "$PYTHON" -m pytest -q -p no:cacheprovider tests/test_kubernetes.py
