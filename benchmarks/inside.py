"""Chapter 11d's questions over several seeds: train the numbers recipe (chapter 11b, English -> German) once per
seed and record, per model (`inside_report`): the share of the clean-corrupt logit difference restored by patching
each head, each sublayer and each residual position; each head's ablation cost on the same metric and on
teacher-forced accuracy (chapter 9b's `ablation_costs`); their rank correlations; the direct logit attribution and
its error; the recomposition error of the residual stream; and the logit lens over the held-out set. Then why no
single head restores much (`why_report`): layer 1's cross-attention heads patched in groups of 1 to 4, each head
patched the other way (the corrupted head into the clean run), per pair, at the answer position only, and for
pairs that differ in the tens or the hundreds word. Last, the logit lens of chapter 11c's character GPT on its
held-out text (`gpt_lens`), per seed.

    source tools/kernels.sh
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/inside.py                # 5 + 3 seeds -> results/inside.json
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/inside.py --seeds 0 --steps 30 --print   # small

The committed file also holds, under "check", the small run (seed 0, 30 steps) that tests/test_inside.py trains
again and compares. `--model` trains seed 0 alone and saves it (`save_model`, chapter 9a) as results/numbers_de_seed0.pt:
the model chapter 11d looks inside, read from the file instead of trained again; results/numbers_de_seed0.json records
the weights' SHA-256, which chapter 11b (it trains the same model) and chapter 11d (it reads the file) both check.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/inside.py --model            # -> results/numbers_de_seed0.pt One thread, the AVX2 kernels of tools/kernels.sh: the numbers are reproduced exactly.
"""
from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import os
import sys
import time
from pathlib import Path

import torch

OUT = Path(__file__).parent / "results" / "inside.json"
MODEL = OUT.parent / "numbers_de_seed0.pt"  # chapter 11d's model: the recipe's seed 0
CHECK = dict(lang="de", seed=0, steps=30)  # the small run the test repeats
GROUPS = [(0, 10), (10, 20), (20, 40), (40, 64)]  # positions of a GPT window, for the lens figure


def _r(t) -> list | float:
    "Numbers rounded to 4 decimals, as nested lists (JSON)"
    return torch.as_tensor(t, dtype=torch.float64).mul(1e4).round().div(1e4).tolist()


def _lens_row(lens) -> dict:
    return dict(accuracy=_r(lens.accuracy), first=_r(lens.first), prob=_r(lens.prob))


def inside_report(run) -> dict:
    "Patching, ablation, attribution and the logit lens of one numbers model (a `Trained`)"
    from transformer_nb.inside import (
        KIND,
        ablation_costs_ld,
        lens_over,
        logit_attribution,
        logit_difference,
        number_pairs,
        patching_study,
        recomposition_error,
        run_with_cache,
        spearman,
    )
    from transformer_nb.masking import causal_mask
    from transformer_nb.reading import ablation_costs
    model, task = run.model.eval(), run.task
    pairs = number_pairs(model, task)
    metric = lambda l: logit_difference(l, pairs.pos, pairs.good, pairs.bad)
    kw = dict(tgt_mask=causal_mask(pairs.clean[1].shape[1]))
    p = patching_study(model, pairs.clean, pairs.corrupted, metric, **kw)
    cost = ablation_costs_ld(model, pairs.clean, metric, **kw)
    accuracy_cost = ablation_costs(model, task.vocab, task.valid)
    flat = lambda d: torch.cat([d[k].flatten() for k in KIND.values()])
    heads = flat(p.heads)
    best = int(heads.argmax())
    names = [f"{k} {l}.{h}" for k in KIND.values() for l in range(len(p.heads[k]))
             for h in range(p.heads[k].shape[1])]
    logits, cache = run_with_cache(model, *pairs.clean, **kw)
    att = logit_attribution(model, cache, pairs.pos, pairs.good, pairs.bad)
    ld = logits[torch.arange(len(pairs.pos)), pairs.pos]
    ld = ld.gather(1, pairs.good[:, None])[:, 0] - ld.gather(1, pairs.bad[:, None])[:, 0]
    lens = lens_over(model, task.vocab, task.valid)
    nan_none = lambda x: None if x != x else round(x, 4)
    seen = lambda t: torch.cat([t[:8], t[12:]])  # heads in KIND's order, less decoder layer 0's self-attention
    return dict(
        lang=task.lang, seed=run.history.state["settings"]["seed"],
        steps=len(run.history.loss), pairs=len(pairs.numbers),
        clean=round(p.clean, 4), corrupted=round(p.corrupted, 4),
        heads={k: _r(v) for k, v in p.heads.items()},
        sublayers={k: round(v, 4) for k, v in p.sublayers.items()},
        resid={k: _r(v) for k, v in p.resid.items()},
        best_head=names[best], best_share=round(float(heads[best]), 4),
        ablation={k: _r(v) for k, v in cost.items()},
        accuracy_ablation={k: _r(v) for k, v in accuracy_cost.items()},
        spearman=nan_none(spearman(heads, flat(cost))),
        spearman_cross=nan_none(spearman(p.heads["cross"], cost["cross"])),
        spearman_accuracy=nan_none(spearman(heads, flat(accuracy_cost))),
        # without decoder layer 0's self-attention: it reads only the target, the same in both runs,
        # so its four heads restore exactly 0 and tie
        spearman_seen=nan_none(spearman(seen(heads), seen(flat(cost)))),
        attribution={k: round(float(v.mean()), 4) for k, v in att.items()},
        attribution_error=float((sum(att.values()) - ld).abs().max()),
        recomposition=recomposition_error(model, cache),
        lens=_lens_row(lens),
        why=why_report(model, task, names))


def _shares(model, pairs, patches, into="corrupted"):
    """Per pair, the logit difference a patch restores (into the corrupted run) or removes (into the clean run), as a
    share of the clean-corrupt difference averaged over the pairs (not of the pair's own): the mean over the pairs
    is then the share of the mean difference, patching_study's measure"""
    from transformer_nb.inside import run_with_cache
    from transformer_nb.masking import causal_mask
    kw = dict(tgt_mask=causal_mask(pairs.clean[1].shape[1]))
    ar = torch.arange(len(pairs.pos))
    ld = lambda l: l[ar, pairs.pos, pairs.good] - l[ar, pairs.pos, pairs.bad]    # (B,)
    run = lambda x, patch=None: ld(run_with_cache(model, *x, places=[], patches=patch, **kw)[0])
    hi, lo = run(pairs.clean), run(pairs.corrupted)
    if into == "corrupted": return (run(pairs.corrupted, patches) - lo) / (hi - lo).mean()
    return (hi - run(pairs.clean, patches)) / (hi - lo).mean()


def why_report(model, task, names) -> dict:
    "Why no single head restores much: groups, the other direction, per pair, at one position, other words"
    from transformer_nb.inside import KIND, number_pairs, patch_head, run_with_cache
    from transformer_nb.masking import causal_mask
    att = {kind: f"{prefix}.%d.{a}" for (prefix, a), kind in KIND.items()}
    out = {}
    for word in ("units", "tens", "hundreds"):
        pairs = number_pairs(model, task, word)
        kw = dict(tgt_mask=causal_mask(pairs.clean[1].shape[1]))
        _, clean = run_with_cache(model, *pairs.clean, **kw)
        _, corrupt = run_with_cache(model, *pairs.corrupted, **kw)
        per = torch.stack([_shares(model, pairs, patch_head(clean, att[n.split()[0]] % int(n[-3]), int(n[-1])))
                           for n in names])                                    # (heads, B)
        row = dict(pairs=len(pairs.numbers), best_head=names[int(per.mean(1).argmax())],
                   best_share=round(float(per.mean(1).max()), 4))
        if word == "units":
            # the best group of k of decoder layer 1's four cross-attention heads, k = 1..4
            a1 = "decoder.1.cross_attn"
            row["cross1_groups"] = [round(max(float(_shares(model, pairs, patch_head(clean, a1, list(g))).mean())
                                              for g in itertools.combinations(range(4), k)), 4) for k in range(1, 5)]
            both = patch_head(clean, "decoder.0.cross_attn", [0, 1, 2, 3]) | patch_head(clean, a1, [0, 1, 2, 3])
            row["all_cross"] = round(float(_shares(model, pairs, both).mean()), 4)
            # the other direction: the corrupted run's head in the clean run, the share of the difference lost
            noise = torch.stack([_shares(model, pairs, patch_head(corrupt, att[n.split()[0]] % int(n[-3]),
                                                                  int(n[-1])), into="clean").mean() for n in names])
            row["noising"] = _r(noise)
            row["heads"] = _r(per.mean(1))
            # per pair: the share (of the mean difference) of the best head of that pair
            best = per.max(0).values
            row["per_pair_best"] = dict(median=round(float(best.median()), 4), max=round(float(best.max()), 4),
                                        over_half=int((best >= 0.5).sum()))
            # at the answer position only, the head that restores most
            at = [float(_shares(model, pairs, patch_head(clean, att[n.split()[0]] % int(n[-3]), int(n[-1]),
                                                         pos=pairs.pos)).mean()) for n in names]
            row["at_answer_best"] = round(max(at), 4)
            # which reading of the logit lens first ranks the answer first, over the pairs
            from transformer_nb.inside import logit_lens
            lens = logit_lens(model, clean)[:, torch.arange(len(pairs.pos)), pairs.pos]   # (L + 1, B, V)
            right = lens.argmax(-1) == pairs.good                                         # (L + 1, B)
            row["lens_answer"] = _r(right.float().mean(1))
        out[word] = row
    return out


def run(lang: str, seed: int, steps: int | None) -> dict:
    "Train one numbers model and look inside it (`inside_report`)"
    from transformer_nb.numbers import train_numbers
    start = time.perf_counter()
    row = inside_report(train_numbers(lang, seed=seed, steps=steps))
    row["seconds"] = round(time.perf_counter() - start, 1)
    return row


def gpt_lens(seed: int, steps: int | None) -> dict:
    "Train chapter 11c's character GPT and read its held-out text through the logit lens"
    from transformer_nb.gpt import LM_TRAINING, char_lm, pydoc_text
    from transformer_nb.inside import lm_lens
    text = pydoc_text()
    train_kw = dict(LM_TRAINING, steps=steps or LM_TRAINING["steps"])
    model, losses, seconds = char_lm(text, seed=seed, train_kw=train_kw)
    lens = lm_lens(model, text.valid, context=train_kw["context"])
    by = lambda a, b: lens.position[:, a:b].mean(1)
    return dict(seed=seed, steps=len(losses), **_lens_row(lens), groups=[list(g) for g in GROUPS],
                position=_r(torch.stack([by(a, b) for a, b in GROUPS], 1)), seconds=round(seconds, 1))


def weights_sha256(model) -> str:
    "SHA-256 of a model's weights: each name and its tensor's bytes, in the state dict's order"
    h = hashlib.sha256()
    for name, t in model.state_dict().items():
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def save_model_seed0(path: Path = MODEL) -> None:
    """Train the numbers recipe (German) with seed 0, as chapter 11b does, and save it for chapter 11d; beside it
    a small JSON record (the file's name and the weights' SHA-256) that chapter 11b checks its own training against"""
    from transformer_nb.checkpoints import save_model
    from transformer_nb.numbers import train_numbers
    run = train_numbers("de", seed=0)
    h = run.history
    meta = dict(task=run.task.name, seed=0, steps=len(h.loss), final_loss=round(float(h.loss[-1]), 4))
    save_model(path, run.model, run.config, run.task.vocab, **meta)
    record = dict(file=path.name, weights_sha256=weights_sha256(run.model),
                  tensors=len(run.model.state_dict()), **meta)
    path.with_suffix(".json").write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {path} ({path.stat().st_size / 1e3:.0f} kB) and {path.with_suffix('.json').name}", file=sys.stderr)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lang", default="de")
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    p.add_argument("--gpt-seeds", nargs="*", type=int, default=None, help="default: 0 1 2, none with --print")
    p.add_argument("--steps", type=int, default=None, help="default: NUMBER_SETTINGS")
    p.add_argument("--print", action="store_true", help="print the runs as JSON, write nothing")
    p.add_argument("--out", default=str(OUT))
    p.add_argument("--model", action="store_true", help=f"train seed 0 and save it as {MODEL.name}, nothing else")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    if args.model:
        save_model_seed0()
        return 0
    from transformer_nb.numbers import NUMBER_MODEL, NUMBER_SETTINGS
    runs = []
    for seed in args.seeds:
        runs.append(run(args.lang, seed, args.steps))
        r = runs[-1]
        print(f"{args.lang} seed {seed}: best head {r['best_head']} {r['best_share']:.1%}, "
              f"spearman {r['spearman']}, {r['seconds']:.0f} s", file=sys.stderr)
    gpt_seeds = args.gpt_seeds if args.gpt_seeds is not None else [] if args.print else [0, 1, 2]
    gpt = [gpt_lens(s, None) for s in gpt_seeds]
    if args.print:
        print(json.dumps(runs, indent=1))
        return 0
    result = dict(
        recipe=dict(model=NUMBER_MODEL, settings=NUMBER_SETTINGS, lang=args.lang),
        torch=torch.__version__, threads=1,
        kernels=os.environ.get("ATEN_CPU_CAPABILITY", "default"),
        note="seconds are wall-clock on a shared 2-core machine under other jobs' load",
        runs=runs, gpt=gpt,
        check=run(CHECK["lang"], CHECK["seed"], CHECK["steps"]),
    )
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
