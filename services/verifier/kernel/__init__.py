"""Kernel verifier: correctness on fresh inputs, speed against reference and expert, cheat detectors.

See ``docs/verifier.md`` for the task format, the trial protocol and the reward formula.
"""
