"""Issue 14: every bad dataset file is a clear DatasetFormatError naming the file and the field, an
incomplete set of shards is refused unless asked for, no temporary file outlives its writer, and
files honour the umask."""

from __future__ import annotations

import io
import json
import os
import signal
import stat
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis_profiles import examples

from teachers.chunked import open_dataset, sample_to_store
from teachers.dataset import (
    META_CHECKSUM,
    DatasetFormatError,
    UnverifiedDatasetWarning,
    load_dataset,
    metadata_checksum,
    save_dataset,
)
from teachers.ladder import Ladder
from teachers.sampling import BLOCK_SIZE, sample_ladder
from teachers.spec_io import atomic_write, remove_stale_temps, save_spec, temp_path
from teachers.tent import load_tent_dataset, sample_tent, save_tent_dataset

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def ladder():
    return Ladder.random(depth=2, branching=2, events=[2, 3, 4], seed=0)


@pytest.fixture
def good(tmp_path, ladder):
    return save_dataset(sample_ladder(ladder, 50, seed=3), tmp_path / "good.npz")


def _members(path) -> tuple[dict, dict[str, np.ndarray]]:
    with np.load(path, allow_pickle=False) as npz:
        meta = json.loads(str(npz["meta"][()]))
        return meta, {k: npz[k] for k in npz.files if k != "meta"}


def _rewrite(src, dst, *, meta_edit=None, array_edit=None, reseal=False, drop_checksums=False):
    """Copy a dataset file with its meta or members edited; ``reseal``: as a forger would, recompute
    every checksum so that only the field-by-field validation can catch the edit."""
    meta, arrays = _members(src)
    if array_edit:
        array_edit(arrays)
    if reseal:
        from teachers.dataset import _sha256

        meta["sha256"] = {k: _sha256(arrays[k]) for k in ("z", "y", "x") if k in arrays}
        meta["spec_sha256"] = {k: {"dtype": v.dtype.str, "shape": list(v.shape), "sha256": _sha256(v)}
                               for k, v in arrays.items() if k.startswith("spec.")}
    if meta_edit:
        meta_edit(meta)
    if drop_checksums:
        meta.pop(META_CHECKSUM, None)
        meta.pop("spec_sha256", None)
    elif reseal:
        meta.pop(META_CHECKSUM, None)
        meta[META_CHECKSUM] = metadata_checksum(meta)
    np.savez(dst, meta=np.array(json.dumps(meta)), **arrays)
    return Path(dst)


def _set(key, value):
    def edit(meta):
        meta[key] = value
    return edit


# ---------------------------------------------------------------------- metadata, spec, start/total/seed, z
@pytest.mark.parametrize("key,value", [("start", 7), ("total", 5000), ("seed", 4), ("n", 49), ("x_stored", True),
                                       ("shard", [1, 2]), ("block_size", 1)])
def test_an_edited_metadata_field_is_named(tmp_path, good, key, value):
    bad = _rewrite(good, tmp_path / "bad.npz", meta_edit=_set(key, value))
    with pytest.raises(DatasetFormatError, match=rf"bad\.npz.*metadata field\(s\) '{key}' changed"):
        load_dataset(bad)


def test_an_edited_or_removed_spec_field_is_named(tmp_path, good):
    def emission(meta):
        meta["spec"]["emission"]["kind"] = "gaussian"
    with pytest.raises(DatasetFormatError, match=r"field\(s\) 'spec.emission' changed"):
        load_dataset(_rewrite(good, tmp_path / "a.npz", meta_edit=emission))
    with pytest.raises(DatasetFormatError, match=r"field\(s\) 'seed' changed"):  # a removed field, too
        load_dataset(_rewrite(good, tmp_path / "b.npz", meta_edit=lambda m: m.pop("seed")))


def test_an_edited_spec_array_is_refused(tmp_path, good):
    def flip(arrays):
        arrays["spec.tables.0"] = arrays["spec.tables.0"][..., ::-1].copy()
    with pytest.raises(DatasetFormatError, match=r"spec array 'spec.tables.0' fails its SHA-256 check"):
        load_dataset(_rewrite(good, tmp_path / "s.npz", array_edit=flip))
    # a spec array's dtype edited (same values): refused too
    def widen(arrays):
        arrays["spec.prior"] = arrays["spec.prior"].astype(np.float32)
    with pytest.raises(DatasetFormatError, match=r"spec array 'spec.prior'"):
        load_dataset(_rewrite(good, tmp_path / "d.npz", array_edit=widen))


@pytest.mark.parametrize("edit,field", [
    (_set("start", "0"), r"field 'start' is '0'"),
    (_set("start", 10), r"field 'total' is 50, less than start \+ n = 10 \+ 50"),
    (_set("total", 49), r"field 'total' is 49"),
    (_set("seed", -1), r"field 'seed' is -1"),
    (_set("seed", 1.5), r"field 'seed' is 1.5"),
    (_set("n", True), r"field 'n' is True"),
    (_set("x_stored", "no"), r"field 'x_stored' is 'no'"),
    (_set("shard", [2, 2]), r"field 'shard' is \[2, 2\]"),
    (_set("sha256", None), r"field 'sha256'"),
    (_set("spec", [1]), r"field 'spec' is not an object"),
    (lambda m: m.pop("total"), r"lacks field 'total'"),
    (lambda m: m.pop("spec"), r"lacks field 'spec'"),
    (lambda m: m["spec"].pop("events"), r"invalid ladder spec \(metadata field 'spec'\)"),
    (lambda m: m["spec"].update(branching="x"), r"invalid ladder spec"),
])
def test_forged_metadata_is_validated_field_by_field(tmp_path, good, edit, field):
    """With every checksum recomputed (a forger, or a file written without them), the validation
    still names the field."""
    bad = _rewrite(good, tmp_path / "bad.npz", meta_edit=edit, reseal=True)
    with pytest.raises(DatasetFormatError, match=rf"bad\.npz.*{field}"):
        load_dataset(bad)


def test_z_of_another_dtype_or_out_of_range_is_refused(tmp_path, good):
    def int16(arrays):
        arrays["z"] = arrays["z"].astype(np.int16)
    with pytest.raises(DatasetFormatError, match=r"z is int16, expected the ladder's event dtype uint8"):
        load_dataset(_rewrite(good, tmp_path / "dt.npz", array_edit=int16, reseal=True))

    def out_of_range(arrays):
        arrays["z"] = arrays["z"].copy()
        arrays["z"][5, 3] = 3  # region 3 is at level 2 (4 events): fine
        arrays["z"][6, 2] = 3  # region 2 is at level 1 (3 events): out of range
    with pytest.raises(DatasetFormatError, match=r"z: region 2 \(level 1\) has event 3 in row 6, outside its "
                                                 r"range \[0, 3\)"):
        load_dataset(_rewrite(good, tmp_path / "r.npz", array_edit=out_of_range, reseal=True))

    def root(arrays):  # y follows: still out of range at the root
        arrays["z"] = arrays["z"].copy()
        arrays["z"][0, 0] = 2
        arrays["y"] = arrays["z"][:, 0].astype(np.int64)
    with pytest.raises(DatasetFormatError, match=r"region 0 \(level 0\) has event 2"):
        load_dataset(_rewrite(good, tmp_path / "root.npz", array_edit=root, reseal=True))

    def y(arrays):
        arrays["y"] = 1 - arrays["y"]
    with pytest.raises(DatasetFormatError, match=r"y \(int64\) is not z's root column"):
        load_dataset(_rewrite(good, tmp_path / "y.npz", array_edit=y, reseal=True))
    with pytest.raises(DatasetFormatError, match=r"member 'z' fails its SHA-256 check"):
        load_dataset(_rewrite(good, tmp_path / "nz.npz", array_edit=out_of_range))


def test_save_refuses_events_out_of_range(tmp_path, ladder):
    s = sample_ladder(ladder, 10, seed=0)
    s.z[3, 1] = 2  # region 1 (level 1) has 3 events: fine
    save_dataset(s, tmp_path / "ok.npz")
    s.z[3, 1] = 9
    with pytest.raises(ValueError, match=r"region 1 \(level 1\) has event 9"):
        save_dataset(s, tmp_path / "bad.npz")
    assert not (tmp_path / "bad.npz").exists()


def test_files_without_checksums_still_load_with_a_warning(tmp_path, good):
    """A file written before metadata/spec checksums (the former format-1 writer) loads, validated
    field by field, and says that it could not be checksummed."""
    old = _rewrite(good, tmp_path / "old.npz", drop_checksums=True)
    with pytest.warns(UnverifiedDatasetWarning, match=r"old\.npz.*before dataset files had metadata checksums"):
        back = load_dataset(old)
    assert torch.equal(back.z, load_dataset(good).z)
    inconsistent = _rewrite(good, tmp_path / "old2.npz", drop_checksums=True, meta_edit=_set("start", 3))
    with pytest.warns(UnverifiedDatasetWarning), pytest.raises(DatasetFormatError, match=r"field 'total' is 50"):
        load_dataset(inconsistent)
    with pytest.warns(UnverifiedDatasetWarning), pytest.raises(DatasetFormatError, match=r"lacks field 'seed'"):
        load_dataset(_rewrite(good, tmp_path / "old3.npz", drop_checksums=True, meta_edit=lambda m: m.pop("seed")))


def test_tent_files_are_checksummed_and_validated(tmp_path):
    path = save_tent_dataset(sample_tent(100, 3, seed=1), tmp_path / "t.npz")
    with pytest.raises(DatasetFormatError, match=r"field\(s\) 'k' changed"):
        load_tent_dataset(_rewrite(path, tmp_path / "k.npz", meta_edit=_set("k", 4)))
    for key, value, field in [("noise", -1.0, "noise"), ("start", 1, "total"), ("seed", "1", "seed")]:
        meta, arrays = _members(path)
        meta[key] = value
        meta.pop(META_CHECKSUM)
        meta[META_CHECKSUM] = metadata_checksum(meta)
        np.savez(tmp_path / "f.npz", meta=np.array(json.dumps(meta)), **arrays)
        with pytest.raises(DatasetFormatError, match=rf"metadata field '{field}'"):
            load_tent_dataset(tmp_path / "f.npz")


# ---------------------------------------------------------------------- format 2: the same checks
def _reseal_store(path: Path, edit) -> None:
    """Edit a store's attributes and recompute its metadata checksum (a forger)."""
    meta = json.loads((path / "zarr.json").read_text())
    attrs = meta["attributes"]
    edit(attrs)
    attrs.pop(META_CHECKSUM, None)
    attrs[META_CHECKSUM] = metadata_checksum(attrs)
    (path / "zarr.json").write_text(json.dumps(meta))


def test_format_2_edits_are_named(tmp_path, ladder):
    path = sample_to_store(ladder, 5000, tmp_path / "d.zarr", seed=3, chunk_rows=BLOCK_SIZE, compress=False)
    meta = json.loads((path / "zarr.json").read_text())
    del meta["attributes"]["total"]
    (path / "zarr.json").write_text(json.dumps(meta))
    with pytest.raises(DatasetFormatError, match=r"d\.zarr.*metadata field\(s\) 'total' changed"):
        open_dataset(path)
    for i, (edit, field) in enumerate([(lambda a: a.pop("total"), r"lacks field\(s\) \['total'\]"),
                                       (_set("seed", -1), r"field 'seed' is -1, expected an integer >= 0"),
                                       (_set("start", 10), r"field 'total' is 5000, less than start \+ n"),
                                       (_set("x_stored", 0), r"field 'x_stored' is 0"),
                                       (_set("spec_sha256", {"spec.prior": 1}), r"field 'spec_sha256'"),
                                       (_set("event_dtype", "int16"), r"field 'event_dtype' is 'int16'")]):
        p = sample_to_store(ladder, 5000, tmp_path / f"e{i}.zarr", seed=3, chunk_rows=BLOCK_SIZE)
        _reseal_store(p, edit)
        with pytest.raises(DatasetFormatError, match=field):
            open_dataset(p)
    # z out of range in a chunk, with the chunk's checksum forged too: refused when the chunk is read
    import zarr

    from teachers.dataset import _sha256

    p = sample_to_store(ladder, 5000, tmp_path / "r.zarr", seed=3, chunk_rows=BLOCK_SIZE, compress=False)
    arr = zarr.open_array(str(p / "z"), mode="r+")
    rows = arr[BLOCK_SIZE:]
    rows[7, 5] = 9  # region 5 is at level 2 (4 events)
    arr[BLOCK_SIZE:] = rows

    def forge(attrs):
        attrs["chunk_sha256"]["z"][1] = _sha256(np.ascontiguousarray(rows))
    _reseal_store(p, forge)
    data = open_dataset(p)
    assert len(data.chunk(0)) == BLOCK_SIZE
    with pytest.raises(DatasetFormatError, match=r"array 'z' chunk 1 .*region 5 \(level 2\) has event 9 in row 7, "
                                                 r"outside its range \[0, 4\)"):
        data.chunk(1)


# ---------------------------------------------------------------------- incomplete shard sets
def test_a_missing_shard_is_refused_unless_partial(tmp_path, ladder):
    npz = [save_dataset(sample_ladder(ladder, 9000, seed=2, shard=f"{i}/3"), tmp_path / f"s{i}.npz")
           for i in range(3)]
    full = sample_ladder(ladder, 9000, seed=2)
    with pytest.raises(DatasetFormatError, match=r"s2\.npz.*rows \[0, 3000\) are missing.*partial=True"):
        load_dataset(npz[1:])
    with pytest.raises(DatasetFormatError, match=r"s0\.npz' holds stream rows \[0, 3000\) of 9000: rows "
                                                 r"\[3000, 9000\) are missing"):
        load_dataset(npz[0])
    tail = load_dataset(npz[1:], partial=True)
    assert (tail.start, len(tail), tail.total) == (3000, 6000, 9000) and torch.equal(tail.z, full.z[3000:])
    with pytest.raises(DatasetFormatError, match=r"gap or overlap"):  # a hole inside is never allowed
        load_dataset([npz[0], npz[2]], partial=True)
    assert torch.equal(load_dataset(npz).z, full.z)

    stores = [sample_to_store(ladder, 9000, tmp_path / f"s{i}.zarr", seed=2, shard=f"{i}/3", chunk_rows=BLOCK_SIZE)
              for i in range(3)]
    with pytest.raises(DatasetFormatError, match=r"rows \[6000, 9000\) are missing.*partial=True"):
        open_dataset(stores[:2])
    with pytest.raises(DatasetFormatError, match=r"rows \[6000, 9000\) are missing.*partial=True"):
        load_dataset(stores[:2])
    head = load_dataset(stores[:2], partial=True)
    assert head.missing_rows == [(6000, 9000)] and torch.equal(head.to_sample().z, full.z[:6000])

    tents = [save_tent_dataset(sample_tent(900, 2, seed=1, shard=f"{i}/3"), tmp_path / f"t{i}.npz")
             for i in range(3)]
    with pytest.raises(DatasetFormatError, match=r"rows \[0, 300\) are missing.*partial=True"):
        load_tent_dataset(tents[1:])
    assert len(load_tent_dataset(tents[1:], partial=True)) == 600
    with pytest.raises(TypeError, match="partial"):
        load_dataset(npz, partial="yes")


# ---------------------------------------------------------------------- temporary files
_KILLED_WRITER = """
import os, signal, sys
from teachers.spec_io import atomic_write

def write(f):
    f.write(b"half a dataset" * 1000)
    f.flush()
    os.kill(os.getpid(), signal.SIGKILL)

atomic_write(sys.argv[1], write)
"""


def test_a_killed_writers_temp_file_is_removed_by_the_next_write(tmp_path, ladder):
    target = tmp_path / "d.npz"
    r = subprocess.run([sys.executable, "-c", _KILLED_WRITER, str(target)], cwd=REPO,
                       env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True)
    assert r.returncode == -signal.SIGKILL
    left = [p for p in tmp_path.iterdir() if p.name.startswith(".d.npz.tmp-")]
    assert len(left) == 1 and left[0].stat().st_size > 0 and not target.exists()  # never a loadable file
    # a stale one of another dead process, and one of a live process (which must stay)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = temp_path(target, int(dead.stdout))
    stale.write_bytes(b"x" * 100)
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        busy = temp_path(target, live.pid)
        busy.write_bytes(b"in use")
        save_dataset(sample_ladder(ladder, 20, seed=0), target)
        names = sorted(p.name for p in tmp_path.iterdir())
        assert names == sorted([busy.name, "d.npz"]), names
        assert len(load_dataset(target)) == 20
    finally:
        live.kill()
        live.wait()
    assert remove_stale_temps(target) == [busy]  # now its process is gone too


@pytest.mark.parametrize("exc", [RuntimeError("disk full"), KeyboardInterrupt()])
def test_a_failed_write_leaves_nothing(tmp_path, exc):
    target = tmp_path / "out.bin"
    target.write_bytes(b"old")

    def write(f):
        f.write(b"new" * 100)
        raise exc
    with pytest.raises(type(exc)):
        atomic_write(target, write)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.bin"] and target.read_bytes() == b"old"


def test_a_failing_npz_writer_leaves_nothing(tmp_path, ladder, monkeypatch):
    def boom(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(np, "savez", boom)
    with pytest.raises(KeyboardInterrupt):
        save_dataset(sample_ladder(ladder, 20, seed=0), tmp_path / "d.npz")
    with pytest.raises(KeyboardInterrupt):
        save_tent_dataset(sample_tent(20, 1), tmp_path / "t.npz")
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------- umask
@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_files_and_stores_honour_the_umask(tmp_path, ladder, umask):
    old = os.umask(umask)
    try:
        files = [save_dataset(sample_ladder(ladder, 20, seed=0), tmp_path / "d.npz"),
                 save_tent_dataset(sample_tent(20, 1), tmp_path / "t.npz"),
                 save_spec(ladder, tmp_path / "spec.json")]
        store = sample_to_store(ladder, 5000, tmp_path / "s.zarr", chunk_rows=BLOCK_SIZE)
    finally:
        os.umask(old)
    for f in files:
        assert stat.S_IMODE(f.stat().st_mode) == 0o666 & ~umask, f
    modes = {stat.S_IMODE(p.stat().st_mode) for p in [store, *store.rglob("*")] if p.is_dir()}
    assert modes == {0o777 & ~umask}
    modes = {stat.S_IMODE(p.stat().st_mode) for p in store.rglob("*") if p.is_file()}
    assert modes == {0o666 & ~umask}


# ---------------------------------------------------------------------- property: only DatasetFormatError
def _small_files():
    lad = Ladder.random(depth=2, branching=2, events=[2, 3, 4], seed=1)
    gauss = Ladder.random(depth=1, branching=2, events=[2, 3], seed=2, emission="gaussian", sigma=0.5)
    out = []
    with tempfile.TemporaryDirectory() as d:
        for i, (ladder, compress) in enumerate([(lad, False), (lad, True), (gauss, False)]):
            p = save_dataset(sample_ladder(ladder, 12, seed=i), Path(d) / f"f{i}.npz", compress=compress)
            out.append(p.read_bytes())
    return out


_FILES = None


def _files():
    global _FILES
    if _FILES is None:
        _FILES = _small_files()
    return _FILES


_json = st.recursive(st.none() | st.booleans() | st.integers(-3, 10**6) | st.floats(allow_nan=True)
                     | st.text(max_size=5), lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=4), c,
                                                                                                  max_size=3),
                     max_leaves=6)


def _paths(obj, prefix=()):
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, (*prefix, i))


@st.composite
def _mutated(draw):
    data = draw(st.sampled_from(_files()))
    kind = draw(st.sampled_from(["bytes", "truncate", "field", "field-resealed"]))
    if kind == "bytes":
        b = bytearray(data)
        for _ in range(draw(st.integers(1, 4))):
            b[draw(st.integers(0, len(b) - 1))] = draw(st.integers(0, 255))
        return bytes(b)
    if kind == "truncate":
        return data[: draw(st.integers(0, len(data) - 1))]
    with np.load(io.BytesIO(data), allow_pickle=False) as npz:
        meta = json.loads(str(npz["meta"][()]))
        arrays = {k: npz[k] for k in npz.files if k != "meta"}
    paths = [p for p in _paths(meta) if p and p[0] != META_CHECKSUM]
    path = draw(st.sampled_from(paths))
    parent = meta
    for k in path[:-1]:
        parent = parent[k]
    if draw(st.booleans()) and isinstance(parent, dict):
        del parent[path[-1]]
    else:
        parent[path[-1]] = draw(_json)
    if draw(st.booleans()):  # an array edited too
        name = draw(st.sampled_from(sorted(arrays)))
        a = arrays[name]
        arrays[name] = draw(st.sampled_from([a.astype(np.int16) if a.dtype.kind in "iu" else a.astype(np.float32),
                                             a.reshape(-1)[:-1], a.reshape(-1), (a + 1).astype(a.dtype)]))
    if kind == "field-resealed":
        meta.pop(META_CHECKSUM, None)
        try:
            meta[META_CHECKSUM] = metadata_checksum(meta)
        except ValueError:  # NaN: not canonical JSON
            pass
    buf = io.BytesIO()
    np.savez(buf, meta=np.array(json.dumps(meta)), **arrays)
    return buf.getvalue()


@pytest.fixture(scope="module")
def scratch():
    with tempfile.TemporaryDirectory() as d:
        yield Path(d)


@settings(max_examples=examples(2000), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(blob=_mutated())
def test_any_mutation_of_a_file_is_a_dataset_format_error(scratch, blob):
    path = scratch / "m.npz"
    path.write_bytes(blob)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnverifiedDatasetWarning)
        try:
            s = load_dataset(path, partial=True)
        except DatasetFormatError as e:
            assert "m.npz" in str(e)
            return
    # a mutation that kept a valid file (e.g. a byte of padding): it must be a consistent sample
    assert s.z.shape == (len(s), s.ladder.total_regions)


@pytest.fixture(scope="module")
def template_store(scratch):
    lad = Ladder.random(depth=2, branching=2, events=[2, 3, 4], seed=1)
    return sample_to_store(lad, 5000, scratch / "tpl.zarr", chunk_rows=BLOCK_SIZE, compress=False)


@settings(max_examples=examples(2000), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_mutation_of_a_store_attribute_is_a_dataset_format_error(scratch, template_store, data):
    """Format 2: an attribute edited, removed or replaced (with the metadata checksum recomputed or
    not) opens and reads consistently or is a DatasetFormatError naming the store."""
    import shutil

    meta = json.loads((template_store / "zarr.json").read_text())
    attrs = meta["attributes"]
    path = data.draw(st.sampled_from([p for p in _paths(attrs) if p and p[0] != META_CHECKSUM]))
    parent = attrs
    for k in path[:-1]:
        parent = parent[k]
    if data.draw(st.booleans()) and isinstance(parent, dict):
        del parent[path[-1]]
    else:
        parent[path[-1]] = data.draw(_json)
    if data.draw(st.booleans()):
        attrs.pop(META_CHECKSUM, None)
        try:
            attrs[META_CHECKSUM] = metadata_checksum(attrs)
        except ValueError:  # NaN: not canonical JSON
            pass
    store = scratch / "m.zarr"
    shutil.rmtree(store, ignore_errors=True)
    shutil.copytree(template_store, store)
    (store / "zarr.json").write_text(json.dumps(meta))
    try:
        s = open_dataset(store, partial=True).to_sample()
    except DatasetFormatError as e:
        assert "m.zarr" in str(e)
        return
    assert s.z.shape == (len(s), s.ladder.total_regions)
