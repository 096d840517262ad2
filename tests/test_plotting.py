"""The plotting helpers size their figures for the page: at the natural size (PX_PER_INCH CSS px per inch, the size
the site shows them at), every cell of a map read cell by cell is at least MIN_CELL_PX and every text at least
MIN_LABEL_PX, whatever the number of tokens and heads; the PNG they are shown as is twice that size and carries it."""
import io
import json

import pytest
import torch

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
from transformer_nb.plotting import (
    MIN_CELL_PX,
    MIN_LABEL_PX,
    PX_PER_INCH,
    figure_legibility,
    figure_png,
    show_attention,
    show_heatmaps,
)
from transformer_nb.transformer import show_attention_grid


def words(n):
    return [f"w{i:02d}" for i in range(n)]


def measured(fig) -> dict:
    """The smallest cell and text of a figure, measured here from the drawn artists (not by figure_legibility), in
    CSS px at the natural size."""
    from matplotlib.text import Text
    fig.draw_without_rendering()  # positions and sizes, without painting pixels
    scale = PX_PER_INCH / fig.dpi
    cells = [min(ax.get_window_extent().width / im.get_array().shape[1],
                 ax.get_window_extent().height / im.get_array().shape[0]) * scale
             for ax in fig.axes for im in ax.get_images()]
    texts = [t.get_fontsize() * PX_PER_INCH / 72 for t in fig.findobj(Text) if t.get_visible() and t.get_text()]
    return dict(cell=min(cells), label=min(texts))


def panels_square(fig) -> bool:
    "Every heatmap's cells are square"
    fig.draw_without_rendering()  # positions and sizes, without painting pixels
    for ax in fig.axes:
        for im in ax.get_images():
            box, (r, c) = ax.get_window_extent(), im.get_array().shape[:2]
            if abs(box.width / c - box.height / r) > 0.5:
                return False
    return True


def overlapping(fig) -> list:
    "Pairs of panels (colour bar included) whose boxes, with their labels, ticks and titles, overlap"
    fig.draw_without_rendering()  # positions and sizes, without painting pixels
    boxes = [ax.get_tightbbox() for ax in fig.axes]
    return [(i, j) for i in range(len(boxes)) for j in range(i + 1, len(boxes)) if boxes[i].overlaps(boxes[j])]


CASES = [  # (H, T, S): one head of a few tokens up to many heads of many tokens; 5 heads leave an empty place
    (1, 3, 4), (8, 11, 11), (4, 11, 24), (2, 60, 40), (5, 7, 9)]


@pytest.mark.parametrize("H, T, S", CASES)
def test_attention_cells_and_labels_are_legible_at_the_natural_size(H, T, S):
    w = torch.rand(H, T, S).softmax(-1)
    fig = show_attention(w, words(T), words(S), title=f"{H} heads")
    m = measured(fig)
    assert m["cell"] >= MIN_CELL_PX - 0.1, m
    assert m["label"] >= MIN_LABEL_PX, m
    assert panels_square(fig)
    assert not overlapping(fig)
    box, (w, h) = fig.get_tightbbox(), fig.get_size_inches()  # no text cut off at the edges
    assert box.x0 >= -0.01 and box.y0 >= -0.01 and box.x1 <= w + 0.01 and box.y1 <= h + 0.01, (box, w, h)
    leg = figure_legibility(fig)
    assert leg["cell"] == pytest.approx(m["cell"], abs=0.2) and leg["label"] == pytest.approx(m["label"], abs=0.1)
    assert (leg["width"], leg["height"]) == tuple(round(x) for x in fig.get_size_inches() * PX_PER_INCH)


def test_heads_wrap_into_rows_that_fit_the_text_column():
    fig = show_attention(torch.rand(8, 11, 11).softmax(-1), words(11), words(11))
    leg = figure_legibility(fig)
    assert leg["width"] <= 640 and leg["cell"] >= MIN_CELL_PX
    rows = {round(ax.get_position().y0, 3) for ax in fig.axes if ax.get_images()}
    assert len(rows) > 1  # wrapped


def test_a_layer_by_head_grid_and_small_label_sizes_stay_legible():
    fig = show_attention_grid(torch.rand(2, 4, 11, 24).softmax(-1), words(11), words(24), cell_size=1.6)
    m = measured(fig)
    assert not overlapping(fig)
    box, (w, _) = fig.get_tightbbox(), fig.get_size_inches()  # the row titles are not cut off
    assert box.x0 >= -0.01 and box.x1 <= w + 0.01, (box, w)
    assert m["cell"] >= MIN_CELL_PX - 0.1 and m["label"] >= MIN_LABEL_PX
    fig = show_heatmaps(torch.rand(5, 5), xticks=words(5), yticks=words(5), label_size=4)  # raised to the minimum
    assert measured(fig)["label"] >= MIN_LABEL_PX


def test_values_written_in_cells_fit_and_log_scale_shows_small_values():
    q = torch.full((6, 14), 0.1 / 14); q[torch.arange(5), torch.arange(5)] += 0.9; q[-1] = 0
    fig = show_heatmaps(q, xticks=words(14), yticks=words(6), log=True, annotate="{:.3f}", colorbar=False)
    m = measured(fig)
    assert m["cell"] >= MIN_CELL_PX and m["label"] >= MIN_LABEL_PX
    im = fig.axes[0].get_images()[0]
    small, big, zero = (im.to_rgba(v) for v in (0.1 / 14, 0.9 + 0.1 / 14, 0.0))
    assert small != big and small != zero  # ε/V has a colour of its own
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert texts.count("0.007") == 5 * 13 and texts.count("0.907") == 5


def test_the_png_is_twice_the_natural_size_and_carries_it():
    from PIL import Image
    fig = show_attention(torch.rand(2, 5, 7).softmax(-1), words(5), words(7), title="a title")
    png, size = figure_png(fig)
    img = Image.open(io.BytesIO(png))
    leg = json.loads(img.text["tnb-legibility"])
    assert size == dict(width=leg["width"], height=leg["height"])
    assert abs(img.width - 2 * leg["width"]) <= 2 and abs(img.height - 2 * leg["height"]) <= 2
    assert leg["title"] == "a title" and leg["cell"] >= MIN_CELL_PX and leg["label"] >= MIN_LABEL_PX
    assert "Software" not in img.text  # the same bytes with another matplotlib version


def test_long_titles_wrap_inside_the_figure_and_labels_keep_whole_words():
    "A curve's title longer than the figure is wrapped into lines that fit; a colour bar's label wraps at spaces"
    from transformer_nb.plotting import show_curves
    title = "Gradient per layer at initialisation, 24 feed-forward sublayers in a stack"
    fig = show_curves(torch.arange(1, 5), {"a": torch.rand(4)}, xlabel="x", ylabel="y", title=title)
    fig.canvas.draw()
    box, t = fig.bbox, fig.axes[0].title
    ext = t.get_window_extent()
    assert ext.x0 >= box.x0 and ext.x1 <= box.x1, (ext, box)      # ran off both edges before
    assert "\n" in t.get_text() and t.get_text().split() == title.split()
    # shorter than the figure, but centred over axes that a long y label pushes right (chapter 2's figure)
    fig = show_curves(torch.arange(1, 5), {"a": torch.rand(4)}, xlabel="d_k", logy=True,
                      ylabel="mean gradient norm at the scores",
                      title="... and the gradient that reaches the scores shrinks")
    fig.canvas.draw()
    ext = fig.axes[0].title.get_window_extent()
    assert ext.x0 >= fig.bbox.x0 and ext.x1 <= fig.bbox.x1, (ext, fig.bbox)
    fig = show_curves(torch.arange(1, 5), {"a": torch.rand(4)}, xlabel="x", ylabel="y", title="short")
    assert fig.axes[0].title.get_text() == "short"
    # a colour bar beside the first of three rows of small panels: its label is wrapped, never inside a word
    fig = show_attention_grid(torch.rand(3, 4, 5, 5).softmax(-1), words(5), words(5))
    labels = [ax.yaxis.label.get_text() for ax in fig.axes if not ax.get_images() and ax.yaxis.label.get_text()]
    assert labels and all(set(lab.split()) <= {"attention", "weight"} for lab in labels), labels


def _panels_of(fig):
    "tools/build_site.py's figure_panels on the PNG the page shows: (kind, x, y, w, h), in reading order"
    import importlib.util

    from conftest import ROOT
    spec = importlib.util.spec_from_file_location("build_site", ROOT / "tools" / "build_site.py")
    bs = importlib.util.module_from_spec(spec); spec.loader.exec_module(bs)
    png, leg = figure_png(fig)
    return [(p[4], *p[:4]) for p in bs.figure_panels(png, leg["width"])]


def test_a_grid_shown_panel_by_panel_keeps_its_title_whole_and_each_panel_named():
    """A phone shows a layer-by-head grid panel by panel (tools/site.js): the figure's title came out in two pieces
    over two panels ("reverse:" / "cross-attention"), the colour bar between the rows, and the panels of the second
    row with no title. Now the title is one piece first, the colour bar after it, and every panel names its layer and
    head."""
    torch.manual_seed(0)
    w = torch.softmax(torch.randn(2, 4, 8, 7), -1)
    fig = show_attention_grid(w, queries=["<s>"] + list("5912704"), keys=list("4072195"),
                              title="reverse: cross-attention")
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
    assert titles == [f"layer {l}, head {h}" for l in range(2) for h in range(4)]
    parts = _panels_of(fig)
    assert [k for k, *_ in parts] == ["t"] + ["p"] * 9
    title, bar, *panels = parts
    assert title[3] > 150                                           # the whole title, not one word
    assert bar[1] > max(p[1] for p in panels)                       # the colour bar, right of every panel
    assert len({p[2] for p in panels}) == 2                         # two rows of four


def test_words_under_panels_stay_with_their_panel():
    "The 'keys' under two panels were taken for slivers and joined into one strip under both, apart from either"
    torch.manual_seed(0)
    fig = show_attention(torch.softmax(torch.randn(2, 40, 40), -1), head_titles=["a", "b"],
                         title="two panels of forty")
    parts = _panels_of(fig)
    assert [k for k, *_ in parts].count("t") == 1, parts             # the title alone
    assert parts[0][0] == "t" and parts[0][2] < 10


def test_every_panel_of_a_map_without_labels_shows_its_own_positions_in_whole_numbers():
    """A phone shows the panels one by one (tools/site.js): the second panel of a map without tick labels (the
    positions of chapter 11e's induction heads, chapter 5's 5 x 2 batch) showed no numbers on its left, the first none
    under it, and a map two columns wide was numbered -0.5, 0.0, 0.5, 1.0, 1.5. Now each panel numbers both of its
    axes, with whole positions only."""
    torch.manual_seed(0)
    for w in (torch.softmax(torch.randn(4, 10, 10), -1), torch.randn(2, 5, 2)):
        fig = show_heatmaps(w, title="no labels")
        fig.canvas.draw()
        panels = [ax for ax in fig.axes if ax.images and ax.get_label() != "<colorbar>"]
        assert len(panels) == len(w)
        for ax in panels:
            for axis, size in ((ax.xaxis, w.shape[2]), (ax.yaxis, w.shape[1])):
                shown = [t.get_text() for t in axis.get_ticklabels() if t.get_visible() and t.get_text()]
                assert shown, (w.shape, axis)
                lo, hi = sorted(axis.get_view_interval())
                ticks = [v for v in axis.get_ticklocs() if lo <= v <= hi]
                assert ticks and all(float(v).is_integer() for v in ticks), ticks
                assert set(range(size)) >= {int(v) for v in ticks}


def test_a_legend_over_the_curves_moves_under_the_plot():
    "show_curves: a legend that no place inside the axes keeps clear of the data goes under the plot; else it stays"
    from transformer_nb.plotting import show_curves
    x = torch.arange(1, 2001).float()
    peaks = {f"curve {i}, a long label to fill the corner": torch.exp(-((x.log() - i) ** 2)) for i in range(2, 8)}
    fig = show_curves(x, peaks, logx=True)
    assert fig.axes[0].get_legend() is None and len(fig.legends) == 1
    assert fig.get_figheight() > 3.0                                  # the plot kept its size
    fig2 = show_curves(torch.arange(1, 11), {"a": torch.arange(1, 11) * 1.0})
    assert fig2.axes[0].get_legend() is not None and not fig2.legends


def test_one_row_title_names_every_row_its_heads_wrap_into():
    fig = show_heatmaps(torch.rand(1, 8, 11, 11), row_titles=["layer 0"], xticks=words(11), yticks=words(11))
    labels = [ax.get_ylabel() for ax in fig.axes if ax.get_images() and ax.get_ylabel()]
    assert len(labels) > 1 and all(l.startswith("layer 0") for l in labels)


def test_a_title_set_at_the_panels_left_is_the_figures_title():
    "the site's alt text: a panel titled with loc='left' (the benchmark's profiles) counted as untitled"
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots()
    ax.set_title("where a step's time goes", loc="left")
    assert figure_legibility(fig)["title"] == "where a step's time goes"
    plt.close(fig)


def test_a_legend_over_a_segment_between_two_points_covers_the_curve():
    """show_curves tested only the plotted points, so a legend over the segment between two of them stayed inside
    (chapter 10's reverse figure drew its legend over the green curve between steps 250 and 300). The one test of
    the package, _covers, now checks the segments too; chapter 11e's legends use it, twin axes included"""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from transformer_nb.plotting import _covers
    fig, ax = plt.subplots(figsize=(4, 3), layout="constrained")
    line, = ax.plot([0, 1], [0, 1], label="diagonal")           # two points, at the corners
    legend = ax.legend(loc="center")
    assert _covers(fig, legend, [line])
    far = ax.legend(loc="upper left")
    assert not _covers(fig, far, [line])
    plt.close(fig)
