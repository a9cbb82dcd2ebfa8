"""Per-page hashes of guest memory: a native fast path and its numpy + xxhash reference.

A page hash is XXH3-64 (seed 0) of the 4 KiB page, with two reserved values: ``0`` means an
all-zero page (or a hole of a sparse memory file) and a non-zero page that would hash to 0
gets ``1``. Both implementations return the same ``uint64`` array (tests compare them).

The fast path (``pagehash.c``) is compiled on first use with ``gcc -O3 -march=native`` into
the sandbox cache and loaded with ctypes; it hashes ~10 GiB/s of memory on one core and skips
holes of a memory file with ``SEEK_DATA``/``SEEK_HOLE`` so that hashing never allocates
pages of a sparse tmpfs file. Without gcc the reference is used (about 3x slower).
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import shutil
import subprocess
import threading
from pathlib import Path

import numpy as np
import xxhash

log = logging.getLogger(__name__)

PAGE_SIZE = 4096
_SRC = Path(__file__).with_name("pagehash.c")
_lib: ctypes.CDLL | None = None
_lib_lock = threading.Lock()
_lib_failed = False


def _cache_dir() -> Path:
    from services.sandbox.images.builder import sandbox_cache_dir

    return sandbox_cache_dir() / "native"


def native_lib() -> ctypes.CDLL | None:
    """The compiled ``pagehash.c`` (built once per source version), or None without gcc."""
    global _lib, _lib_failed
    if _lib is not None or _lib_failed:
        return _lib
    with _lib_lock:
        if _lib is not None or _lib_failed:
            return _lib
        src = _SRC.read_bytes()
        tag = hashlib.sha256(src).hexdigest()[:12]
        out = _cache_dir() / f"libk3pagehash-{tag}.so"
        if not out.exists():
            gcc = shutil.which("gcc")
            if not gcc:
                log.warning("gcc not found: page hashing uses the numpy/xxhash reference")
                _lib_failed = True
                return None
            out.parent.mkdir(parents=True, exist_ok=True)
            tmp = out.with_suffix(f".{os.getpid()}.tmp")
            res = subprocess.run(
                [gcc, "-O3", "-march=native", "-shared", "-fPIC", "-o", str(tmp), str(_SRC)],
                capture_output=True,
                text=True,
            )
            if res.returncode != 0:
                log.warning("building pagehash.c failed, using the reference: %s", res.stderr)
                _lib_failed = True
                return None
            tmp.rename(out)
        lib = ctypes.CDLL(str(out))
        lib.k3_hash_pages.restype = ctypes.c_int64
        lib.k3_hash_pages.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p]
        lib.k3_hash_file.restype = ctypes.c_int64
        lib.k3_hash_file.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p]
        lib.k3_gather_pages.restype = None
        lib.k3_gather_pages.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int64]
        _lib = lib
        return lib


def _as_pages(buf) -> np.ndarray:
    arr = np.frombuffer(buf, dtype=np.uint8) if not isinstance(buf, np.ndarray) else buf
    if arr.dtype != np.uint8 or arr.size % PAGE_SIZE:
        raise ValueError(f"buffer must be uint8 with a multiple of {PAGE_SIZE} bytes")
    return arr.reshape(-1, PAGE_SIZE)


def naive_page_hashes(buf) -> np.ndarray:
    """Reference: ``uint64[npages]`` page hashes of ``buf`` with python-xxhash and numpy."""
    pages = _as_pages(buf)
    nonzero = pages.view(np.uint64).any(axis=1)
    out = np.zeros(len(pages), dtype=np.uint64)
    for i in np.flatnonzero(nonzero):
        out[i] = xxhash.xxh3_64_intdigest(pages[i].data) or 1
    return out


def page_hashes(buf) -> np.ndarray:
    """``uint64[npages]`` page hashes of ``buf`` (native when available)."""
    pages = _as_pages(buf)
    lib = native_lib()
    if lib is None:
        return naive_page_hashes(pages)
    pages = np.ascontiguousarray(pages)
    out = np.empty(len(pages), dtype=np.uint64)
    lib.k3_hash_pages(pages.ctypes.data, len(pages), out.ctypes.data)
    return out


def file_page_hashes(fd: int, mapped: np.ndarray) -> np.ndarray:
    """Page hashes of a memory file: ``fd`` open on it, ``mapped`` a shared uint8 mapping of
    the whole file. Holes hash to 0 and are never touched."""
    pages = _as_pages(mapped)
    lib = native_lib()
    if lib is None:
        out = np.zeros(len(pages), dtype=np.uint64)
        size, pos = len(pages) * PAGE_SIZE, 0
        while pos < size:
            try:
                data = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError:
                break
            hole = min(os.lseek(fd, data, os.SEEK_HOLE), size)
            a, b = data // PAGE_SIZE, -(-hole // PAGE_SIZE)
            out[a:b] = naive_page_hashes(pages[a:b])
            pos = hole
        return out
    out = np.empty(len(pages), dtype=np.uint64)
    if lib.k3_hash_file(fd, pages.ctypes.data, len(pages), out.ctypes.data) < 0:
        raise OSError("k3_hash_file failed")
    return out


def gather_pages(dst: np.ndarray, dst_idx: np.ndarray, src: np.ndarray, src_idx: np.ndarray):
    """``dst[dst_idx[i]] = src[src_idx[i]]`` for page-shaped uint8 arrays (no temporaries)."""
    dst_idx = np.ascontiguousarray(dst_idx, dtype=np.int64)
    src_idx = np.ascontiguousarray(src_idx, dtype=np.int64)
    lib = native_lib()
    if lib is None or not dst.flags.c_contiguous or not src.flags.c_contiguous:
        dst[dst_idx] = src[src_idx]
        return
    lib.k3_gather_pages(
        dst.ctypes.data, dst_idx.ctypes.data, src.ctypes.data, src_idx.ctypes.data, len(dst_idx)
    )
