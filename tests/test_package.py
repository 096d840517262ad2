"The package as a user meets it: importable with only torch, and in step with the notebooks."
import subprocess
import sys

import pytest

from conftest import ROOT

MODULES = sorted(".".join(p.relative_to(ROOT / "transformer_nb").with_suffix("").parts)
                 for p in (ROOT / "transformer_nb").rglob("*.py")
                 if not p.stem.startswith("_") or p.stem == "__main__")


HEAVY = ("matplotlib", "IPython", "nbdev", "fastcore", "numpy.testing")


def heavy_imports(names: list[str]) -> dict[str, list[str]]:
    """Import `names`, one after another, in one fresh interpreter, and record which heavy packages each import
    brought in. A module is blamed for what was not loaded before it, so whichever module first pulls one in fails;
    one interpreter instead of one per module saves about 2 s per module."""
    code = ("import importlib, json, sys\n"
            f"heavy = {HEAVY!r}\n"
            "new = {}\n"
            f"for name in {names!r}:\n"
            "    before = {h for h in heavy if h in sys.modules}\n"
            "    importlib.import_module(name)\n"
            "    new[name] = sorted(h for h in heavy if h in sys.modules and h not in before)\n"
            "print(json.dumps(new))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/", check=True)
    import json
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def imported_with() -> dict[str, list[str]]:
    """Every module of the package, then matplotlib.pyplot (which the check must blame) and a module imported after it
    (which it must not), in one interpreter"""
    return heavy_imports(["transformer_nb"] + [f"transformer_nb.{m}" for m in MODULES] + ["matplotlib.pyplot", "csv"])


@pytest.mark.parametrize("module", ["transformer_nb"] + [f"transformer_nb.{m}" for m in MODULES])
def test_import_needs_only_torch(module, imported_with):
    "Importing any module pulls in neither matplotlib nor IPython (nor nbdev/fastcore)."
    assert imported_with[module] == [], f"import {module} also imported: {imported_with[module]}"


def test_the_import_check_sees_a_heavy_import(imported_with):
    "The check is not vacuous: the import that loads matplotlib is blamed for it, and only that one."
    assert imported_with["matplotlib.pyplot"] == ["matplotlib"] and imported_with["csv"] == []


def test_every_notebook_module_is_exported():
    "Each notebook with a default_exp has its module in transformer_nb/, and nothing else is there."
    import json
    import re
    exps = set()
    for nb in (ROOT / "nbs").glob("*.ipynb"):
        for cell in json.loads(nb.read_text())["cells"]:
            m = re.search(r"^#\|\s*default_exp\s+(\S+)", "".join(cell["source"]), re.M)
            if m: exps.add(m.group(1))
    assert "__init__" in exps  # the front door, from nbs/99_api.ipynb
    exps.discard("__init__")
    assert exps == set(MODULES), f"notebooks export {sorted(exps)}, package has {MODULES}"


def test_plotting_helpers_return_figures():
    "The plotting helpers draw from tensors alone and return matplotlib figures (headless backend)."
    import matplotlib
    matplotlib.use("Agg")
    import torch
    from matplotlib.figure import Figure

    from transformer_nb.plotting import show_attention, show_curves, show_heatmaps
    f1 = show_attention(torch.rand(2, 3, 4).softmax(-1), queries=list("abc"), keys=list("wxyz"))
    f2 = show_heatmaps(torch.rand(2, 2, 3, 3))
    f3 = show_curves(torch.arange(4), {"y": torch.arange(4.0)})
    assert all(isinstance(f, Figure) for f in (f1, f2, f3))
    assert [len(f.axes) for f in (f1, f2, f3)] == [3, 5, 1]


def test_shape_trace_is_off_by_default(capsys):
    "Modules log shapes at DEBUG level only when asked; with the trace on, every call reports its shapes."
    import io

    import torch

    from transformer_nb.attention import scaled_dot_product_attention
    from transformer_nb.core import trace_shapes
    q = torch.randn(2, 3, 4)
    scaled_dot_product_attention(q, q, q)
    assert capsys.readouterr().out == ""
    buf = io.StringIO()
    with trace_shapes(buf):
        scaled_dot_product_attention(q, q, q)
    assert "attention: q (2, 3, 4), k (2, 3, 4), v (2, 3, 4)" in buf.getvalue()


def test_notebooks_are_stored_clean(tmp_path):
    """Every notebook is stored as nbdev_clean writes it: cleaning a copy changes nothing.
    (Their outputs are checked by nbval; conftest.py makes it compare cleaned cells.)"""
    import shutil
    (tmp_path / "nbs").mkdir()
    shutil.copy(ROOT / "settings.ini", tmp_path)
    nbs = sorted((ROOT / "nbs").glob("*.ipynb"))
    for nb in nbs: shutil.copy(nb, tmp_path / "nbs")
    code = "from nbdev.clean import nbdev_clean; nbdev_clean()"
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True)
    assert out.returncode == 0 and not out.stderr, out.stderr
    changed = [nb.name for nb in nbs
               if (tmp_path / "nbs" / nb.name).read_bytes() != nb.read_bytes()]
    assert not changed, f"nbdev_clean changes {changed}: run `make clean-nbs`"


def test_plotting_without_matplotlib_names_the_extra():
    "Without matplotlib, the package imports and a plot fails with an ImportError naming the extra to install."
    code = ("import sys; sys.modules['matplotlib'] = None; sys.modules['matplotlib.pyplot'] = None\n"
            "import torch, transformer_nb.plotting as P, transformer_nb.pronouns\n"
            "try: P.show_attention(torch.rand(2, 2))\n"
            "except ImportError as e: print(e)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/", check=True)
    assert 'pip install "transformer_nb[plot]"' in out.stdout, out.stdout + out.stderr


def test_no_two_modules_export_the_same_name():
    """nbdev links a name's documentation by the name alone: a second module exporting it sent chapter 11b's card for
    its `check_number` to core's function of the same name. Each module's command-line `main`, and the book's two
    `build`s (no card shows either), are the known exceptions."""
    import ast
    import collections
    where = collections.defaultdict(list)
    for path in sorted((ROOT / "transformer_nb").rglob("*.py")):
        if path.name == "__init__.py": continue          # the package's top level re-exports
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__all__" for t in node.targets):
                for name in ast.literal_eval(node.value): where[name].append(path.relative_to(ROOT).as_posix())
    twice = {name: paths for name, paths in where.items() if len(paths) > 1}
    assert set(twice) == {"main", "build"}, twice
    assert sorted(twice["build"]) == ["transformer_nb/book/grading.py", "transformer_nb/book/measure.py"]
