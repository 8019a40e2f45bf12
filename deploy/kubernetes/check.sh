#!/usr/bin/env bash
# Renders every overlay under deploy/kubernetes/overlays/ with `kubectl kustomize` and validates it
# offline against the schemas of one Kubernetes version (kubernetes-validate --strict: unknown or
# misspelt fields fail too), then runs tests/test_kubernetes.py on the same renders: selectors,
# Service ports, Secret / ConfigMap names and keys, non-root read-only containers with resource
# requests and limits, the GPU overlay's GPUs. Each optional component under deploy/kubernetes/components/
# is rendered and validated with every overlay too, as an overlay that lists it under `components:`
# renders it. No cluster and no network needed. .ci/run runs it.
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

# every optional component with every overlay: a kustomization that takes the overlay and lists the
# component, in the overlay's namespace (kustomize takes relative paths only)
for comp in deploy/kubernetes/components/*/; do
  [ -f "$comp/kustomization.yaml" ] || continue
  cname="$(basename "$comp")"
  for dir in "${overlays[@]}"; do
    name="$(basename "$dir")"
    wrap="$out/$name+$cname"
    mkdir -p "$wrap"
    "$PYTHON" - "$wrap" "$dir" "$comp" <<'PY'
import os, sys
wrap, overlay, comp = sys.argv[1:]
rel = lambda p: os.path.relpath(os.path.abspath(p), wrap)
with open(os.path.join(wrap, "kustomization.yaml"), "w") as f:
    f.write("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: calibo\n"
            f"resources:\n  - {rel(overlay)}\ncomponents:\n  - {rel(comp)}\n")
PY
    kubectl kustomize "$wrap" > "$wrap.yaml"
    "$VALIDATE" --strict --quiet -k "$KUBE_VERSION" "$wrap.yaml"
    echo "deploy/kubernetes: overlays/$name with components/$cname renders and validates against" \
         "Kubernetes $KUBE_VERSION ($(grep -c '^kind:' "$wrap.yaml") objects)"
  done
done

# cross-references and security settings (the test must not skip here: kubectl is present)
CALIBO_REQUIRE_KUBECTL=1 "$PYTHON" -m pytest -q -p no:cacheprovider tests/test_kubernetes.py
