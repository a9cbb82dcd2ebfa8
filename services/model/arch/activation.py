"""SiTU-GLU lives with the kernels (no import cycle); re-exported for the layers."""

from ..kernels.activation import situ_glu, swiglu

__all__ = ["situ_glu", "swiglu"]
