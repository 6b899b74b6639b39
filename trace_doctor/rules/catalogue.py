"""Import every rule module so the registry holds the whole catalogue."""

import importlib
import pkgutil

from trace_doctor.rules import checks

for _module in sorted(m.name for m in pkgutil.iter_modules(checks.__path__)):
    importlib.import_module(f"{checks.__name__}.{_module}")
