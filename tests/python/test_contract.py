# SPDX-License-Identifier: Apache-2.0
"""The training-loop contract (docs/PYTHON.md, issue 20), tested as users write the loops:
resume with set_epoch, a state valid anywhere, content identity (a moved copy, a cache copy and
a URL of the same data resume), the iter() rule, len(), and the DataLoader adapter."""
from __future__ import annotations

import os
import shutil

import pytest

import dspipe
from conftest import COUNT, cpu_loader, indices

torch = pytest.importorskip("torch")

EPOCHS = 3
KW = dict(shuffle=True, seed=5, hflip=0.5)


def run(loader, first_epoch=0):
    """The usual loop: for epoch in range(first, E): set_epoch(epoch); for b in loader."""
    out = []
    for epoch in range(first_epoch, EPOCHS):
        loader.set_epoch(epoch)
        for b in loader:
            out.append((epoch, b["index"].tolist(), b["image"].clone()))
    return out


def same(got, want):
    assert [g[:2] for g in got] == [w[:2] for w in want]
    for g, w in zip(got, want):
        assert torch.equal(g[2], w[2])


# Item 2: after load_state_dict, `for epoch in range(sd["epoch"], E): set_epoch(epoch)`
# continued nothing: the resumed epoch restarted (replayed batches).
def test_resume_loop_with_set_epoch_continues_the_epoch(dataset):
    want = run(cpu_loader(dataset, **KW))
    assert len(want) == EPOCHS * 7
    first = cpu_loader(dataset, **KW)
    first.set_epoch(1)
    it = iter(first)
    for _ in range(3):
        next(it)
    sd = first.state_dict()
    assert (sd["epoch"], sd["position"]) == (1, 12)
    resumed = cpu_loader(dataset, **KW)
    resumed.load_state_dict(sd)
    got = run(resumed, sd["epoch"])
    assert len(got) == len(want) - 7 - 3, "no batch replayed"
    same(got, want[7 + 3:])


# A state taken anywhere - after any batch, after an epoch's last batch, between epochs (after
# the loop's end), after the last batch of all - resumes exactly the rest.
def test_state_dict_at_any_point_resumes_the_rest(dataset):
    want = run(cpu_loader(dataset, **KW))
    loader = cpu_loader(dataset, **KW)
    states = []
    for epoch in range(EPOCHS):
        loader.set_epoch(epoch)
        states.append(loader.state_dict())  # before the first batch
        for b in loader:
            states.append(loader.state_dict())  # after each batch (the last one included)
        states.append(loader.state_dict())  # between epochs: the loop has ended
    done = 0
    for i, sd in enumerate(states):
        resumed = cpu_loader(dataset, **KW)
        resumed.load_state_dict(sd)
        got = run(resumed, sd["epoch"])
        assert len(want) - len(got) >= done, f"state {i}: {sd}"
        done = len(want) - len(got)
        same(got, want[done:])
    assert done == len(want)
    assert (states[-1]["epoch"], states[-1]["position"]) == (EPOCHS, 0)


# Item 3: a checkpoint resumes on the same data at another path (a moved copy), in the RAM-disk
# cache, and fetched from a URL (the dataset served over HTTP); other data is refused.
def test_state_resumes_on_a_moved_copy_a_cache_copy_and_a_url(tmp_path):
    from test_fetch import Server

    served = tmp_path / "srv"
    dspipe.synth(tmp_path / "src", count=COUNT, size=(32, 48), seed=3, classes=3)
    dspipe.build(tmp_path / "src", served / "ds", store="raw", shards=2, progress=False)
    local = str(served / "ds")
    want = run(cpu_loader(local, **KW))
    first = cpu_loader(local, **KW)
    it = iter(first)
    next(it)
    sd = first.state_dict()
    assert sd["dataset"]["path"] == local and len(sd["dataset"]["sha256"]) == 64
    shutil.copytree(local, tmp_path / "moved" / "ds")
    server = Server(served)
    try:
        places = {"moved": (str(tmp_path / "moved" / "ds"), {}),
                  "cache": (local, dict(cache=str(tmp_path / "cache"), cache_overlap=False)),
                  "url": (server.url("ds/"), dict(cache=str(tmp_path / "url-cache")))}
        for name, (path, kw) in places.items():
            loader = cpu_loader(path, **KW, **kw)
            if name == "cache":
                assert loader.reading_from.startswith(str(tmp_path / "cache")), loader.reading_from
            loader.load_state_dict(sd)
            got = run(loader, sd["epoch"])
            assert len(got) == len(want) - 1, name
            same(got, want[1:])
    finally:
        server.close()
    other_src = tmp_path / "other"
    dspipe.synth(other_src, count=COUNT, size=(32, 48), seed=99, classes=3)
    dspipe.build(other_src, tmp_path / "other-ds", store="raw", shards=2, progress=False)
    with pytest.raises(ValueError, match="another dataset"):
        cpu_loader(tmp_path / "other-ds", **KW).load_state_dict(sd)


def test_a_version_1_state_still_resumes(dataset):
    import hashlib
    want = run(cpu_loader(dataset, **KW))
    manifest = cpu_loader(dataset)._core.dataset()["manifest"]
    v1 = {"version": 1, "epoch": 0, "position": 8, "seed": 5,
          "fingerprint": {"dataset": "/old/path/train.lmdb",
                          "manifest_sha256": hashlib.sha256(manifest.encode()).hexdigest(),
                          "count": COUNT, "batch_size": 4, "rank": 0, "world_size": 1,
                          "remainder": "pad", "drop_last": False, "shuffle": True, "hflip": 0.5,
                          "vflip": 0.0, "seed": 5}}
    loader = cpu_loader(dataset, **KW)
    loader.load_state_dict(v1)
    same(run(loader), want[2:])
    with pytest.raises(ValueError, match="vflip: state has 0.5, this loader 0"):
        cpu_loader(dataset, **KW).load_state_dict(
            {**v1, "fingerprint": {**v1["fingerprint"], "vflip": 0.5}})


# Item 5: iter() rule. A new iter() starts a pass: the next epoch, unless a position is pending
# (a new loader, set_epoch, load_state_dict, an epoch run to its end). next(iter(loader)) twice
# gave batches 0-3 then 4-7 of one epoch.
def test_each_iter_is_a_pass(dataset):
    ref = cpu_loader(dataset, **KW)
    epoch0 = indices(ref)
    epoch1 = indices(ref)  # the first pass ran to its end: the second is epoch 1
    assert len(epoch0) == 7 and epoch0 != epoch1
    loader = cpu_loader(dataset, **KW)
    assert next(iter(loader))["index"].tolist() == epoch0[0]
    assert next(iter(loader))["index"].tolist() == epoch1[0], "a new pass: the next epoch"
    assert loader.epoch == 1
    loader.set_epoch(0)
    assert next(iter(loader))["index"].tolist() == epoch0[0], "set_epoch is pending"
    old = iter(loader)
    next(old)
    new = iter(loader)
    next(new)
    with pytest.raises(RuntimeError, match="replaced by a newer iter"):
        next(old)
    # torch's DataLoader where it can be matched: unshuffled, every pass is the same order.
    plain = cpu_loader(dataset, shuffle=False)
    assert indices(plain) == indices(plain) == [list(range(i, min(i + 4, COUNT)))
                                               for i in range(0, COUNT, 4)]


def test_len_is_the_batches_of_the_pass_a_loop_would_make(dataset):
    loader = cpu_loader(dataset, **KW)
    assert len(loader) == 7
    it = iter(loader)
    seen = []
    for b in it:
        seen.append(len(loader))
    assert seen == [7] * 7  # issue 40 item 4: the pass a new loop would make (torch: fixed)
    assert len(loader) == 7, "the next epoch"
    sd = cpu_loader(dataset, **KW).state_dict()
    sd["position"] = 20
    loader.load_state_dict(sd)
    assert len(loader) == 2 and len(list(loader)) == 2
    ranks = [cpu_loader(dataset, rank=r, world_size=3, remainder="uneven") for r in range(3)]
    assert [len(r) for r in ranks] == [3, 3, 2]  # 9, 9, 8 samples in batches of 4
    assert [len(list(r)) for r in ranks] == [3, 3, 2]


# Item 9: DataLoader's default batch_size=1 stacked batches into (1, 4, 3, H, W) silently.
def test_dataloader_adapter_refuses_rebatching(dataset):
    from dspipe.torch import IterableDataset

    ds = IterableDataset(dataset, batch_size=4, threads=2, device="cpu", shuffle=False)
    with pytest.raises(TypeError, match="batch_size=None"):
        next(iter(torch.utils.data.DataLoader(ds)))
    with pytest.raises(TypeError, match="2 at a time"):
        next(iter(torch.utils.data.DataLoader(ds, batch_size=2)))
    dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=0)
    batches = list(dl)
    assert batches[0]["image"].shape == (4, 3, 32, 48)
    assert [i for b in batches for i in b["index"].tolist()] == list(range(COUNT))
    # Passes and resume through the adapter (StatefulDataLoader-style state_dict).
    ds.set_epoch(0)
    it = iter(dl)
    next(it)
    sd = ds.state_dict()
    again = IterableDataset(dataset, batch_size=4, threads=2, device="cpu", shuffle=False)
    again.load_state_dict(sd)
    assert len(again) == 6
    rest = [b["index"].tolist() for b in torch.utils.data.DataLoader(again, batch_size=None)]
    assert rest == [b["index"].tolist() for b in batches[1:]]
