"""Run a patch function right after a module is imported, or now if it already is.

The CPU shims patch names inside OpenRLHF modules (e.g. `init_device_mesh` inside
`openrlhf.utils.deepspeed.deepspeed`). Importing those modules eagerly would pull DeepSpeed
and friends into every Ray worker and vLLM process at start-up, so the patches wait until
the process imports the module by itself.
"""

import importlib.abc
import importlib.util
import sys
import threading
from typing import Callable, Dict, List

_pending: Dict[str, List[Callable]] = {}
_lock = threading.Lock()


class _PostImportFinder(importlib.abc.MetaPathFinder):
    """Wraps the real loader of a watched module so the hooks run after its body."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in _pending:
            return None
        # Ask the other finders (skipping ourselves) for the real spec.
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        real_loader = spec.loader

        class _Loader(importlib.abc.Loader):
            def create_module(self, s):
                return real_loader.create_module(s)

            def exec_module(self, module):
                real_loader.exec_module(module)
                _run_hooks(fullname, module)

        spec.loader = _Loader()
        return spec


def _run_hooks(name, module):
    with _lock:
        hooks = _pending.pop(name, [])
    for fn in hooks:
        fn(module)


_finder = _PostImportFinder()


def when_imported(module_name: str, fn: Callable) -> None:
    """Call fn(module) once `module_name` is imported (immediately if it already is)."""
    module = sys.modules.get(module_name)
    if module is not None:
        fn(module)
        return
    with _lock:
        _pending.setdefault(module_name, []).append(fn)
        if _finder not in sys.meta_path:
            sys.meta_path.insert(0, _finder)
