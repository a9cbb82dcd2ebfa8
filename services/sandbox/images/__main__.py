"""``python -m services.sandbox.images build busybox|debian [--force]``: build (or reuse) an
image in the sandbox cache and print where it is and how long it took."""

from __future__ import annotations

import argparse
import logging
import sys
import time

from services.sandbox.images.builder import IMAGES, build_busybox_image, build_debian_image


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m services.sandbox.images")
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="build (or reuse) an image")
    b.add_argument("name", choices=sorted(IMAGES))
    b.add_argument("--force", action="store_true", help="rebuild even when cached")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    t0 = time.monotonic()
    if args.name == "debian":
        img = build_debian_image(force=args.force, progress=lambda m: print(f"debian image: {m}"))
    else:
        img = build_busybox_image(force=args.force)
    where = img.disk or img.initrd
    print(f"{args.name}: {where} ({time.monotonic() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
