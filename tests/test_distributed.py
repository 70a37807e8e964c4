"""ShardedIndex on a real local Ray cluster (started once for the module): exact merges against
the single flat index, fused scores against the single exact fused top-k, driver-side validation
(nothing sent on a bad call), save/load with crafted manifests refused, a dead shard named."""

from __future__ import annotations

import json
import os
import shutil
import sys
from datetime import timedelta

import numpy as np
import pytest

if not os.environ.get("CI"):  # CI installs the extra: a missing one fails there
    pytest.importorskip("ray")

import ray  # noqa: E402
from ray_helpers import kill_and_wait  # noqa: E402
from reference import recall  # noqa: E402

import poincare_index as pi  # noqa: E402
from poincare_index.distributed import ShardedIndex, ShardUnavailableError, shard_of  # noqa: E402

pytestmark = pytest.mark.usefixtures("local_ray")


@pytest.mark.parametrize("shards", [2, 4])
def test_sharded_flat_equals_the_single_flat_index(shards, stamped_data):
    base, queries, t = stamped_data
    single = pi.PoincareFlatIndex(16)
    single.add(base, t=t, metadata={"g": np.arange(len(base)) % 3})
    sharded = ShardedIndex(16, shards=shards, kind="flat")
    sharded.add(base, t=t, metadata={"g": np.arange(len(base)) % 3})
    assert sharded.ntotal == len(base)
    D, I = sharded.search(queries, 10)
    D1, I1 = single.search(queries, 10)
    np.testing.assert_array_equal(I, I1)
    np.testing.assert_array_equal(D, D1)
    # the fused score, one at_time for all shards, filters pushed to every shard
    kw = dict(
        decay=pi.HalfLife(hours=24 * 20), at_time=np.datetime64("2026-05-01"), filters={"g": {"$ne": 1}}
    )
    r, r1 = sharded.search_scored(queries, 10, **kw), single.search_scored(queries, 10, **kw)
    np.testing.assert_array_equal(r.ids, r1.ids)
    np.testing.assert_allclose(r.scores, r1.scores, rtol=1e-12)
    np.testing.assert_allclose(r.time_weights, r1.time_weights, rtol=1e-12)
    # k beyond the size: padded as the local index pads
    D, I = sharded.search(queries[:2], len(base) + 5)
    assert np.all(I[:, len(base) :] == -1) and np.all(np.isinf(D[:, len(base) :]))
    sharded.close()


def test_ids_past_int32_come_back_whole(stamped_data):
    # Shards answer with int32 ids when theirs fit (a smaller result travels inline): ids that
    # do not fit, negative ones and the padding must come back as the single index gives them.
    base, queries, _ = stamped_data
    ids = np.arange(len(base), dtype=np.int64) * 3 - 8  # negative ids but -1 (padding) too
    ids[len(base) // 2 :] += 2**40  # ascending, as the slots: ties rank alike on both sides
    for held in (ids, np.arange(len(base), dtype=np.int64) * 2 - 6):  # past int32 / all fit
        sharded = ShardedIndex(16, shards=2, kind="flat")
        sharded.add_with_ids(base, held)
        single = pi.PoincareFlatIndex(16)
        single.add_with_ids(base, held)
        D, I = sharded.search(queries, 10)
        D1, I1 = single.search(queries, 10)
        assert I.dtype == np.int64
        np.testing.assert_array_equal(I, I1)
        np.testing.assert_array_equal(D, D1)
        _, I = sharded.search(queries[:2], len(base) + 3)  # every id once, then the padding
        assert np.all(I[:, len(base) :] == -1)
        assert all(np.array_equal(np.sort(row[: len(base)]), np.sort(held)) for row in I)
        sharded.close()


def test_sharded_hnsw_recall_is_at_least_the_single_one(stamped_data):
    base, queries, _ = stamped_data
    sharded = ShardedIndex(16, shards=2, kind="hnsw", seed=1)
    sharded.add(base)
    single = pi.PoincareIndex(16, seed=1)
    single.add(base)
    flat = pi.PoincareFlatIndex(16)
    flat.add(base)
    _, truth = flat.search(queries, 10)
    for ef in (16, 64):
        assert (
            recall(sharded.search(queries, 10, ef=ef)[1], truth)
            >= recall(single.search(queries, 10, ef=ef)[1], truth) - 0.01
        )
    # A recall target goes to every shard, each meeting it on its own top k.
    assert recall(sharded.search(queries, 10, recall=0.99)[1], truth) >= 0.97
    assert recall(sharded.search(queries, 10)[1], truth) >= 0.93  # the shards' default target
    fused = sharded.search_scored(queries, 10, recall=0.99, at_time=np.datetime64("2026-05-01"))
    assert recall(fused.ids, truth) >= 0.97
    with pytest.raises(ValueError, match="not both"):
        sharded.search(queries, 10, ef=16, recall=0.9)
    with pytest.raises(ValueError, match="recall"):
        sharded.search_scored(queries, 10, recall=0.0)
    sharded.close()


def test_sharded_compressed_storage_answers_as_the_single_index_and_is_saved(stamped_data, tmp_path):
    base, queries, _ = stamped_data
    sharded = ShardedIndex(16, shards=2, kind="hnsw", seed=1, storage="sq8")
    sharded.add(base)
    flat = pi.PoincareFlatIndex(16)
    flat.add(base)
    D_truth, truth = flat.search(queries, 10)
    D, I = sharded.search(queries, 10, ef=64)
    assert recall(I, truth) >= 0.95
    hit = I == truth
    np.testing.assert_allclose(D[hit], D_truth[hit], rtol=1e-6)  # re-ranked from float32
    sharded.save(tmp_path / "ix")
    sharded.close()
    back = ShardedIndex.load(tmp_path / "ix")
    assert back.storage == "sq8"
    np.testing.assert_array_equal(back.search(queries, 10, ef=64)[1], I)
    back.close()
    with pytest.raises(ValueError, match="applies to kind='hnsw'"):
        ShardedIndex(16, shards=1, kind="flat", storage="sq8")


def test_writes_are_validated_on_the_driver_before_anything_is_sent(stamped_data):
    base, _, _ = stamped_data
    s = ShardedIndex(16, shards=3, kind="flat")
    s.add_with_ids(base[:10], np.arange(10))
    bad = base[10:13].copy()
    bad[1, 0] = np.nan
    with pytest.raises(ValueError, match="x row 1"):
        s.add_with_ids(bad, [10, 11, 12])
    with pytest.raises(ValueError, match="outside"):
        s.add(np.full((1, 16), 0.9))
    with pytest.raises(ValueError, match="dimension"):
        s.add(base[:2, :8])
    with pytest.raises(ValueError, match="appears twice"):
        s.add_with_ids(base[10:12], [20, 20])
    with pytest.raises(ValueError, match="already in the index"):
        s.add_with_ids(base[10:13], [30, 31, 5])  # 30 and 31 go to other shards: not added either
    with pytest.raises(ValueError, match="valid_until"):
        s.add_with_ids(
            base[10:11], [40], valid_from=np.datetime64("2026-02-01"), valid_until=np.datetime64("2026-01-01")
        )
    with pytest.raises(TypeError, match="row masks"):
        s.search(base[:1], 3, filters=np.ones(10, dtype=bool))
    assert s.ntotal == 10 and 30 not in set(s.search(base[:20], 20)[1].ravel().tolist())
    with pytest.raises(KeyError):
        s.reconstruct(30)
    np.testing.assert_array_equal(s.reconstruct_batch([3, 7]), base[[3, 7]].astype(np.float32))
    assert s.remove_ids([3, 3, 999]) == 1 and s.ntotal == 9
    s.add(base[10:12])  # automatic ids continue past the largest
    assert sorted(s.search(base[10:11], 1)[1].ravel().tolist()) == [10]
    with pytest.raises(ValueError, match="kind"):
        ShardedIndex(16, kind="ivf")
    with pytest.raises(ValueError, match="partition"):
        ShardedIndex(16, partition="range")
    s.close()


@pytest.mark.slow
def test_save_load_and_crafted_manifests_are_refused(stamped_data, tmp_path):
    base, queries, _ = stamped_data
    s = ShardedIndex(16, shards=2, kind="hnsw")
    s.add(base[:500])
    before = s.search(queries, 5)
    s.save(tmp_path / "ix")
    s.close()
    back = ShardedIndex.load(tmp_path / "ix")
    assert back.ntotal == 500 and back.kind == "hnsw" and back.shards == 2
    after = back.search(queries, 5)  # the saved graphs answer as the live ones did
    np.testing.assert_array_equal(after[1], before[1])
    np.testing.assert_array_equal(after[0], before[0])
    back.add(base[500:501])  # automatic ids continue past the loaded ones
    assert back.ntotal == 501 and 500 in back.search(base[500:501], 1)[1]
    back.close()
    manifest = tmp_path / "ix" / "sharded.json"
    doc = json.loads(manifest.read_text())
    doc["dim"] = 3
    manifest.write_text(json.dumps(doc))  # checksum no longer matches
    with pytest.raises(pi.IndexFormatError, match="checksum"):
        ShardedIndex.load(tmp_path / "ix")
    from poincare_index._durable import write_json_atomic

    two = doc["shards"]  # as saved: each shard in shard-<number>-<seq>
    assert [e["dir"] for e in two] == [f"shard-{e['number']}-{e['seq']}" for e in two]
    body = {k: v for k, v in doc.items() if k != "checksum"} | {"dim": 16}
    crafted = [
        ({"shards": [*two, {"number": 2, "bucket": None}]}, "shard-2 is missing"),
        ({"shards": [{"number": i, "bucket": None} for i in range(5000)]}, "outside"),
        ({"shards": two[::-1]}, "numbered 0..1 in order"),
        ({"shards": [two[0], two[0]]}, "repeat"),
        ({"version": 1, "shards": 10**9}, "outside"),
        ({"format": "x"}, "not a sharded index"),
        ({"dim": 8}, "does not match"),
        ({"partition": "time", "time": None}, "its own time range"),
        ({"shards": [two[0] | {"dir": "../../elsewhere"}, two[1]]}, "is not shard-0-"),
        ({"shards": [two[0] | {"seq": -1}, two[1]]}, "is not shard-0--1"),
    ]
    for change, match in crafted:
        write_json_atomic(manifest, body | change)
        with pytest.raises(pi.IndexFormatError, match=match):
            ShardedIndex.load(tmp_path / "ix")
    # shards swapped on disk: their ids are on the wrong shard
    write_json_atomic(manifest, body)
    d0, d1 = (tmp_path / "ix" / e["dir"] for e in two)
    shutil.move(d0, tmp_path / "ix" / "tmp")
    shutil.move(d1, d0)
    shutil.move(tmp_path / "ix" / "tmp", d1)
    with pytest.raises(pi.IndexFormatError, match="belongs to another shard"):
        ShardedIndex.load(tmp_path / "ix")


def test_a_dead_shard_is_named_and_hash_routing_is_even(stamped_data):
    base, queries, _ = stamped_data
    s = ShardedIndex(16, shards=2, kind="flat")
    s.add(base[:100])
    kill_and_wait(s.actors[1])
    with pytest.raises(ShardUnavailableError, match="shard 1"):
        s.search(queries[:2], 3)
    s.close()
    counts = np.bincount(shard_of(np.arange(100_000, dtype=np.int64), 8), minlength=8)
    assert counts.min() > 0.95 * 100_000 / 8


def test_without_ray_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ImportError, match=r"\[ray\]"):
        ShardedIndex(4, shards=1)


def test_a_dead_shard_is_named_by_its_number_in_routed_writes(stamped_data):
    base, _, _ = stamped_data
    s = ShardedIndex(16, shards=3, kind="flat")
    s.add_with_ids(base[:30], np.arange(30))
    kill_and_wait(s.actors[2])
    on_two = [i for i in range(100, 200) if shard_of(np.array([i]), 3)[0] == 2][:1]
    with pytest.raises(ShardUnavailableError, match="shard 2"):
        s.remove_ids(on_two)  # the call reaches shard 2 only: named by its number, not position
    s.close()


@pytest.mark.slow
def test_from_dataset_builds_through_ray_data_workers(stamped_data):
    base, queries, t = stamped_data
    n = 600
    ds = ray.data.from_items(
        [{"vec": base[i], "doc": i * 10, "when": t[i], "lang": ["en", "de"][i % 2]} for i in range(n)]
    )
    index = ShardedIndex.from_dataset(
        ds, vector_column="vec", id_column="doc", time_column="when", metadata_columns=["lang"],
        shards=2, kind="flat", batch_size=200, concurrency=1,
    )  # fmt: skip
    single = pi.PoincareFlatIndex(16)
    single.add_with_ids(
        base[:n], np.arange(n) * 10, t=t[:n], metadata={"lang": [["en", "de"][i % 2] for i in range(n)]}
    )
    assert index.ntotal == n and "lang" in index._schema.names  # the driver learnt the columns
    for flt in (None, {"lang": "de"}):
        np.testing.assert_array_equal(
            index.search(queries, 5, filters=flt)[1], single.search(queries, 5, filters=flt)[1]
        )
    kw = dict(decay=pi.HalfLife(hours=24), at_time=t[n - 1])
    np.testing.assert_array_equal(
        index.search_scored(queries, 5, **kw).ids, single.search_scored(queries, 5, **kw).ids
    )
    index.add(base[n : n + 1])  # automatic ids continue past the dataset's
    assert 10 * (n - 1) + 1 in index.search(base[n : n + 1], 1)[1]
    index.close()
    dup = ray.data.from_items([{"vec": base[i], "doc": 7} for i in range(3)])
    with pytest.raises(ValueError, match="id 7"):
        ShardedIndex.from_dataset(dup, vector_column="vec", id_column="doc", shards=2, kind="flat", dim=16)
    with pytest.raises(ValueError, match="not a column"):
        ShardedIndex.from_dataset(dup, vector_column="v", id_column="doc")
    with pytest.raises(TypeError, match="ray.data.Dataset"):
        ShardedIndex.from_dataset(base, vector_column="v", id_column="doc")


@pytest.mark.slow
def test_from_dataset_opens_the_time_shards_of_the_data(stamped_data):
    base, queries, t = stamped_data
    n = 600
    ds = ray.data.from_items([{"vec": base[i], "id": i, "ts": t[i]} for i in range(n)])
    s = ShardedIndex.from_dataset(
        ds, vector_column="vec", id_column="id", time_column="ts", kind="flat", partition="time",
        time_span=timedelta(days=7), batch_size=300, concurrency=1, dim=16,
    )  # fmt: skip
    single = pi.PoincareFlatIndex(16)
    single.add(base[:n], t=t[:n])
    weeks = np.unique((t[:n].astype("datetime64[D]").astype(np.int64)) // 7)
    assert s.shards == len(weeks) and s.ntotal == n
    kw = dict(decay=pi.HalfLife(hours=24 * 7), at_time=t[n - 1])
    np.testing.assert_array_equal(
        s.search_scored(queries, 10, **kw).ids, single.search_scored(queries, 10, **kw).ids
    )
    s.close()


@pytest.mark.slow
def test_metadata_is_checked_against_every_shard_before_any_gets_a_row(stamped_data):
    base, queries, _ = stamped_data
    s = ShardedIndex(16, shards=4, kind="flat")
    single = pi.PoincareFlatIndex(16)
    for index in (s, single):  # two rows with a column: most shards never see it
        index.add_with_ids(base[:2], [0, 1], metadata={"tag": [1, 2]})
        index.add_with_ids(base[2:200], np.arange(2, 200))
    with pytest.raises(ValueError, match="metadata does not match"):
        s.add_with_ids(base[200:210], np.arange(200, 210), metadata={"tag": ["a"] * 10})
    assert s.ntotal == 200
    s.add_with_ids(base[200:202], [200, 201])  # the refused ids were not taken by any shard
    single.add_with_ids(base[200:202], [200, 201])
    for filters in ({"tag": 2}, {"tag": {"$ne": 2}}, {"tag": {"$exists": False}}):
        np.testing.assert_array_equal(
            s.search(queries, 5, filters=filters)[1], single.search(queries, 5, filters=filters)[1]
        )
        kw = dict(decay=pi.HalfLife(hours=5), at_time=np.datetime64("2026-01-01"), filters=filters)
        np.testing.assert_array_equal(
            s.search_scored(queries, 5, **kw).ids, single.search_scored(queries, 5, **kw).ids
        )
    s.close()
