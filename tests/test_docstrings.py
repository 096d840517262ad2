"""What `help()` and editors show: every public function, class and method of the package has its
own docstring, whose numpydoc Parameters/Returns sections say what the docments in the notebooks
say (tools/nbdev_docstrings.py writes them at export); the public API carries return annotations;
the main names are importable from `transformer_nb` without importing anything."""
import importlib, inspect, json, pkgutil, subprocess, sys, textwrap
import pytest
from conftest import ROOT

sys.path.insert(0, str(ROOT / "tools"))
from nbdev_docstrings import add_docstrings  # noqa: E402

import transformer_nb  # noqa: E402

MODULES = sorted(m.name for m in pkgutil.walk_packages(transformer_nb.__path__, "transformer_nb.")
                 if not m.name.split(".")[-1].startswith("_"))


def public_api():
    "(qualified name, object) of every public function, class and method the modules export"
    for modname in MODULES:
        mod = importlib.import_module(modname)
        for name in getattr(mod, "__all__", []):
            obj = getattr(mod, name)
            if not (inspect.isfunction(obj) or inspect.isclass(obj)) or obj.__module__ != modname:
                continue
            yield f"{modname}.{name}", obj
            if inspect.isclass(obj):
                for k, v in vars(obj).items():
                    if inspect.isfunction(v) and (not k.startswith("_") or k == "__init__"):
                        yield f"{modname}.{name}.{k}", v


API = dict(public_api())


def sections(doc: str) -> dict[str, str]:
    "numpydoc Parameters as {name: text} (one line of words each), without *args and **kwargs"
    from fastcore.docments import parse_docstring
    return {name: " ".join(" ".join(p.desc).split())
            for name, p in parse_docstring(doc)["Parameters"].items() if "*" not in name}


def test_the_api_is_large_enough_to_mean_something():
    assert len(API) > 150, len(API)


@pytest.mark.parametrize("name", sorted(API))
def test_own_docstring(name):
    "No public callable shows an inherited text such as nn.Module's 'Should be overridden…'."
    obj = API[name]
    if inspect.isfunction(obj) and not obj.__code__.co_filename.endswith(".py"):
        pytest.skip("written by @dataclass or NamedTuple")
    if obj.__name__ == "__init__" and list(inspect.signature(obj).parameters) == ["self"]:
        pytest.skip("nothing to describe: Python's own text is right")
    assert obj.__doc__ and obj.__doc__.strip(), f"{name} has no docstring of its own"


@pytest.mark.parametrize("name", sorted(API))
def test_docstring_agrees_with_the_docments(name):
    from fastcore.docments import docments
    obj = API[name]
    try:
        docs, params = docments(obj), inspect.signature(obj).parameters
    except Exception:
        pytest.skip("no source or signature to read")
    star = {k for k, p in params.items() if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
    # fastcore reads *args/**kwargs comments by line (two on one line: it guesses): not compared
    documented = {k: " ".join(v.split()) for k, v in docs.items()
                  if v and k != "return" and k not in star}
    if inspect.isfunction(obj) and obj.__name__ == "__init__":
        return  # a class's parameters are in the class docstring, checked there
    if inspect.isclass(obj) and not documented:  # a NamedTuple: fastcore reads no fields
        assert set(sections(obj.__doc__ or "")) <= set(getattr(obj, "_fields", ())), name
        return
    assert sections(obj.__doc__ or "") == documented, name


@pytest.mark.parametrize("name", sorted(n for n, o in API.items() if inspect.isfunction(o)
                                        and not n.endswith("__init__")
                                        and not n.startswith("transformer_nb.book.")))
def test_return_annotation(name):
    "The model's public API (the book's own tools, transformer_nb.book, aside)"
    assert inspect.signature(API[name]).return_annotation is not inspect.Signature.empty, \
        f"{name} has no return annotation"


def test_help_of_the_model_shows_parameters_and_shapes():
    import pydoc
    from transformer_nb.transformer import Transformer
    text = pydoc.render_doc(Transformer, renderer=pydoc.plaintext)
    for piece in ("Parameters", "d_model : int", "num_heads : int", "(B, S) source token ids",
                  "Returns", "(B, T, V)"):
        assert piece in text, piece
    assert "Should be overridden by all subclasses" not in text


def test_generator_on_every_layout():
    src = textwrap.dedent('''\
        def f(
            a:int,  # the first
            # the second, described
            # above it
            b:str="x",
        # what comes back
        )->int:
            "Summary"
            return a

        def g(x): return x  # a one-line def is left alone

        def _private(a:int,  # not public
                    ): pass

        class C:
            "A class"
            def __init__(self,
                n:int,  # how many
            ):
                self.n = n
            def forward(self,
                x:float,  # input
            )->float:  # output
                return x

        class P(NamedTuple):
            "Fields"
            loss: float  # the loss
            step: int  # the step
        ''')
    out = add_docstrings(src)
    ns = {"NamedTuple": __import__("typing").NamedTuple}
    exec(out, ns)
    assert ns["f"].__doc__.split("\n")[0] == "Summary"
    assert sections(ns["f"].__doc__) == {"a": "the first", "b": "the second, described above it"}
    assert "Returns\n-------\nint\n    what comes back" in inspect.cleandoc(ns["f"].__doc__)
    assert ns["g"].__doc__ is None and ns["_private"].__doc__ is None
    assert sections(ns["C"].__doc__) == {"n": "how many"}
    assert "help(C)" in ns["C"].__init__.__doc__
    assert ns["C"].forward.__doc__.startswith("A class")  # a forward without one: the class's
    assert sections(ns["C"].forward.__doc__) == {"x": "input"}
    assert sections(ns["P"].__doc__) == {"loss": "the loss", "step": "the step"}
    assert add_docstrings("def broken(:\n") == "def broken(:\n"  # never makes things worse


def test_main_names_are_lazy_and_complete():
    probe = ("import sys, transformer_nb; "
             "print(sorted(m for m in sys.modules if m.startswith(('transformer_nb', 'torch'))))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['transformer_nb']"
    for name in transformer_nb.__all__:
        obj = getattr(transformer_nb, name)
        assert obj.__module__.startswith("transformer_nb.") and obj.__name__ == name
    assert {"Transformer", "train", "translate", "attention_explorer"} <= set(transformer_nb.__all__)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        transformer_nb.nope


def test_version_matches_settings():
    settings = (ROOT / "settings.ini").read_text()
    assert f"version = {transformer_nb.__version__}" in settings


def test_init_comes_from_the_api_notebook():
    cells = json.loads((ROOT / "nbs" / "99_api.ipynb").read_text())["cells"]
    assert any("".join(c["source"]).strip() == "#| default_exp __init__" for c in cells)
