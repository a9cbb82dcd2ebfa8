"""One behavioural suite over both object store backends: a local folder and S3 (a real moto
server in its own process, spoken to through the minio SDK)."""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
import threading
import tracemalloc
import uuid

import pytest

from shared.objectstore import (
    LocalObjectStore,
    NotFound,
    ObjectStore,
    S3ObjectStore,
    make_object_store,
    validate_key,
)
from shared.settings import SettingsError, load_settings

MiB = 1024 * 1024


@pytest.fixture(params=["local", "s3"])
def store(request, tmp_path) -> ObjectStore:
    if request.param == "local":
        s: ObjectStore = LocalObjectStore(tmp_path / "objects")
    else:
        url = request.getfixturevalue("moto_s3_url")
        s = S3ObjectStore(
            url,
            access_key="testing",
            secret_key="testing",
            bucket=f"t-{uuid.uuid4().hex[:12]}",
            part_size=5 * MiB,
        )
    yield s
    s.close()


def _pattern_chunks(total: int, chunk: int = 256 * 1024):
    """Deterministic, incompressible-looking chunks, produced on demand."""
    block = hashlib.sha256(b"seed").digest() * (chunk // 32)
    for i in range(0, total, chunk):
        n = min(chunk, total - i)
        yield (i.to_bytes(8, "little") + block)[:n]


# --------------------------------------------------------------------------------- basics


def test_round_trip_bytes(store):
    data = b"hello \x00 world" * 100
    info = store.put("docs/hello.bin", data, content_type="text/plain")
    assert info.key == "docs/hello.bin"
    assert info.size == len(data)
    assert info.sha256 == hashlib.sha256(data).hexdigest()
    assert info.etag
    assert store.get("docs/hello.bin") == data
    st = store.stat("docs/hello.bin")
    assert (st.key, st.size, st.etag) == ("docs/hello.bin", len(data), info.etag)
    assert st.modified.tzinfo is not None
    # Replacing an object replaces it entirely.
    store.put("docs/hello.bin", b"short")
    assert store.get("docs/hello.bin") == b"short"
    assert store.stat("docs/hello.bin").size == 5


def test_empty_object_and_other_input_forms(store, tmp_path):
    assert store.put("empty", b"").size == 0
    assert store.get("empty") == b""
    store.put("from-file", io.BytesIO(b"abc" * 1000))
    assert store.get("from-file") == b"abc" * 1000
    store.put("from-iter", iter([b"ab", b"", b"cd"]), length=4)
    assert store.get("from-iter") == b"abcd"
    store.put("from-bytearray", bytearray(b"xyz"))
    assert store.get("from-bytearray") == b"xyz"

    src = tmp_path / "src.bin"
    src.write_bytes(os.urandom(3 * 1024 + 7))
    assert store.put_file("files/src.bin", src).size == src.stat().st_size
    dest = tmp_path / "out" / "copy.bin"
    assert store.get_file("files/src.bin", dest).size == src.stat().st_size
    assert dest.read_bytes() == src.read_bytes()
    assert not [p for p in dest.parent.iterdir() if p.name != "copy.bin"]  # no temp left


def test_length_mismatch_is_rejected(store):
    with pytest.raises(ValueError, match="expected 10 bytes"):
        store.put("short", io.BytesIO(b"12345"), length=10)
    assert not store.exists("short")
    with pytest.raises(ValueError, match="expected 3 bytes"):
        store.put("long", b"12345", length=3)
    assert not store.exists("long")


def test_streaming_40_mib_without_holding_it(store, tmp_path):
    total = 40 * MiB
    want = hashlib.sha256()
    for chunk in _pattern_chunks(total):
        want.update(chunk)

    tracemalloc.start()
    try:
        info = store.put("big/stream.bin", _pattern_chunks(total))  # unknown length
        _, put_peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        got = hashlib.sha256()
        size = 0
        with store.open("big/stream.bin") as reader:
            for chunk in reader:
                got.update(chunk)
                size += len(chunk)
        _, get_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert info.size == total == size == store.stat("big/stream.bin").size
    assert info.sha256 == want.hexdigest() == got.hexdigest()
    # Bounded by the part size, never the whole object: the local store holds a chunk or two;
    # minio's put_object up to three 5 MiB parts (the part it reads, that part without its
    # look-ahead byte, and the part before it until it is replaced).
    put_bound = 3 * 5 * MiB + 2 * MiB if isinstance(store, S3ObjectStore) else 4 * MiB
    assert put_peak < put_bound < total, put_peak
    assert get_peak < 6 * MiB, get_peak

    # A stream longer than announced is refused and leaves no object (S3: aborted multipart).
    with pytest.raises(ValueError, match="expected"):
        store.put("big/wrong.bin", _pattern_chunks(total), length=total - 1)
    assert not store.exists("big/wrong.bin")
    # Bytes larger than a part: multipart, and S3 still records the sha256.
    blob = b"".join(_pattern_chunks(6 * MiB))
    store.put("big/blob.bin", blob)
    assert store.get("big/blob.bin") == blob
    assert store.stat("big/blob.bin").sha256 in (None, hashlib.sha256(blob).hexdigest())
    if isinstance(store, S3ObjectStore):
        assert store.stat("big/blob.bin").sha256 == hashlib.sha256(blob).hexdigest()

    # A file of known length, both ways.
    src = tmp_path / "big.bin"
    with open(src, "wb") as f:
        for chunk in _pattern_chunks(total):
            f.write(chunk)
    store.put_file("big/file.bin", src)
    store.get_file("big/file.bin", tmp_path / "back.bin")
    assert hashlib.sha256((tmp_path / "back.bin").read_bytes()).hexdigest() == want.hexdigest()


def test_reader_is_file_like(store):
    store.put("r", b"0123456789")
    with store.open("r") as reader:
        assert reader.read(3) == b"012"
        buf = bytearray(4)
        assert reader.readinto(buf) == 4 and bytes(buf) == b"3456"
        assert reader.read() == b"789"
        assert reader.read(5) == b""
    assert reader.closed


# -------------------------------------------------------------------------------- listing


def test_list_by_prefix_sorted_recursive(store):
    keys = ["a/2/y", "b/1", "a-b", "a/1", "ab", "a/2/x", "a/10", "z"]
    for k in keys:
        store.put(k, k.encode())
    assert [i.key for i in store.list()] == sorted(keys)
    assert [i.key for i in store.list("a/")] == ["a/1", "a/10", "a/2/x", "a/2/y"]
    assert [i.key for i in store.list("a/1")] == ["a/1", "a/10"]
    assert [i.key for i in store.list("a")] == ["a-b", "a/1", "a/10", "a/2/x", "a/2/y", "ab"]
    assert [i.key for i in store.list("a/2/")] == ["a/2/x", "a/2/y"]
    assert list(store.list("nothing/")) == []
    for bad in ("/a", "a/../b", "a\x00"):
        with pytest.raises(ValueError, match="prefix"):
            store.list(bad)  # refused at the call, before iterating
    sizes = {i.key: i.size for i in store.list()}
    assert sizes == {k: len(k) for k in keys}


# ---------------------------------------------------------------------- exists and delete


def test_exists_delete_idempotent(store):
    store.put("x/y", b"1")
    assert store.exists("x/y")
    assert not store.exists("x")  # a prefix is not an object
    assert not store.exists("x/z")
    store.delete("x/y")
    assert not store.exists("x/y")
    store.delete("x/y")  # again: no error
    store.delete("never/was")
    assert list(store.list()) == []


def test_missing_keys_raise_not_found(store):
    for call in (store.get, store.stat, store.open):
        with pytest.raises(NotFound) as err:
            call("missing/key")
        assert isinstance(err.value, KeyError)
        assert err.value.key == "missing/key"
        assert "missing/key" in str(err.value)
    with pytest.raises(KeyError):
        store.get_file("missing/key", "/tmp/never-written-k3stack")


# ---------------------------------------------------------------------- content addressed


def test_content_addressed_put_dedupes(store, monkeypatch):
    data = b"page" * 1024
    digest = hashlib.sha256(data).hexdigest()

    puts: list[str] = []
    real_put = store.put

    def counting_put(key, *args, **kwargs):
        puts.append(key)
        return real_put(key, *args, **kwargs)

    monkeypatch.setattr(store, "put", counting_put)

    key = store.put_content_addressed(data)
    assert key == f"cas/{digest}"
    assert store.get(key) == data
    assert puts == [key]
    before = store.stat(key)
    local_inode = os.stat(store.root / key).st_ino if isinstance(store, LocalObjectStore) else None

    assert store.put_content_addressed(data) == key
    assert puts == [key]  # second put skipped the upload
    after = store.stat(key)
    assert (after.etag, after.modified) == (before.etag, before.modified)
    if local_inode is not None:
        assert os.stat(store.root / key).st_ino == local_inode

    assert store.put_content_addressed(b"other", prefix="ckpt/pages/") == (
        "ckpt/pages/" + hashlib.sha256(b"other").hexdigest()
    )


def test_put_many_content_addressed(store, monkeypatch):
    pages = [bytes([i % 7]) * 4096 for i in range(40)]  # 7 distinct pages, repeated
    existing = store.put_content_addressed(pages[0])

    puts: list[str] = []
    lock = threading.Lock()
    real_put = store.put

    def counting_put(key, *args, **kwargs):
        with lock:
            puts.append(key)
        return real_put(key, *args, **kwargs)

    monkeypatch.setattr(store, "put", counting_put)
    keys = store.put_many_content_addressed(iter(pages))
    assert keys == ["cas/" + hashlib.sha256(p).hexdigest() for p in pages]
    assert existing not in puts
    assert sorted(puts) == sorted(set(keys) - {existing})  # each new page uploaded once
    assert [i.key for i in store.list("cas/")] == sorted(set(keys))
    assert store.put_many_content_addressed([]) == []


# -------------------------------------------------------------------------------- keys


BAD_KEYS = ["", "/abs", "a/../b", "..", "a/..", "nul\x00byte", "a//b", "./a", "dir/", "a\\b"]


@pytest.mark.parametrize("key", BAD_KEYS)
def test_invalid_keys_rejected(store, key):
    for call in (
        lambda: store.put(key, b"x"),
        lambda: store.get(key),
        lambda: store.stat(key),
        lambda: store.exists(key),
        lambda: store.delete(key),
        lambda: store.open(key),
    ):
        with pytest.raises(ValueError, match="object key"):
            call()


def test_validate_key_messages():
    assert validate_key("a/b.c/d-e_f") == "a/b.c/d-e_f"
    with pytest.raises(ValueError, match="must not be empty"):
        validate_key("")
    with pytest.raises(ValueError, match="leading '/'"):
        validate_key("/etc/passwd")
    with pytest.raises(ValueError, match=r"'\.\.' segments"):
        validate_key("a/../../etc")
    with pytest.raises(ValueError, match="NUL"):
        validate_key("a\x00")
    with pytest.raises(ValueError, match="longer than 1024"):
        validate_key("k" * 1025)


# ----------------------------------------------------------------------- concurrency


def test_concurrent_writers_and_readers_see_whole_objects(store):
    versions = [bytes([v]) * (256 * 1024) for v in range(4)]
    store.put("shared/key", versions[0])
    errors: list[BaseException] = []
    seen: set[bytes] = set()

    def writer(v: bytes) -> None:
        try:
            for _ in range(3):
                store.put("shared/key", v)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def reader() -> None:
        try:
            for _ in range(6):
                data = store.get("shared/key")
                assert data in versions, "saw a partial or mixed object"
                seen.add(data[:1])
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(v,)) for v in versions[1:]]
    threads += [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert store.get("shared/key") in versions


# ------------------------------------------------------------------------- local only


def test_local_store_specifics(tmp_path):
    store = LocalObjectStore(tmp_path / "objs")
    store.put("a/b/c", b"1")
    # Temp files live in a reserved folder that is neither listed nor addressable.
    assert [i.key for i in store.list()] == ["a/b/c"]
    with pytest.raises(ValueError, match="reserved"):
        store.put(".k3stack-tmp/x", b"1")
    # A key cannot also be a folder of other keys here.
    with pytest.raises(ValueError, match="conflicts"):
        store.put("a/b", b"2")
    with pytest.raises(ValueError, match="conflicts"):
        store.put("a/b/c/d", b"2")
    assert store.get("a/b/c") == b"1"
    # Deleting prunes the folders it emptied, never the root.
    store.delete("a/b/c")
    assert not (tmp_path / "objs" / "a").exists()
    assert (tmp_path / "objs").is_dir()
    assert not list((tmp_path / "objs" / ".k3stack-tmp").iterdir())
    # A failed put leaves no temp file behind.
    with pytest.raises(ValueError):
        store.put("x", io.BytesIO(b"123"), length=5)
    assert not list((tmp_path / "objs" / ".k3stack-tmp").iterdir())


_PROCESS_WORKER = """
import sys
from shared.objectstore import LocalObjectStore
store = LocalObjectStore(sys.argv[1])
me = sys.argv[2]
for i in range(150):
    folder = f"shared/{i % 3}"
    store.put(f"{folder}/{me}", me.encode() * 1000)  # races deletes pruning the same folder
    assert store.get(f"{folder}/{me}") == me.encode() * 1000
    store.put_content_addressed(b"same page for everyone")
    store.put("one/key", me.encode() * 5000)
    store.delete(f"{folder}/{me}")
"""


def test_local_store_is_safe_across_processes(tmp_path):
    root = tmp_path / "objs"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _PROCESS_WORKER, str(root), name], stderr=subprocess.PIPE
        )
        for name in "abc"
    ]
    errors = [p.communicate(timeout=60)[1].decode() for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], errors
    store = LocalObjectStore(root)
    assert store.get("one/key") in (b"a" * 5000, b"b" * 5000, b"c" * 5000)
    assert [i.key for i in store.list()] == [
        store.content_key(b"same page for everyone"),
        "one/key",
    ]
    assert not list((root / ".k3stack-tmp").iterdir())
    assert list(store.list(".k3stack-tmp/")) == []


# -------------------------------------------------------------------- backend selection


def test_make_object_store_local_default_and_file_url(clean_env, tmp_path):
    s = make_object_store(load_settings())
    assert isinstance(s, LocalObjectStore)
    assert s.root == clean_env / "objects"
    s.put("k", b"v")
    assert (clean_env / "objects" / "k").read_bytes() == b"v"

    other = tmp_path / "elsewhere"
    s2 = make_object_store(load_settings(object_store_url=f"file://{other}"))
    assert isinstance(s2, LocalObjectStore) and s2.root == other


def test_make_object_store_s3_from_env(clean_env, monkeypatch, moto_s3_url):
    bucket = f"env-{uuid.uuid4().hex[:10]}"
    monkeypatch.setenv("K3STACK_OBJECT_STORE_URL", moto_s3_url)
    monkeypatch.setenv("K3STACK_OBJECT_STORE_ACCESS_KEY", "testing")
    monkeypatch.setenv("K3STACK_OBJECT_STORE_SECRET_KEY", "testing")
    monkeypatch.setenv("K3STACK_OBJECT_STORE_BUCKET", bucket)
    s = make_object_store(load_settings())
    assert isinstance(s, S3ObjectStore)
    assert s.bucket == bucket
    assert s.client.bucket_exists(bucket)  # created because it was missing
    s.put("k", b"v")
    assert s.get("k") == b"v"
    # A second store on the same bucket finds it and the object.
    assert make_object_store(load_settings()).get("k") == b"v"


@pytest.mark.parametrize("url", ["ftp://example.com/x", "s4://bucket", "/just/a/path"])
def test_make_object_store_rejects_unknown_scheme(clean_env, url):
    with pytest.raises(ValueError, match="K3STACK_OBJECT_STORE_URL") as err:
        make_object_store(load_settings(object_store_url=url))
    assert isinstance(err.value, SettingsError)
    assert url in str(err.value)


def test_make_object_store_rejects_path_in_s3_url(clean_env):
    with pytest.raises(ValueError, match="K3STACK_OBJECT_STORE_BUCKET"):
        make_object_store(load_settings(object_store_url="http://127.0.0.1:9/bucket"))
