"""Helpers shared by k3stack's tests (real servers on loopback ports: see ``servers``)."""
