"""grade_mean_loss_share: the book's function and other correct forms pass; each mistake a learner makes when scaling the
loss of a step trained on several processes gets its own hint. Every answer runs on two gloo processes, all of them in
one start of the processes (`_grade_mean_loss_share_all`)."""
import pytest
import torch
import torch.distributed as dist

from transformer_nb.book.graders_training import (
    _grade_mean_loss_share_all,
    grade_mean_loss_share,
)
from transformer_nb.data import Vocab
from transformer_nb.training import mean_loss_share

# ---------------------------------------------------------------- correct, written otherwise

def all_reduce_by_hand(loss_sum, target, procs, pad_id=Vocab.pad):
    "dist.all_reduce where there is a group, a float count, the factor first"
    n = target.ne(pad_id).sum().float()
    if dist.is_initialized(): dist.all_reduce(n)
    return procs.world_size * loss_sum / n


def count_nonzero(loss_sum, target, procs, pad_id=Vocab.pad):
    "torch.count_nonzero of the mask; the count stays a tensor"
    n = procs.sum(torch.count_nonzero(target != pad_id))
    return loss_sum * (procs.world_size / n.clamp(min=1))


# ---------------------------------------------------------------- mistakes, as learners write them

def own_count(loss_sum, target, procs, pad_id=Vocab.pad):
    "forgot the all-reduce of the count"
    return loss_sum / int((target != pad_id).sum()) * procs.world_size


def mean_of_means(loss_sum, target, procs, pad_id=Vocab.pad):
    "each process's own mean, left for DDP to average"
    return loss_sum / (target != pad_id).sum()


def no_world_size(loss_sum, target, procs, pad_id=Vocab.pad):
    "the global count, but DDP's average left in"
    n = procs.sum(torch.tensor(int((target != pad_id).sum()))).item()
    return loss_sum / n


def world_size_twice(loss_sum, target, procs, pad_id=Vocab.pad):
    "divided by the world size, which DDP divides by already"
    n = procs.sum(torch.tensor(int((target != pad_id).sum()))).item()
    return loss_sum / n / procs.world_size


def loss_all_reduced(loss_sum, target, procs, pad_id=Vocab.pad):
    "the loss all-reduced (and the count): the gradients are still each process's own"
    n = procs.sum(torch.tensor(int((target != pad_id).sum()))).item()
    return procs.sum(loss_sum) / n


def padding_counted(loss_sum, target, procs, pad_id=Vocab.pad):
    "every position counted, padding included"
    n = procs.sum(torch.tensor(target.numel())).item()
    return loss_sum / n * procs.world_size


def zeros_left_out(loss_sum, target, procs, pad_id=Vocab.pad):
    "pad_id ignored: 0 left out whatever was asked"
    n = procs.sum(torch.tensor(int((target != 0).sum()))).item()
    return loss_sum / n * procs.world_size


def detached(loss_sum, target, procs, pad_id=Vocab.pad):
    "a new tensor from a float: no gradient reaches the model"
    n = procs.sum(torch.tensor(int((target != pad_id).sum()))).item()
    return torch.tensor(loss_sum.item() / n * procs.world_size)


def dist_without_group(loss_sum, target, procs, pad_id=Vocab.pad):
    "dist.all_reduce on one process, where there is no group"
    n = (target != pad_id).sum()
    dist.all_reduce(n)
    return loss_sum / n * procs.world_size


def padding_and_own_count(loss_sum, target, procs, pad_id=Vocab.pad):
    "two mistakes: padding counted and the count not all-reduced"
    return loss_sum / target.numel() * procs.world_size


def stub(loss_sum, target, procs, pad_id=Vocab.pad):
    "This process's share of the step's mean loss"
    ...


# a function defined in a notebook (not importable) that calls another notebook function: sent as code
NOTEBOOK = '''
def tokens(target, pad_id):
    return int((target != pad_id).sum())

def from_a_notebook(loss_sum, target, procs, pad_id=PAD):
    n = procs.sum(torch.tensor(tokens(target, pad_id))).item()
    return loss_sum / max(n, 1) * procs.world_size
'''
ns = {"__name__": "__main__", "torch": torch, "PAD": Vocab.pad}
exec(compile(NOTEBOOK, "<notebook>", "exec"), ns)
from_a_notebook = ns["from_a_notebook"]

ANSWERS = [mean_loss_share, all_reduce_by_hand, count_nonzero, from_a_notebook, own_count, mean_of_means,
           no_world_size, world_size_twice, loss_all_reduced, padding_counted, zeros_left_out, detached,
           dist_without_group, padding_and_own_count, stub]


@pytest.fixture(scope="module")
def verdicts():
    "Every answer checked, the two-process runs of all of them in one start"
    return {f.__name__: v for f, v in zip(ANSWERS, _grade_mean_loss_share_all(ANSWERS))}


def fails_with(v, *words):
    assert not v, f"passed: {v}"
    for w in words: assert w in v.message, f"{w!r} not in: {v.message}"
    assert "Traceback" not in v.message


@pytest.mark.parametrize("name", ["mean_loss_share", "all_reduce_by_hand", "count_nonzero", "from_a_notebook"])
def test_correct_forms_pass(verdicts, name):
    assert verdicts[name], verdicts[name]


def test_one_call_on_its_own():
    "The checker as the exercise notebook calls it: one answer, its own two processes"
    assert grade_mean_loss_share(mean_loss_share)
    fails_with(grade_mean_loss_share(world_size_twice), "divided out twice")


def test_own_count(verdicts): fails_with(verdicts["own_count"], "on two processes", "own token count", "procs.sum")
def test_mean_of_means(verdicts): fails_with(verdicts["mean_of_means"], "mean of the processes' means")
def test_no_world_size(verdicts): fails_with(verdicts["no_world_size"], "DDP averages", "multiply the share")
def test_world_size_twice(verdicts): fails_with(verdicts["world_size_twice"], "divided out twice")
def test_loss_all_reduced(verdicts): fails_with(verdicts["loss_all_reduced"], "all-reduced the loss", "autograd")
def test_padding_counted(verdicts): fails_with(verdicts["padding_counted"], "on one process", "padding is counted")
def test_pad_id_ignored(verdicts): fails_with(verdicts["zeros_left_out"], "`pad_id` is ignored")
def test_detached(verdicts): fails_with(verdicts["detached"], "does not depend on loss_sum")
def test_dist_without_group(verdicts): fails_with(verdicts["dist_without_group"], "no process group", "procs.sum")
def test_unfilled(verdicts): fails_with(verdicts["stub"], "fill in the TODO", "the book's `mean_loss_share`")


def test_two_mistakes_named_in_order(verdicts):
    m = verdicts["padding_and_own_count"].message
    fails_with(verdicts["padding_and_own_count"], "2 things differ")
    assert m.index("own token count") < m.index("padding is counted")
