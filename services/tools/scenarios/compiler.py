"""Compile a DSL spec for a seed: run its blocks on a scene, then finish the scene."""

from __future__ import annotations

from services.tools.scenarios.blocks import BLOCKS, finish
from services.tools.scenarios.dsl import ScenarioSpec, Scene
from shared.contracts.tools import ScenarioInstance


def compile_spec(spec: ScenarioSpec, seed: int) -> ScenarioInstance:
    """The instance of ``spec`` for ``seed``: same seed, same instance."""
    scene = Scene(spec, seed)
    for use in spec.blocks:
        if use.block not in BLOCKS:
            raise ValueError(f"unknown block {use.block!r}; known: {sorted(BLOCKS)}")
        for i in range(use.count):
            BLOCKS[use.block](scene, i, **use.params)
    finish(scene)
    return scene.instance()
