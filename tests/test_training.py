"Training: the loss equals PyTorch's, the schedule is equation 3, a tiny model learns from any iterable of batches,\na run resumes from its checkpoint exactly (checkpoints themselves: test_checkpoints.py)"
import pytest
import torch
from torch import nn

from transformer_nb.checkpoints import save_model
from transformer_nb.data import batch_stream, date_pairs, make_batch, make_task
from transformer_nb.reading import teacher_forced_accuracy
from transformer_nb.training import (
    LabelSmoothingLoss,
    make_optimizer,
    noam_lr,
    smoothed_targets,
    smoothing_floor,
    train,
    train_task,
)
from transformer_nb.transformer import Transformer


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
@pytest.mark.parametrize("shape", [(17,), (3, 5)])
def test_loss_equals_torch(eps, shape):
    torch.manual_seed(0)
    V = 11
    logits = torch.randn(*shape, V, requires_grad=True)
    target = torch.randint(0, V, shape)
    target.view(-1)[::4] = 0                                          # padding
    ours = LabelSmoothingLoss(eps, ignore_index=0)(logits, target)
    theirs = nn.CrossEntropyLoss(label_smoothing=eps, ignore_index=0)(logits.reshape(-1, V), target.reshape(-1))
    torch.testing.assert_close(ours, theirs)
    g1, = torch.autograd.grad(ours, logits); g2, = torch.autograd.grad(theirs, logits)
    torch.testing.assert_close(g1, g2)


def test_smoothed_targets_and_floor():
    q = smoothed_targets(torch.tensor([2, 0, 5]), 6, 0.1, ignore_index=0)
    torch.testing.assert_close(q.sum(-1), torch.tensor([1.0, 0.0, 1.0]))
    assert abs(q[0, 2] - (0.9 + 0.1 / 6)) < 1e-7
    loss = LabelSmoothingLoss(0.1, ignore_index=-1)(q[2:].log(), torch.tensor([5]))
    assert abs(loss.item() - smoothing_floor(6, 0.1)) < 1e-6
    with pytest.raises(ValueError, match="eps"): LabelSmoothingLoss(1.0)


def test_all_padding_gives_zero_loss_not_nan():
    loss = LabelSmoothingLoss(0.1, ignore_index=0)(torch.randn(4, 7), torch.zeros(4, dtype=torch.long))
    assert loss.item() == 0.0


def test_noam_schedule_is_equation_3():
    assert noam_lr(0, 512) == noam_lr(1, 512)
    assert abs(noam_lr(100, 512, 4000) - 512 ** -0.5 * 100 * 4000 ** -1.5) < 1e-12
    assert abs(noam_lr(10000, 512, 4000) - 512 ** -0.5 * 10000 ** -0.5) < 1e-12
    assert abs(noam_lr(50, 64, 10, factor=2.0) - 2 * noam_lr(50, 64, 10)) < 1e-12
    opt, sched = make_optimizer(nn.Linear(2, 2), d_model=64, warmup=10)
    seen = []
    for _ in range(20): seen.append(opt.param_groups[0]["lr"]); opt.step(); sched.step()
    assert seen == pytest.approx([noam_lr(s, 64, 10) for s in range(1, 21)])
    assert opt.defaults["betas"] == (0.9, 0.98) and opt.defaults["eps"] == 1e-9


def test_data_is_seeded_and_held_out():
    assert date_pairs(50, seed=3) == date_pairs(50, seed=3) != date_pairs(50, seed=4)
    task = make_task("reverse", n_train=300, n_valid=100, seed=5)
    assert not {s for s, _ in task.valid} & {s for s, _ in task.train}
    assert all(t == s[::-1] for s, t in task.train)
    b = make_batch(task.train[:8], task.vocab)
    assert b.src_mask.shape == (8, 1, 1, b.src.shape[1]) and b.tgt_mask.shape == (8, 1, b.tgt_in.shape[1], b.tgt_in.shape[1])
    assert b.ntokens == sum(len(t) + 1 for _, t in task.train[:8])


def test_tiny_training_lowers_the_loss():
    torch.manual_seed(0)
    task = make_task("copy", n_train=500, n_valid=10)
    m = Transformer(len(task.vocab), len(task.vocab), d_model=32, num_heads=2, num_encoder_layers=1,
                    num_decoder_layers=1, d_ff=64, dropout=0.0)
    h = train(m, batch_stream(task.train, task.vocab, 32), steps=60, warmup=10, progress=False)
    assert len(h.loss) == 60 and h.tokens > 0 and not m.training
    assert sum(h.loss[-5:]) < 0.9 * sum(h.loss[:5])


def test_training_is_deterministic():
    a = train_task("copy", steps=5, progress=False, n_train=200, n_valid=10, d_model=16, num_heads=2, d_ff=32)
    b = train_task("copy", steps=5, progress=False, n_train=200, n_valid=10, d_model=16, num_heads=2, d_ff=32)
    assert a.history.loss == b.history.loss


def test_train_accepts_a_dataloader_and_restarts_it_each_epoch():
    "A DataLoader (or a list) is iterated again at each epoch; 4 batches per epoch and 10 steps: 3 epochs, no StopIteration"
    from torch.utils.data import DataLoader
    task = make_task("copy", n_train=256, n_valid=10)
    loader = DataLoader(task.train, batch_size=64, shuffle=True, collate_fn=lambda p: make_batch(p, task.vocab),
                        generator=torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    m = Transformer(len(task.vocab), len(task.vocab), d_model=16, num_heads=2, num_encoder_layers=1,
                    num_decoder_layers=1, d_ff=32, dropout=0.0)
    h = train(m, loader, steps=10, warmup=5, progress=False, average=1)
    assert len(h.loss) == 10
    h = train(m, [make_batch(task.train[:32], task.vocab)] * 3, steps=7, warmup=5, progress=False, average=1)
    assert len(h.loss) == 7


def test_progress_goes_to_stderr(capsys):
    task = make_task("copy", n_train=64, n_valid=4)
    m = Transformer(len(task.vocab), len(task.vocab), d_model=16, num_heads=2, num_encoder_layers=1,
                    num_decoder_layers=1, d_ff=32)
    train(m, batch_stream(task.train, task.vocab, 16), steps=3, warmup=2, average=1)
    out, err = capsys.readouterr()
    assert out == "" and "3/3" in err


def test_teacher_forced_accuracy_counts_tokens_and_whole_targets():
    task = make_task("copy", n_train=64, n_valid=20)
    m = Transformer(len(task.vocab), len(task.vocab), d_model=16, num_heads=2, num_encoder_layers=1,
                    num_decoder_layers=1, d_ff=32).eval()
    with torch.no_grad(): m.output.weight.zero_(); m.output.bias.fill_(-5); m.output.bias[task.vocab.eos] = 5
    acc = teacher_forced_accuracy(m, task.vocab, [("123", "123"), ("5", "")])  # always </s>: right only at the end
    assert acc.tokens == 2 / 5 and acc.sequences == 1 / 2


def test_trained_config_is_a_transformer_config_and_resume_is_exact(tmp_path):
    from transformer_nb.transformer import TransformerConfig
    small = dict(n_train=200, n_valid=4, average=1, progress=False, warmup=3,
                 d_model=16, num_heads=2, d_ff=32)
    straight = train_task("copy", steps=6, **small)
    first = train_task("copy", steps=3, **small)
    assert isinstance(first.config, TransformerConfig)
    assert first.model.config == first.config
    save_model(tmp_path / "a.pt", first.model, first.config, first.task.vocab,
               training=first.history.state)
    resumed = train_task("copy", steps=6, resume=tmp_path / "a.pt", **small)
    assert resumed.history.loss == straight.history.loss[3:]
    after = resumed.model.state_dict()
    assert all(torch.equal(v, after[k]) for k, v in straight.model.state_dict().items())
    with pytest.raises(ValueError, match="is a run with seed 0, not 1"):
        train_task("copy", steps=6, resume=tmp_path / "a.pt", seed=1, **small)
    with pytest.raises(ValueError, match="already done 3 steps"):
        train_task("copy", steps=3, resume=tmp_path / "a.pt", **small)
    with pytest.raises(ValueError, match="is a run with runs 0.25, not 0.0"):    # other data
        train_task("copy", steps=6, resume=tmp_path / "a.pt", runs=0.0, **small)


def test_training_refuses_settings_it_cannot_honour():
    "runs on dates (it rewrote every target as its source), a cooldown without its end (it trained at rate 0)"
    with pytest.raises(ValueError, match="runs is for copy and reverse, got runs=0.25 for dates"):
        train_task("dates", steps=1, runs=0.25, n_train=200, n_valid=4, progress=False)
    with pytest.raises(ValueError, match="cooldown=5 needs end"):
        make_optimizer(nn.Linear(2, 2), 16, warmup=2, cooldown=5)
    rates = [make_optimizer(nn.Linear(2, 2), 16, warmup=2, cooldown=2, end=4)[1].get_last_lr()]
    assert rates[0][0] > 0


def test_make_optimizer_refuses_a_schedule_that_divides_by_zero():
    "d_model=0 or warmup=0 raised ZeroDivisionError from inside the scheduler's first step (equation 3 divides by both)"
    for kw, name in [(dict(d_model=0), "d_model"), (dict(d_model=16, warmup=0), "warmup")]:
        with pytest.raises(ValueError, match=f"{name} must be >= 1, got 0"):
            make_optimizer(nn.Linear(2, 2), **kw)


def test_label_smoothing_without_an_ignored_id_counts_every_token():
    torch.manual_seed(0)
    logits, target = torch.randn(6, 5), torch.randint(0, 5, (6,))
    ours = LabelSmoothingLoss(0.1, ignore_index=None)(logits, target)
    torch.testing.assert_close(ours, nn.CrossEntropyLoss(label_smoothing=0.1)(logits, target))


TINY = dict(n_train=200, n_valid=4, progress=False, average=3, average_every=2, d_model=16,
            num_heads=2, d_ff=32, num_encoder_layers=1, num_decoder_layers=1, dropout=0.1)


@pytest.mark.parametrize("warmup, stop", [(None, 3), (4, 7)])
def test_resume_is_bit_exact_with_dropout_and_averaging(warmup, stop, tmp_path):
    """8 steps in one go, or `stop` steps saved and resumed to 8: the same losses, last and averaged weights.
    (None, 3): the task's warm-up of 100 steps, the first part far shorter; (4, 7): after the warm-up, inside the
    averaging window (checkpoints at steps 4, 6, 8: the first part kept 2, 4 and 6)"""
    from transformer_nb.checkpoints import load_checkpoint
    straight = train_task("copy", steps=8, warmup=warmup, **TINY)
    first = train_task("copy", steps=stop, warmup=warmup, **TINY)
    save_model(tmp_path / "a.pt", first.model, first.config, first.task.vocab, training=first.history.state)
    torch.manual_seed(123)                  # whatever the random state: the checkpoint's is restored
    resumed = train_task("copy", steps=8, resume=tmp_path / "a.pt", **TINY)
    assert resumed.history.loss == straight.history.loss[stop:]
    after = resumed.model.state_dict()
    assert all(torch.equal(v, after[k]) for k, v in straight.model.state_dict().items())
    last = resumed.history.state["model"]
    assert all(torch.equal(v, last[k]) for k, v in straight.history.state["model"].items())
    assert any(not torch.equal(v, last[k]) for k, v in after.items())      # the average is not the last weights
    assert load_checkpoint(tmp_path / "a.pt")["training"]["schedule"]["warmup"] == (warmup or 100)


def test_resume_keeps_the_schedule_and_averaging_of_the_run(tmp_path):
    first = train_task("copy", steps=3, warmup=4, **TINY)
    save_model(tmp_path / "a.pt", first.model, first.config, first.task.vocab, training=first.history.state)
    with pytest.raises(ValueError, match="warmup 5: the run to resume has warmup 4; a resumed run keeps its schedule"):
        train_task("copy", steps=8, warmup=5, resume=tmp_path / "a.pt", **TINY)
    with pytest.raises(ValueError, match="average 1: the run to resume has average 3"):
        train_task("copy", steps=8, resume=tmp_path / "a.pt", **{**TINY, "average": 1})


def test_checkpoint_average_keeps_the_last_and_resumes():
    from transformer_nb.training import CheckpointAverage
    lin, avg = nn.Linear(2, 1), CheckpointAverage(keep=2)
    for i in range(4):
        with torch.no_grad(): lin.weight.fill_(float(i))
        avg.add(lin)
    again = CheckpointAverage(); again.load_state_dict(avg.state_dict())
    with torch.no_grad(): lin.weight.fill_(10.0)
    assert again.apply(lin).weight.flatten().tolist() == [2.5, 2.5]          # steps 2 and 3 of 0..3
    with torch.no_grad(): lin.weight.fill_(10.0)
    assert avg.apply(lin, current=True).weight.flatten().tolist() == [6.5, 6.5]   # 3 and the current 10


def test_train_leaves_the_model_in_eval_mode():
    task = make_task("copy", n_train=64, n_valid=4)
    m = Transformer(len(task.vocab), len(task.vocab), d_model=16, num_heads=2, num_encoder_layers=1,
                    num_decoder_layers=1, d_ff=32).train()
    train(m, batch_stream(task.train, task.vocab, 16), steps=2, warmup=2, average=1, progress=False)
    assert not m.training


def _tiny_run(steps, **kw):
    "A tiny copy model trained from the same start on the same batches"
    task = make_task("copy", n_train=200, n_valid=4)
    torch.manual_seed(0)
    m = Transformer(len(task.vocab), len(task.vocab), d_model=16, num_heads=2, num_encoder_layers=1,
                    num_decoder_layers=1, d_ff=32, dropout=0.0)
    return m, train(m, batch_stream(task.train, task.vocab, 16), steps=steps, warmup=2, average=1,
                    progress=False, **kw)


def test_the_cooldown_brings_the_rate_down_over_the_last_steps_up_to_its_end():
    from transformer_nb.training import cooldown_scale
    _, h = _tiny_run(6, cooldown=3)
    assert h.lr == pytest.approx([noam_lr(s, 16, 2) * min(1, (6 - s + 1) / 3) for s in range(1, 7)])
    assert [cooldown_scale(s, 6, 3) for s in range(3, 7)] == [1.0, 1.0, 2 / 3, 1 / 3]
    _, early = _tiny_run(6, cooldown=3, cooldown_end=12)          # ends later: untouched up to step 9
    assert early.lr == pytest.approx([noam_lr(s, 16, 2) for s in range(1, 7)])


def test_a_run_stopped_inside_the_cooldown_resumes_into_it_exactly():
    straight_model, straight = _tiny_run(8, cooldown=4)
    _, first = _tiny_run(5, cooldown=4, cooldown_end=8)
    m, resumed = _tiny_run(8, cooldown=4, resume=first.state)
    assert resumed.loss == straight.loss[5:] and resumed.lr == straight.lr[5:]
    assert all(torch.equal(v, m.state_dict()[k]) for k, v in straight_model.state_dict().items())
    with pytest.raises(ValueError, match="cooldown 0: the run to resume has cooldown 4"):
        _tiny_run(8, resume=first.state)


def test_a_negative_cooldown_is_refused():
    with pytest.raises(ValueError, match="cooldown must be >= 0"):
        _tiny_run(2, cooldown=-1)


def test_smoothed_targets_are_made_on_the_targets_device():
    "it built them on the CPU whatever the target's device (meta here; CUDA on a GPU)"
    assert smoothed_targets(torch.tensor([1, 2], device="meta"), 5).device.type == "meta"
