"""Structural (DOM) and pixel (SSIM) similarity between a candidate's page and the reference's."""

from __future__ import annotations

import difflib
import io

import numpy as np
from PIL import Image


def dom_similarity(a: list[str], b: list[str]) -> float:
    """Ratio of matching elements between two depth-first tag sequences (difflib)."""
    if not a and not b:
        return 1.0
    return difflib.SequenceMatcher(a=a, b=b, autojunk=False).ratio()


def _gray(png: bytes, size: tuple[int, int]) -> np.ndarray:
    img = Image.open(io.BytesIO(png)).convert("L")
    if img.size != size:
        img = img.resize(size)
    return np.asarray(img, dtype=np.float64)


def _box(x: np.ndarray, k: int) -> np.ndarray:
    """Mean over every k×k window (valid positions), by summed-area table."""
    s = np.pad(x, ((1, 0), (1, 0))).cumsum(0).cumsum(1)
    return (s[k:, k:] - s[:-k, k:] - s[k:, :-k] + s[:-k, :-k]) / (k * k)


def ssim(a_png: bytes, b_png: bytes, size: tuple[int, int] = (800, 600), window: int = 8) -> float:
    """Mean SSIM (Wang et al. 2004, uniform 8×8 windows) of two screenshots in grayscale."""
    a, b = _gray(a_png, size), _gray(b_png, size)
    c1, c2 = (0.01 * 255) ** 2, (0.03 * 255) ** 2
    mu_a, mu_b = _box(a, window), _box(b, window)
    var_a = _box(a * a, window) - mu_a**2
    var_b = _box(b * b, window) - mu_b**2
    cov = _box(a * b, window) - mu_a * mu_b
    num = (2 * mu_a * mu_b + c1) * (2 * cov + c2)
    den = (mu_a**2 + mu_b**2 + c1) * (var_a + var_b + c2)
    return float(np.clip((num / den).mean(), 0.0, 1.0))
