"""Training on several processes (chapter 10a), 2 gloo ranks on the CPU in ONE spawned
group: after every one of several steps each rank's weights equal those of one process
trained on the union of the ranks' batches (padding that differs between ranks, tied
embeddings, frozen parameters); the ranks' weights are gathered and compared; bad input
(world size larger than a batch, different seeds or configurations, a checkpoint of
another model) raises the same clear error on every rank and leaves the group usable.
Gradient accumulation is tested in one process."""

import io
import warnings

import pytest
import torch
import torch.distributed as dist

from transformer_nb.checkpoints import save_model
from transformer_nb.data import batch_stream, make_batch, make_task
from transformer_nb.distributed import DataParallel, spawn
from transformer_nb.training import SingleProcess, task_config, train, train_task
from transformer_nb.transformer import Transformer

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
    except (ValueError, TypeError, OSError) as e:
        assert what in str(e), (what, str(e))
        return str(e)
    return f"no error (wanted {what!r})"


RESUME = dict(warmup=4, factor=0.5, average=3, average_every=2, progress=False)


def dropout_model(task, dropout):
    "The tiny model with dropout, key biases frozen as in `model`"
    torch.manual_seed(0)
    m = Transformer.from_config(task_config(len(task.vocab), **SMALL, dropout=dropout))
    for k, p in m.named_parameters():
        if k.endswith("W_k.bias"):
            p.requires_grad_(False)
    return m


def run(task, procs, steps, dropout=0.1, resume=None):
    "Train the dropout model for `steps` in all (averaging 3 checkpoints 2 steps apart); weights, history"
    m = dropout_model(task, dropout)
    h = train(m, procs.batches(task.train, task.vocab, BATCH, seed=1), steps=steps, processes=procs,
              resume=resume, **RESUME)
    return m.state_dict(), h


def through_a_file(state):
    "The state as a checkpoint gives it back: saved and loaded with weights_only"
    buf = io.BytesIO(); torch.save(state, buf); buf.seek(0)
    return torch.load(buf, weights_only=True)


def largest_difference(a, ha, b, hb):
    "The largest difference of the averaged weights, the last weights and the losses of two runs"
    last = max((v - hb.state["model"][k]).abs().max().item() for k, v in ha.state["model"].items())
    averaged = max((v - b[k]).abs().max().item() for k, v in a.items())
    loss = max(abs(x - y) for x, y in zip(ha.loss[-len(hb.loss):], hb.loss))
    return max(last, averaged, loss)


def resumes(procs, one_process_state):
    """8 steps on 2 processes, against: stopped at 3 (in the warm-up) or 7 (in the averaging window) and resumed;
    and the first 3 steps on ONE process resumed on two, without dropout (within rounding) and with it (a warning)"""
    task = dates()
    straight = run(task, procs, 8)
    found = {}
    for stop in (3, 7):
        first = run(task, procs, stop)[1]
        found[f"2 -> 2 processes, stop {stop}"] = largest_difference(
            *straight, *run(task, procs, 8, resume=through_a_file(first.state)))
    plain = run(task, procs, 8, dropout=0.0)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        found["1 -> 2 processes, no dropout, stop 3"] = largest_difference(
            *plain, *run(task, procs, 8, dropout=0.0, resume=torch.load(one_process_state[0], weights_only=True)))
        run(task, procs, 8, resume=torch.load(one_process_state[1], weights_only=True))
    found["warnings"] = [str(w.message) for w in seen]
    return found


def worker(ckpt_path, same_path, one_process_state):
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
        # found by one process only: every process raises it, naming the rank
        expect_error(
            lambda: train_task("copy", processes=procs, **small,
                               resume=same_path if rank == 0 else same_path + ".missing"),
            "No such file or directory: '" + same_path + ".missing' (on rank 1 of 2)",
        ),
        expect_error(
            lambda: train_task("copy", processes=procs, **small,
                               resume=same_path if rank == 0 else ckpt_path),
            "d_ff 64 there, 32 here (on rank 1 of 2)",
        ),
        expect_error(
            lambda: train_task("copy", processes=procs, **small,
                               resume=same_path if rank == 1 else ckpt_path),
            "d_ff 64 there, 32 here (on rank 0 of 2)",
        ),
    ]
    ok = procs.sum(torch.tensor(1)).item()  # the group still works
    widths = [b.src.shape[1] for b in mine]
    return dict(snapshots=seen, gathered=every, errors=errors, alive=ok, widths=widths,
                resumes=resumes(procs, one_process_state))


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    "One group of two processes for the whole module"
    path = tmp_path_factory.mktemp("ckpt") / "other.pt"
    t = train_task("copy", steps=2, n_train=300, n_valid=4, progress=False, average=1)
    save_model(path, t.model, t.config, t.task.vocab, training=t.history.state)
    same = path.with_name("same.pt")       # a run that the worker's `small` settings resume
    t = train_task("copy", steps=2, n_train=300, n_valid=4, progress=False, average=1, d_model=16,
                   num_heads=2, d_ff=32)
    save_model(same, t.model, t.config, t.task.vocab, training=t.history.state)
    task, one = dates(), SingleProcess()
    first = [str(path.with_name(f"first{d}.pt")) for d in (0.0, 0.1)]     # 3 steps on ONE process
    for d, f in zip((0.0, 0.1), first): torch.save(run(task, one, 3, dropout=d)[1].state, f)
    return spawn(worker, 2, str(path), str(same), first, timeout=150)


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


def test_resume_on_two_processes_is_exact_with_dropout_and_averaging(ranks):
    for r in ranks:
        found = r["resumes"]
        print({k: v for k, v in found.items() if k != "warnings"})
        assert found["2 -> 2 processes, stop 3"] == 0 and found["2 -> 2 processes, stop 7"] == 0
        assert 0 <= found["1 -> 2 processes, no dropout, stop 3"] <= 1e-5
    assert ranks[1]["resumes"]["warnings"] == []          # rank 0 alone says it
    plain, dropout = ranks[0]["resumes"]["warnings"]
    assert plain == ("the run was saved by 1 process(es) and resumes on 2: it goes on as a run on 2 would, equal to "
                     "rounding at each step but not bit for bit")
    assert dropout == plain + ", and dropout draws other random numbers"


def test_init_processes_takes_rank_and_world_size_given_without_a_port(monkeypatch):
    "torchrun's environment gives MASTER_ADDR and MASTER_PORT; a rank and world_size passed are used, not ignored"
    import socket

    import torch.distributed as dist

    from transformer_nb.distributed import init_processes
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1"); monkeypatch.setenv("MASTER_PORT", str(port))
    monkeypatch.delenv("RANK", raising=False); monkeypatch.delenv("WORLD_SIZE", raising=False)
    init_processes(rank=0, world_size=1)
    try:
        assert (dist.get_rank(), dist.get_world_size()) == (0, 1)
    finally:
        dist.destroy_process_group()
