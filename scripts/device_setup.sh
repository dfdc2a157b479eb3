# Sourced by scripts/tpu_device_run.sh and scripts/tpu_tune_run.sh on a TPU
# machine without network, from the repository root, after they set PY, SITE
# and OUT: installs the wheels of .device-wheels/ (scripts/fetch_peer_wheels.sh
# fetches them: the peers, and gemmgen's own lark and jinja2) into $SITE,
# puts $SITE and this checkout after the machine's own packages on
# PYTHONPATH (its JAX stays the one imported), and maps gemmgen.templates
# onto the top-level templates/ folder as an installed gemmgen has it.
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if ls .device-wheels/*.whl >/dev/null 2>&1; then
  PIP_CONFIG_FILE=/dev/null "$PY" -m pip install --isolated -q --no-index --no-deps --no-compile \
    --no-cache-dir --upgrade --target "$SITE" .device-wheels/*.whl \
    || echo "$(basename "$0"): installing the wheels failed; what they bring is reported missing" >&2
else
  echo "$(basename "$0"): no wheels in .device-wheels/ (scripts/fetch_peer_wheels.sh); peers will be reported missing" >&2
fi
export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$(pwd):$SITE"
# pyproject.toml maps the package gemmgen.templates onto templates/ when
# gemmgen is installed; a throwaway copy of the tree gets the same as a link.
if ! "$PY" -c "import gemmgen.templates" 2>/dev/null; then ln -s ../templates gemmgen/templates; fi
