"The diagrams of the site: figures from code, written as byte-identical PNGs (that the module imports without matplotlib is checked with the rest of the package in test_package.py)."
import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from transformer_nb.book import diagrams as D

EXPECTED = ["architecture.png", "architecture_postln.png", "embeddings.png", "attention.png", "multihead.png",
            "encoder_layer_preln.png", "encoder_layer_postln.png", "decoder_layer_preln.png",
            "decoder_layer_postln.png", "masks.png", "data_parallel.png", "checkpoint.png"]

CALLS = [lambda: D.draw_architecture(), lambda: D.draw_architecture(norm_first=False), D.draw_embeddings,
         D.draw_attention, lambda: D.draw_multihead(), lambda: D.draw_multihead(num_heads=8),
         lambda: D.draw_layer("encoder", True), lambda: D.draw_layer("encoder", False),
         lambda: D.draw_layer("decoder", True), lambda: D.draw_layer("decoder", False),
         lambda: D.draw_masks(), lambda: D.draw_masks(lengths=(7, 4, 2), T=7),
         D.draw_data_parallel, lambda: D.draw_data_parallel(world_size=1),
         D.draw_checkpoint]


@pytest.mark.parametrize("i", range(len(CALLS)))
def test_every_function_returns_a_figure(i):
    fig = CALLS[i]()
    try:
        assert isinstance(fig, Figure)
        assert D.diagram_texts(fig), "a diagram with no text"
        assert fig.get_size_inches()[0] * 110 <= 710, "wider than the site's text column"
    finally:
        plt.close(fig)


def test_layernorms_where_the_variant_puts_them():
    "Pre-LN: one LayerNorm per sublayer plus a final one per stack; post-LN: one per sublayer, none at the end."
    for norm_first, finals in ((True, 2), (False, 0)):
        fig = D.draw_architecture(norm_first=norm_first)
        texts = D.diagram_texts(fig); plt.close(fig)
        assert (texts.count("LayerNorm"), texts.count("final LayerNorm")) == (5, finals)


def test_bad_arguments():
    with pytest.raises(ValueError, match="kind must be"): D.draw_layer("middle")
    with pytest.raises(ValueError, match="num_heads must be"): D.draw_multihead(0)
    with pytest.raises(ValueError, match="lengths must be"): D.draw_masks(lengths=(6,), T=5)


def digests(folder):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.glob("*.png"))}


def test_save_diagrams_writes_the_files_byte_identically(tmp_path):
    some = EXPECTED[::3]  # a third of them, drawn twice (the next test draws them all)
    assert [p.name for p in D.save_diagrams(tmp_path / "a", some)] == some
    assert [p.name for p in D.save_diagrams(tmp_path / "b", some)] == some
    assert digests(tmp_path / "b") == digests(tmp_path / "a") and len(digests(tmp_path / "a")) == len(some)
    assert not plt.get_fignums(), "save_diagrams left figures open"
    with pytest.raises(ValueError, match=r"names: no diagram called \['x.png'\]"):
        D.save_diagrams(tmp_path / "c", ["x.png"])


def test_command_line_draws_what_images_holds(tmp_path):
    """`python -m transformer_nb.book.diagrams OUT` writes every diagram, in order, and they are the committed ones in
    images/ (regenerate those with `python -m transformer_nb.book.diagrams images`)."""
    out = subprocess.run([sys.executable, "-m", "transformer_nb.book.diagrams", str(tmp_path)], capture_output=True,
                         text=True, check=True)
    assert [Path(p).name for p in out.stdout.split()] == EXPECTED
    committed = {k: v for k, v in digests(ROOT / "images").items() if k in EXPECTED}
    assert committed == digests(tmp_path)


def test_diagram_arguments_are_checked_by_name():
    "norm_first='no' drew a pre-LN layer titled 'our default'; a string of names was read letter by letter"
    with pytest.raises(TypeError, match="norm_first"):
        D.draw_layer("encoder", norm_first="no")
    with pytest.raises(TypeError, match="norm_first"):
        D.draw_architecture(norm_first=1)
    with pytest.raises(TypeError, match="names must be a list of file names, got the string 'masks.png'"):
        D.save_diagrams("/tmp", "masks.png")
