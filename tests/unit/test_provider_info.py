"""What ``get_provider_info`` names can be imported: Airflow's providers manager imports each path by its text, so a
module moved without its line here breaks only at run time (the extra links vanish from the UI)."""

from __future__ import annotations

import importlib

import pytest

from airflow_distributed.get_provider_info import get_provider_info

INFO = get_provider_info()
MODULES = [name for section in ("operators", "sensors", "triggers", "hooks") for entry in INFO[section]
           for name in entry["python-modules"]]
OBJECTS = [*INFO["extra-links"], *(entry["class-name"] for entry in INFO["task-decorators"]),
           *(entry["hook-class-name"] for entry in INFO["connection-types"])]


@pytest.mark.parametrize("module", MODULES)
def test_each_module_it_names_imports(module: str) -> None:
    importlib.import_module(module)


@pytest.mark.parametrize("path", OBJECTS)
def test_each_class_it_names_imports(path: str) -> None:
    module, _, name = path.rpartition(".")
    assert hasattr(importlib.import_module(module), name)
