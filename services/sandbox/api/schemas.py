"""Request and response bodies of the sandbox API: defined in :mod:`shared.contracts.sandbox`
(so typed clients share them without importing the service), re-exported here for the routes."""

from shared.contracts import sandbox as _contracts
from shared.contracts.sandbox import *  # noqa: F403 - the contract's names, listed once there

__all__ = list(_contracts.__all__)
