#!/usr/bin/env bash
# Validates an SPDX document with the SPDX project's own tool (spdx-tools,
# pyspdxtools -i FILE), installed from PyPI into target/spdx-venv once.
# usage: hack/sbom-validate.sh FILE.spdx.json
set -euo pipefail
cd "$(dirname "$0")/.."
venv=target/spdx-venv
want=0.8.5
if [[ ! -x "$venv/bin/pyspdxtools" || "$(cat "$venv/stamp" 2>/dev/null)" != "$want" ]]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q "spdx-tools==$want" || { echo "error: pip install spdx-tools==$want failed" >&2; exit 1; }
  echo "$want" >"$venv/stamp"
fi
out="$("$venv/bin/pyspdxtools" -i "$1" 2>&1)" || { echo "$out" >&2; echo "error: $1 is not valid SPDX (pyspdxtools $want)" >&2; exit 1; }
echo "sbom-validate: $1 is valid SPDX (pyspdxtools $want)${out:+: $out}" >&2
