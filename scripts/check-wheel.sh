#!/usr/bin/env bash
# The package as users get it: build the wheel from this checkout, install it into a clean virtualenv outside the
# checkout (core dependencies only, no extras), and parse every example DAG and the provider's entry points with
# that install. Catches what the editable install of the test run hides: a module or template left out of the
# wheel, an import of a test-only or extra package at DAG-parse time, a broken entry point.
#   usage: scripts/check-wheel.sh [python]   (python: the interpreter that builds the venv; default python3)
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
python="${1:-python3}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

"$python" -m venv "$work/venv"
pip=("$work/venv/bin/python" -m pip --disable-pip-version-check --quiet)
"${pip[@]}" wheel --no-deps --wheel-dir "$work/dist" "$here" > "$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
wheel=("$work"/dist/airflow_distributed-*.whl)
"${pip[@]}" install --no-compile "${wheel[0]}" > "$work/install.log" 2>&1 || { cat "$work/install.log"; exit 1; }

# The DAG files are copied: run from the checkout, they could pick up its package instead of the installed one.
cp -r "$here/example_dags" "$work/dags"
cd "$work"
AIRFLOW_HOME="$work/airflow-home" AIRFLOW__LOGGING__LOGGING_LEVEL=WARNING PYTHONPATH="" "$work/venv/bin/python" - "$work/dags" <<'PY'
import sys
from importlib.metadata import entry_points
from pathlib import Path

import airflow_distributed

installed = Path(airflow_distributed.__file__).resolve()
assert "site-packages" in installed.parts, f"imported from {installed}, not from the installed wheel"
assert (installed.parent / "plugins" / "templates").is_dir(), "the job view's templates are not in the wheel"

providers = [e.load()() for e in entry_points(group="apache_airflow_provider") if e.value.startswith("airflow_distributed")]
assert providers and providers[0]["package-name"] == "airflow-distributed", providers
[plugin] = [e.load() for e in entry_points(group="airflow.plugins") if e.value.startswith("airflow_distributed")]

from airflow.dag_processing.dagbag import DagBag

dags = sorted(Path(sys.argv[1]).glob("example_*.py"))
failed = {}
for path in dags:
    bag = DagBag(dag_folder=str(path))
    if bag.import_errors or not bag.dags:
        failed[path.name] = bag.import_errors or "no DAG"
assert not failed, failed
print(f"wheel ok: {installed.parent} (installed), {len(dags)} example DAGs parse, provider and plugin "
      f"{plugin.__name__} load")
PY
