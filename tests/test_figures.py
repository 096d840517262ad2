"""Every figure the package's plotting helpers draw keeps all its text on the canvas (titles, axis labels, tick
labels, legends, values written in cells), and every heatmap has a title and a colour bar that says what its colours
measure. Each exported helper is called on small made-up inputs (a few seconds for the whole file), not by
re-running the notebooks: the figures the chapters store come from these helpers."""
from pathlib import Path

import pytest
import torch

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
from matplotlib.image import AxesImage  # noqa: E402
from matplotlib.text import Text  # noqa: E402

from conftest import bench_result  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TOLERANCE = 1.5  # px at the figure's dpi: anti-aliasing, rounding of text extents


def drawn_texts(fig) -> list:
    "The texts a draw paints: visible, not empty, tick labels only where their tick is inside the view"
    skip = set()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            if not (ax.axison and axis.get_visible()):  # axis("off"): nothing of it is drawn
                skip |= {id(t) for t in axis.get_ticklabels(which="both")} | {id(axis.label)}
                continue
            lo, hi = sorted(axis.get_view_interval())
            eps = 1e-9 * max(1.0, abs(hi - lo))
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                if not lo - eps <= tick.get_loc() <= hi + eps: skip |= {id(tick.label1), id(tick.label2)}
    out = []
    for t in fig.findobj(Text):
        if id(t) in skip or not t.get_visible() or not t.get_text().strip(): continue
        if t.axes is not None and not t.axes.get_visible(): continue
        out.append(t)
    return out


def cut_off(fig) -> list:
    "(text, its box) of every text or legend that reaches past the canvas"
    fig.canvas.draw()
    renderer, canvas = fig.canvas.get_renderer(), fig.bbox
    boxes = [(repr(t.get_text()), t.get_window_extent(renderer)) for t in drawn_texts(fig)]
    legends = [ax.get_legend() for ax in fig.axes] + list(fig.legends)
    boxes += [("legend", leg.get_window_extent(renderer)) for leg in legends if leg is not None]
    return [(name, tuple(round(v) for v in b.extents)) for name, b in boxes
            if b.x0 < canvas.x0 - TOLERANCE or b.y0 < canvas.y0 - TOLERANCE
            or b.x1 > canvas.x1 + TOLERANCE or b.y1 > canvas.y1 + TOLERANCE]


def colour_bars(fig) -> list:
    "The colour bars of a figure"
    return [ax._colorbar for ax in fig.axes if getattr(ax, "_colorbar", None) is not None]


def heatmap_problems(fig) -> list:
    "What a figure with a heatmap lacks: a title (over the figure or its panel), a colour bar with a label"
    maps = [ax for ax in fig.axes if any(isinstance(a, AxesImage) for a in ax.get_images())
            and getattr(ax, "_colorbar", None) is None]
    if not maps: return []
    problems = []
    has_title = bool(fig.get_suptitle()) or all(
        any(ax.get_title(loc=loc) for loc in ("center", "left", "right")) for ax in maps)
    if not has_title: problems.append("no title")
    bars = colour_bars(fig)
    if not bars: problems.append("no colour bar")
    problems += [f"colour bar {i} without a label" for i, cb in enumerate(bars)
                 if not (cb.ax.get_ylabel() or cb.ax.get_xlabel()).strip()]
    return problems


def words(n, stem="w"):
    return [f"{stem}{i:02d}" for i in range(n)]


def figures():
    """(name, a function drawing one figure) for every exported plotting helper, on inputs the size of the
    chapters' own"""
    from transformer_nb import explorer, plotting
    from transformer_nb.book import bench, benchmark, measure
    from transformer_nb.induction import (
        Checkpoint,
        HeadScores,
        show_phase_change,
        show_seed_runs,
    )
    from transformer_nb.inside import show_signed
    from transformer_nb.modern import show_rope_frequencies
    from transformer_nb.numbers import show_alignment
    from transformer_nb.pronouns import (
        show_links,
        show_referent_preference,
        show_strips,
    )
    from transformer_nb.transformer import show_attention_grid

    g = torch.Generator().manual_seed(0)
    rand = lambda *s: torch.rand(*s, generator=g)
    soft = lambda *s: rand(*s).softmax(-1)
    scores = lambda i: HeadScores(3.0 - i * 0.1, 3.0 - i * 0.2, -0.1 * i, rand(2, 4), rand(2, 4))
    cps = [Checkpoint(50 * i, 50 * i * 32 * 64, scores(i)) for i in range(12)]
    seed_run = lambda k: {"checkpoints": [{"tokens": 1000 * i, "loss_first": 3.0, "loss_second": 3.0 - 0.1 * i * k}
                                         for i in range(10)]}
    groups = [g_ for g_, _ in bench.PROFILE_GROUPS] + ["everything else"]
    prof = lambda mm, rest: {"ms": dict.fromkeys(groups, 0.0) | {"matrix multiplies": mm, "everything else": rest},
                             "operators": 10}
    timing = lambda mm, rest, s=1.0: {"median": s, "tokens_per_s": 1 / s, "profile": prof(mm, rest)}
    profiled = {"train": {"T=128, dropout 0.0": {"fast": timing(80.0, 20.0), "torch": timing(80.0, 40.0, 1.2),
                                                 "fast, default Adam": timing(1.0, 1.0), "flops": 1.0}},
                "decoding": {"cached": timing(3.0, 7.0), "uncached": timing(30.0, 30.0)}}
    lad = lambda top: {"ladder": {"T=16, dropout 0.1": {
        name: {"tokens_per_s": 10.0 + i, "saved_mb": 1.0} for i, name in enumerate(bench.RUNGS)} | {
        "torch": {"tokens_per_s": top, "saved_mb": 0.0}}},
        "bf16": {"T=16, dropout 0.1": {"float32": {"tokens_per_s": 10.0}, "bfloat16": {"tokens_per_s": 1.0}}}}
    cpu = bench.load_results(ROOT / "benchmarks" / "results" / "cpu.json")
    pieces, src = ["sieb", "en", "und", "neun", "zig"], ["ninety", "seven"]
    ex = explorer.attention_explorer({"cross": soft(2, 4, 6, 2)}, src, ["<s>"] + pieces, fallback=False,
                                     written=pieces + ["</s>"])
    return {
        "show_heatmaps, one map": lambda: plotting.show_heatmaps(
            rand(5, 7), title="one map", cbar_label="weight"),
        "show_heatmaps, gpt's heads": lambda: plotting.show_heatmaps(
            rand(2, 1, 2, 4), annotate="{:.2f}", row_titles=["previous-token", "induction"], xlabel="head",
            ylabel="layer", cell_size=1.6, title="two scores of every head", cbar_label="mean weight"),
        "show_heatmaps, numbers' ablation": lambda: plotting.show_heatmaps(
            20 * rand(2, 6, 4), col_titles=["German", "French"], xlabel="head", ylabel="",
            xticks=range(4), yticks=[f"{k} {l}" for k in ("encoder", "decoder", "cross") for l in range(2)],
            vmin=0, vmax=20, annotate="{:.0f}", cmap="Reds", max_width=3.9, title="one head removed",
            cbar_label="points of exact match lost"),
        "show_heatmaps, log, many heads": lambda: plotting.show_heatmaps(
            rand(2, 2, 4, 4), log=True, row_titles=["layer 0", "layer 1"], title="log", cbar_label="weight"),
        "show_attention, one head": lambda: plotting.show_attention(soft(5, 6), words(5, "q"), words(6, "k"),
                                                                     title="one head"),
        "show_attention, 6 heads": lambda: plotting.show_attention(soft(6, 4, 4), words(4), words(4),
                                                                    title="six heads"),
        "show_attention, long tokens": lambda: plotting.show_attention(
            soft(4, 6, 9), [f"piece-being-written-{i}" for i in range(6)], words(9), title="long labels",
            ylabel="row: the piece being written"),
        "show_attention_grid": lambda: show_attention_grid(soft(2, 3, 4, 5), words(4), words(5),
                                                           title="a grid", cell_size=1.6),
        "show_curves": lambda: plotting.show_curves(
            torch.arange(50), {"training loss": rand(50), "held-out loss, a long label": rand(50)},
            xlabel="step", ylabel="loss (bits per character)", title="curves"),
        "show_curves, log": lambda: plotting.show_curves(
            2 ** torch.arange(1, 9), {"a": rand(8) + 0.1}, xlabel="T", ylabel="ms", logx=True, logy=True),
        "show_strips, best heads": lambda: show_strips(
            {f"{k}: best head": [1.0] * 6 + [0.9, 0.95, 0.58, 1.0] for k in ("encoder", "decoder", "cross")},
            "prefers the referent (share of sentences)", hue=[f"held-out split {i % 2}" for i in range(10)],
            marks={0.5: "chance"}, title="10 models, one dot each"),
        "show_strips, ablations": lambda: show_strips(
            {"no head removed": [1.0] * 10, "the worst single head": [0.89 + 0.01 * i for i in range(10)],
             "best decoder + best cross": [1.0] * 8 + [0.78, 0.9],
             **{f"{k} layer {l}, all heads": (0.36 + 0.06 * torch.arange(10.0)).tolist()
                for k in ("encoder", "decoder", "cross") for l in range(2)}},
            "pronoun right (share of sentences)", hue=[f"held-out split {i % 2}" for i in range(10)],
            marks={1 / 3: "a guess"}, title="with heads removed, ten models"),
        "show_referent_preference": lambda: show_referent_preference(rand(3, 2, 4)),
        "show_links": lambda: show_links(soft(2, 7), "er/sie/es", words(7), ["decoder self", "cross"]),
        "show_alignment": lambda: show_alignment(
            [soft(5, 2), soft(5, 2)], [pieces, pieces], [src, src],
            [[{1}, {1}, set(), {0}, {0}]] * 2, ["97: layer 1, head 1", "97 again"]),
        "show_signed": lambda: show_signed(rand(2, 2, 4) - 0.5, titles=["decoder self", "cross"],
                                           title="signed", fmt="{:.1f}"),
        "show_phase_change": lambda: show_phase_change(cps, title="seed 0"),
        "show_seed_runs": lambda: show_seed_runs({"2 layers": [seed_run(1), seed_run(2)], "1 layer": [seed_run(0)]},
                                                 title="runs"),
        "show_rope_frequencies": lambda: show_rope_frequencies(64, 128),
        "show_benchmark": lambda: benchmark.show_benchmark(cpu),
        "show_spread": lambda: benchmark.show_spread(
            bench.spread([bench_result(1.0), bench_result(1.5), bench_result(1.2)]),
            {"decoding: cached / uncached tokens/s": (5.0, "at least")}, title="3 runs"),
        "show_ladder": lambda: benchmark.show_ladder([lad(12.0), lad(14.0)]),
        "show_profiles": lambda: benchmark.show_profiles(profiled),
        "show_profile": lambda: measure.show_profile(
            {"fast": [("aten::mm", 40.0, 2), ("aten::bernoulli_", 8.0, 2), ("aten::add_", 3.0, 2)],
             "torch": [("aten::addmm", 45.0, 2), ("aten::native_dropout", 9.0, 2)]}, title="profiles"),
        "explorer's static picture": lambda: ex._fallback_figure(),
    }


FIGURES = figures()


def test_every_plotting_helper_is_drawn_here():
    "A new exported helper that draws a figure must be added to FIGURES"
    import ast
    drawn = {name.split(",")[0] for name in FIGURES}
    found = set()
    for path in (ROOT / "transformer_nb").rglob("*.py"):
        tree = ast.parse(path.read_text())
        public = next((n.value for n in tree.body if isinstance(n, ast.Assign)
                       and any(getattr(t, "id", "") == "__all__" for t in n.targets)), None)
        names = {e.value for e in public.elts} if public is not None else set()
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name in names and node.name.startswith("show_"):
                src = ast.get_source_segment(path.read_text(), node)
                if "pyplot()" in src or "show_heatmaps(" in src or "show_attention(" in src:
                    found.add(node.name)
    assert found - drawn == set(), f"helpers not checked here: {sorted(found - drawn)}"


@pytest.mark.parametrize("name", list(FIGURES))
def test_no_text_is_cut_and_every_heatmap_is_labelled(name):
    from transformer_nb.plotting import pyplot
    fig = FIGURES[name]()
    try:
        assert cut_off(fig) == [], f"{name}: text past the canvas {fig.bbox.extents}"
        assert heatmap_problems(fig) == [], name
    finally:
        pyplot().close(fig)


def test_the_check_finds_a_cut_label_and_an_unlabelled_colour_bar():
    "The check itself can fail: a label pushed off the canvas, a heatmap with a bare colour bar"
    from transformer_nb.plotting import pyplot
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(2, 2))
    im = ax.imshow(torch.rand(3, 3).numpy())
    ax.set_ylabel("a label far too long to fit a two-inch figure, " * 2)
    fig.colorbar(im)
    assert any(name.startswith("'a label far") for name, _ in cut_off(fig))
    assert heatmap_problems(fig) == ["no title", "colour bar 0 without a label"]
    plt.close(fig)

