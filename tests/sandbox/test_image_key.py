"""The Debian image's cache key: what goes into the image names its folder, so changing a
package list rebuilds the image instead of reusing a cached one without it."""

from __future__ import annotations

import pytest

from services.sandbox.images import builder


def test_package_lists_are_in_the_cache_key(monkeypatch: pytest.MonkeyPatch) -> None:
    now = builder.debian_image_dir()
    assert "nodejs" in builder.DEBIAN_APT_PACKAGES and "npm" in builder.DEBIAN_APT_PACKAGES
    monkeypatch.setattr(builder, "DEBIAN_APT_PACKAGES", ())
    without_node = builder.debian_image_dir()
    monkeypatch.setattr(builder, "DEBIAN_PACKAGES", builder.DEBIAN_PACKAGES[:-1])
    assert len({now, without_node, builder.debian_image_dir()}) == 3
    assert now.parent == without_node.parent and now.name.startswith("debian-bookworm-")
