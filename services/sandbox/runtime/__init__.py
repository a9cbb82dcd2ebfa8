"""Sandbox runtimes behind one interface (see ``base``)."""
