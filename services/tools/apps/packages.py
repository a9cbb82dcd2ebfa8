"""What an app's ``actions`` package needs to stand where one ``actions.py`` stood: a module
``__getattr__`` that answers every name its modules define or import, so the app's ``ops``,
``search`` and ``state`` modules reach into the package as they reached into the one file."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any


def names_of(package: str, modules: tuple[ModuleType, ...]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package`` looking ``name`` up in ``modules``, in order."""

    def __getattr__(name: str) -> Any:
        for module in modules:
            if name in vars(module):
                return vars(module)[name]
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
