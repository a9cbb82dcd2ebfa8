"""Regenerate (or ``--check``) the services' committed OpenAPI snapshots; see
tests/helpers/openapi.py. ``make openapi`` runs it."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.helpers.openapi import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
