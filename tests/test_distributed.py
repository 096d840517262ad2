"""Training on several processes (chapter 10a), 2 gloo ranks on the CPU in ONE spawned
group: after every one of several steps each rank's weights equal those of one process
trained on the union of the ranks' batches (padding that differs between ranks, tied
embeddings, frozen parameters); the ranks' weights are gathered and compared; bad input
(world size larger than a batch, different seeds or configurations, a checkpoint of
another model) raises the same clear error on every rank and leaves the group usable.
Gradient accumulation is tested in one process."""

import pytest, torch
import torch.distributed as dist
from transformer_nb.data import make_task, batch_stream, make_batch
from transformer_nb.transformer import Transformer
from transformer_nb.training import train, train_task, task_config, save_model
from transformer_nb.distributed import DataParallel, spawn

STEPS, BATCH = 4, 8
SMALL = dict(
    d_model=16,
    num_heads=2,
    num_encoder_layers=1,
    num_decoder_layers=2,
    d_ff=32,
    share_embeddings=True,
)
TRAIN = dict(steps=STEPS, warmup=10, factor=0.5, average=1, progress=False)


def dates():
    "Dates: sources of many lengths, so the two shards of a batch get different padding"
    return make_task("dates", n_train=200, n_valid=4, seed=3)


def model(task):
    "The tiny model, tied embeddings, the key biases frozen (their exact gradient is 0)"
    torch.manual_seed(0)
    m = Transformer.from_config(task_config(len(task.vocab), **SMALL))
    for k, p in m.named_parameters():
        if k.endswith("W_k.bias"):
            p.requires_grad_(False)
    return m


def snapshots(m, batches, **kw):
    "Train, keeping a copy of the weights after every step"
    seen = []
    train(
        m,
        batches,
        on_step=lambda step, m: seen.append(
            {k: v.clone() for k, v in m.state_dict().items()}
        ),
        **TRAIN,
        **kw,
    )
    return seen


def expect_error(f, what):
    "The message of the error f raises (the same on every rank), or a note if none"
    try:
        f()
    except (ValueError, TypeError) as e:
        assert what in str(e), (what, str(e))
        return str(e)
    return f"no error (wanted {what!r})"


def worker(ckpt_path):
    "What each of the two processes runs"
    task, procs = dates(), DataParallel()
    shards = procs.batches(task.train, task.vocab, BATCH, seed=1)
    mine = [next(shards) for _ in range(STEPS)]
    m = model(task)
    seen = snapshots(m, mine, processes=procs)
    # the weights of every rank, gathered and compared here too
    flat = torch.cat([v.flatten() for v in m.state_dict().values()])
    every = [torch.empty_like(flat) for _ in range(procs.world_size)]
    dist.all_gather(every, flat)
    small = dict(
        steps=3,
        n_train=300,
        n_valid=4,
        progress=False,
        average=1,
        d_model=16,
        num_heads=2,
        d_ff=32,
    )
    rank = procs.rank
    errors = [
        expect_error(
            lambda: procs.batches(task.train, task.vocab, 1),
            "world size 2 exceeds batch_size 1",
        ),
        expect_error(
            lambda: train_task("copy", seed=rank, processes=procs, **small),
            "disagree on the run: seed 0 on rank 0, 1 on rank 1",
        ),
        expect_error(
            lambda: train_task(
                "copy", processes=procs, **{**small, "d_ff": 32 + 32 * rank}
            ),
            "disagree on the run: config.d_ff 32 on rank 0, 64 on rank 1",
        ),
        expect_error(
            lambda: train_task("copy", processes=procs, resume=ckpt_path, **small),
            "holds another model: d_model 32 there, 16 here",
        ),
    ]
    ok = procs.sum(torch.tensor(1)).item()  # the group still works
    widths = [b.src.shape[1] for b in mine]
    return dict(snapshots=seen, gathered=every, errors=errors, alive=ok, widths=widths)


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    "One group of two processes for the whole module"
    path = tmp_path_factory.mktemp("ckpt") / "other.pt"
    t = train_task("copy", steps=2, n_train=300, n_valid=4, progress=False, average=1)
    save_model(path, t.model, t.config, t.task.vocab, training=t.history.state)
    return spawn(worker, 2, str(path), timeout=100)


def test_every_step_equals_one_process_on_the_union(ranks):
    task = dates()
    whole = batch_stream(task.train, task.vocab, BATCH, seed=1)
    reference = snapshots(model(task), [next(whole) for _ in range(STEPS)])
    worst = 0.0
    for step in range(STEPS):
        for r in ranks:
            for k, v in reference[step].items():
                worst = max(worst, (v - r["snapshots"][step][k]).abs().max().item())
    print(f"largest parameter difference after any of {STEPS} steps: {worst:.2e}")
    assert worst <= 1e-6
    # the shards were padded differently
    assert ranks[0]["widths"] != ranks[1]["widths"]
    # the frozen biases did not move, the tied weights stayed tied
    first = model(task).state_dict()
    assert all(
        torch.equal(first[k], ranks[0]["snapshots"][-1][k])
        for k in first
        if k.endswith("W_k.bias")
    )
    assert not torch.equal(
        first["output.weight"], ranks[0]["snapshots"][-1]["output.weight"]
    )


def test_ranks_hold_identical_weights(ranks):
    for r in ranks:
        assert torch.equal(r["gathered"][0], r["gathered"][1])


def test_bad_input_fails_alike_on_every_rank(ranks):
    for a, b in zip(ranks[0]["errors"], ranks[1]["errors"]):
        assert not a.startswith("no error"), a
        assert a == b
    assert ranks[0]["alive"] == ranks[1]["alive"] == 2


def test_accumulation_over_m_micro_batches_is_one_step_token_weighted():
    "3 micro-batches, sizes and padding unequal, over all their tokens: one step"
    task = dates()
    pairs = task.train[:24]
    parts = [pairs[:5], pairs[5:14], pairs[14:]]
    a, b = model(task), model(task)
    seen_a = snapshots(a, [make_batch(pairs, task.vocab)] * 2)
    seen_b = snapshots(b, [make_batch(p, task.vocab) for p in parts] * 2, accumulate=3)
    for sa, sb in zip(seen_a, seen_b):
        for k in sa:
            torch.testing.assert_close(sa[k], sb[k], atol=1e-6, rtol=0)
