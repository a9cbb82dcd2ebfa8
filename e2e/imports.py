"""Run inside a service image (`make e2e`'s imports phase): import every module of the service's
package and of shared/, plus the broker transport its Celery worker loads, with only the image's
own packages installed. A module that needs a package the image's extra lacks fails here, before
any container starts, naming the module and the missing package."""

from __future__ import annotations

import importlib
import pkgutil
import sys


def main(service: str) -> int:
    names = ["kombu.transport.redis", f"services.{service}.app", f"services.{service}.tasks"]
    for package in (f"services.{service}", "shared"):
        mod = importlib.import_module(package)
        names += [m.name for m in pkgutil.walk_packages(mod.__path__, package + ".")]
    failed = []
    for name in dict.fromkeys(names):
        if name.endswith("__main__"):  # runs the service
            continue
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - every failure is reported
            failed.append(f"{name}: {type(exc).__name__}: {exc}")
    print(f"{service}: {len(names)} modules, {len(failed)} failed")
    for line in failed:
        print("  " + line)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
