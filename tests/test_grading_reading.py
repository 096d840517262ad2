"""The checkers of chapter 10's reading-attention exercises (issue 35), proven against the answers a learner is likely to
write: the book's answer passes, each classic mistake fails with the hint that names it. Both checkers judge the
learner's own trained model, so these tests train two small ones once (a date model of 60 steps, a copying model of
150: about 5 s on one thread of a quiet machine), as nbs/91c_graders_training.ipynb does."""
import pytest
import torch

from transformer_nb.book.graders_training import (
    COST_TOLERANCE,
    grade_attended_sources,
    grade_costliest_head,
)
from transformer_nb.reading import ablation_costs, head_sharpness
from transformer_nb.training import attended_sources, costliest_head, train_task


@pytest.fixture(scope="module")
def models():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        quick = dict(n_train=2000, n_valid=300, progress=False)
        return train_task("dates", steps=60, **quick), train_task("copy", steps=150, warmup=30, runs=0, **quick)
    finally: torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def dates_q(models): return models[0]


@pytest.fixture(scope="module")
def copy_q(models): return models[1]


def by_head(d): return {(k, l, h): float(v[l, h]) for k, v in d.items() for l in range(v.shape[0]) for h in range(v.shape[1])}


@pytest.fixture(scope="module")
def heads(copy_q):
    "Each head's cost and sharpness on the copying model"
    m, v, p = copy_q.model, copy_q.task.vocab, copy_q.task.valid
    return by_head(ablation_costs(m, v, p)), by_head(head_sharpness(m, v, p))


def fails_with(verdict, *words):
    assert not verdict, "the mistake passed"
    for w in words: assert w in verdict.message, f"{w!r} not in: {verdict.message}"


# ------------------------------------------------------------------ attended_sources: reading one head's map

def test_attended_sources_book_and_other_correct_forms_pass(dates_q):
    assert grade_attended_sources(attended_sources, dates_q)
    assert grade_attended_sources(lambda w: w.argmax(-1).tolist(), dates_q)                 # a list, one per row
    assert grade_attended_sources(lambda w: {t: int(r.argmax()) for t, r in enumerate(w)}, dates_q)


@pytest.mark.parametrize("name, answer, words", [
    ("transposed", lambda w: dict(enumerate(w.argmax(dim=0).tolist())), ["read the map by columns", "argmax(dim=-1)"]),
    ("the row below", lambda w: {t: int(w[t + 1].argmax()) for t in range(len(w) - 1)}, ["off by one", "row t + 1"]),
    ("pieces from 1", lambda w: {t + 1: int(s) for t, s in enumerate(w.argmax(-1))},
     ["numbered the output pieces from 1"]),
    ("positions from 1", lambda w: {t: int(s) + 1 for t, s in enumerate(w.argmax(-1))}, ["one too high"]),
    ("smallest", lambda w: dict(enumerate(w.argmin(-1).tolist())), ["smallest weight"]),
    ("the weight", lambda w: dict(enumerate(w.max(-1).values.tolist())), ["a weight, not a position"]),
    ("rows missing", lambda w: {t: int(w[t].argmax()) for t in range(4)}, ["one entry per row"]),
    ("second largest", lambda w: {t: int(r.topk(2).indices[1]) for t, r in enumerate(w)},
     ["rows read wrong", "attends most to source position", "you said"]),
    ("in place", lambda w: dict(enumerate(w.mul_(2).argmax(-1).tolist())), ["in place"]),
])
def test_attended_sources_mistakes_are_named(dates_q, name, answer, words):
    fails_with(grade_attended_sources(answer, dates_q), *words)


def test_attended_sources_needs_the_date_model(copy_q):
    "The date model's maps have more columns than rows; a copying model's are square-ish, where columns read as rows"
    fails_with(grade_attended_sources(attended_sources), "pass your trained date model")
    fails_with(grade_attended_sources(attended_sources, copy_q), "pass your date model")


# ------------------------------------------------------------------ costliest_head: which head to remove

def test_costliest_head_book_passes_and_the_fixture_tells_the_mistakes_apart(copy_q, heads):
    assert grade_costliest_head(costliest_head, copy_q)
    cost, peak = heads
    best, sharpest, cheapest = max(cost, key=cost.get), max(peak, key=peak.get), min(cost, key=cost.get)
    # the mistakes below give other heads on this model, clearly less costly
    assert best[1:] == (0, 0) and best[0] != "cross"
    one_based = (best[0], best[1] + 1, best[2])
    for other in (sharpest, cheapest, one_based):
        assert cost[other] < cost[best] - COST_TOLERANCE, other
    cross = max((x for x in cost if x[0] == "cross"), key=cost.get)
    assert cost[cross] < cost[best] - COST_TOLERANCE
    assert len({sharpest, cheapest, one_based, cross}) == 4          # each answer is one mistake only


def test_costliest_head_accepts_a_near_tie(copy_q, heads):
    cost, _ = heads
    best = max(cost, key=cost.get)
    assert grade_costliest_head(lambda run: list(best), copy_q)                              # a list is a head too
    near = [x for x in cost if x != best and cost[x] >= cost[best] - COST_TOLERANCE]
    for x in near: assert grade_costliest_head(lambda run: x, copy_q), x


def test_costliest_head_the_sharpest_map(copy_q, heads):
    _, peak = heads
    fails_with(grade_costliest_head(lambda run: max(peak, key=peak.get), copy_q), "most peaked", "ablate_heads")


def test_costliest_head_the_least_costly(copy_q, heads):
    cost, _ = heads
    fails_with(grade_costliest_head(lambda run: min(cost, key=cost.get), copy_q), "costs the least")


def test_costliest_head_counted_from_one(copy_q, heads):
    cost, _ = heads
    k, l, h = max(cost, key=cost.get)
    fails_with(grade_costliest_head(lambda run: (k, l + 1, h), copy_q), "counted from 1")


def test_costliest_head_one_kind_only(copy_q, heads):
    cost, _ = heads
    only_cross = max((x for x in cost if x[0] == "cross"), key=cost.get)
    fails_with(grade_costliest_head(lambda run: only_cross, copy_q), "costliest cross head", "every kind")


def test_costliest_head_a_model_left_changed(copy_q):
    before = {k: v.clone() for k, v in copy_q.model.state_dict().items()}
    def by_hand(run):
        with torch.no_grad(): run.model.decoder.layers[0].self_attn.W_o.weight[:, :8] = 0
        return ("decoder", 0, 0)
    fails_with(grade_costliest_head(by_hand, copy_q), "left the model changed", "ablate_heads")
    after = copy_q.model.state_dict()
    assert all(torch.equal(v, after[k]) for k, v in before.items()), "the check did not restore the weights"


@pytest.mark.parametrize("answer, words", [
    (("self", 0, 1), ["kind must be one of"]),
    (("decoder", 2, 4), ["counted from 0", "layers 0..1"]),
    ("decoder 0 1", ["(kind, layer, head)"]),
])
def test_costliest_head_heads_that_do_not_exist(copy_q, answer, words):
    fails_with(grade_costliest_head(lambda run: answer, copy_q), *words)


def test_unfilled_exercises_are_told_to_fill_in_without_a_model():
    "The check of an unfilled exercise never needs the model: Run All on the exercise notebook stops at no training"
    def attended_sources(weights): ...
    def costliest_head(run): ...
    for check, stub, book in ((grade_attended_sources, attended_sources, "attended_sources"),
                              (grade_costliest_head, costliest_head, "costliest_head")):
        v = check(stub, None)
        fails_with(v, "fill in the TODO", f"the book's `{book}`")


def test_costliest_head_read_off_the_training_pairs(copy_q):
    "A learner's review: a function that scored the training pairs instead of the held-out ones passed"
    from transformer_nb.reading import every_head, teacher_forced_accuracy
    from transformer_nb.transformer import ablate_heads
    def on_train(run):
        m, v, pairs = run.model, run.task.vocab, run.task.train[:300]
        full = teacher_forced_accuracy(m, v, pairs).sequences
        lost = {}
        for h in every_head(m):
            with ablate_heads(m, [h]): lost[h] = full - teacher_forced_accuracy(m, v, pairs).sequences
        return max(lost, key=lost.get)
    fails_with(grade_costliest_head(on_train, copy_q), "moves when the training pairs change", "run.task.valid")
