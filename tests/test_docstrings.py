"""The documentation is written in the cells as numpydoc docstrings, which `help()`, fastcore's
`docments` and nbdev's `show_doc` all read: over the whole public API (every module's `__all__`
and the methods of its public classes), every parameter, and the return value where it is
annotated, is documented in each of the three. A class's constructor parameters are in its
`__init__` docstring (where `docments(cls)` reads them), a NamedTuple's or dataclass's fields
in the class docstring. The public API carries return annotations; the main names are
importable from `transformer_nb` without importing anything."""
import importlib
import inspect
import json
import pkgutil
import pydoc
import re
import subprocess
import sys

import pytest

import transformer_nb
from conftest import ROOT

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
                    if not isinstance(v, staticmethod): BOUND.add(f"{modname}.{name}.{k}")
                    v = v.__func__ if isinstance(v, (classmethod, staticmethod)) else v
                    if inspect.isfunction(v) and (not k.startswith("_") or k == "__init__"):
                        yield f"{modname}.{name}.{k}", v


BOUND = set()  # the methods that receive self or cls


API = dict(public_api())


def is_record(obj) -> bool:
    "A NamedTuple or a dataclass: its fields are its parameters, documented in its docstring"
    import dataclasses
    return inspect.isclass(obj) and (hasattr(obj, "_fields") and issubclass(obj, tuple)
                                     or dataclasses.is_dataclass(obj))


def generated(obj) -> bool:
    "Written by @dataclass or NamedTuple: no source of its own"
    return inspect.isfunction(obj) and not obj.__code__.co_filename.endswith(".py")


def parameters(obj, name: str = "") -> list[str]:
    "The names a caller passes (without self and cls), as the docstring lists them"
    bound = name in BOUND
    if inspect.isclass(obj) and not is_record(obj):
        if "__init__" not in vars(obj): return []       # e.g. an exception class
        obj, bound = obj.__init__, True
    params = [p.name for p in inspect.signature(obj).parameters.values()]
    return params[1:] if bound else params


def returns(obj) -> bool:
    "A function whose return annotation says it returns something"
    return inspect.isfunction(obj) and inspect.signature(obj).return_annotation not in (
        inspect.Signature.empty, None, "None")


def says_all(obj) -> bool:
    "The return annotation says all there is: a plotting helper's `Figure` needs no Returns"
    return inspect.signature(obj).return_annotation in ("Figure", "matplotlib.figure.Figure")


def documented(name, obj, ret=False):
    "Skip what has nothing to document: no parameters (and, with `ret`, no return value)."
    if generated(obj): pytest.skip("written by @dataclass or NamedTuple")
    if inspect.isfunction(obj) and obj.__name__ == "__init__":
        pytest.skip("a constructor: tested through its class")
    if not parameters(obj, name) and not (ret and returns(obj)):
        pytest.skip("nothing to document")


def test_the_api_is_large_enough_to_mean_something():
    assert len(API) > 150, len(API)


@pytest.mark.parametrize("name", sorted(API))
def test_own_docstring(name):
    "No public callable shows an inherited text such as nn.Module's 'Should be overridden…'."
    obj = API[name]
    if generated(obj): pytest.skip("written by @dataclass or NamedTuple")
    if obj.__name__ == "__init__" and list(inspect.signature(obj).parameters) == ["self"]:
        pytest.skip("nothing to describe: Python's own text is right")
    assert obj.__doc__ and obj.__doc__.strip(), f"{name} has no docstring of its own"


@pytest.mark.parametrize("name", sorted(API))
def test_help_lists_every_parameter(name):
    "pydoc's text (what help() prints) has an entry `name : type` or `name` for each parameter."
    obj = API[name]
    documented(name, obj)
    text = pydoc.render_doc(obj, renderer=pydoc.plaintext)
    entries = {m.group(1) for m in re.finditer(r"^[ |]*(\w+)(?: : .*)?$", text, re.M)}
    missing = [p for p in parameters(obj, name) if p not in entries]
    assert not missing, f"help({name}) does not list {missing}"


@pytest.mark.parametrize("name", sorted(API))
def test_docments_read_every_parameter_and_the_return(name):
    from fastcore.docments import docments, parse_docstring
    obj = API[name]
    documented(name, obj, ret=True)
    if is_record(obj) and not hasattr(obj, "__dataclass_fields__"):
        # fastcore reads a NamedTuple's constructor, which is tuple's: its docstring, then
        docs = {k: " ".join(p.desc) for k, p in parse_docstring(obj)["Parameters"].items()}
        missing = [p for p in parameters(obj, name) if not docs.get(p)]
        assert not missing, f"{name}: no text for the fields {missing}"
        return
    dm = docments(obj, full=True)
    missing = [p for p in parameters(obj, name) if not (dm.get(p) or {}).get("docment")]
    assert not missing, f"docments({name}) has no text for {missing}"
    if returns(obj) and not says_all(obj):
        assert dm["return"]["docment"], f"docments({name}) has no text for the return value"


@pytest.mark.parametrize("name", sorted(n for n, o in API.items() if not is_record(o)
                                        or hasattr(o, "__dataclass_fields__")))
def test_show_doc_renders_every_parameter(name):
    "nbdev's card shows each parameter's text as a comment beside it in the signature."
    from fastcore.docments import docments
    from nbdev.showdoc import show_doc
    obj = API[name]
    documented(name, obj)
    md = show_doc(obj)._repr_markdown_()
    dm = docments(obj, full=True)
    for p in parameters(obj, name):
        text = (dm.get(p) or {}).get("docment") or ""
        assert text and f"# {text.splitlines()[0]}" in md, f"show_doc({name}): {p}\n{md}"


@pytest.mark.parametrize("name", sorted(n for n, o in API.items() if inspect.isfunction(o)
                                        and not n.endswith("__init__")
                                        and not n.startswith("transformer_nb.book.")))
def test_return_annotation(name):
    "The model's public API (the book's own tools, transformer_nb.book, aside)"
    assert inspect.signature(API[name]).return_annotation is not inspect.Signature.empty, \
        f"{name} has no return annotation"


def test_help_of_the_model_shows_parameters_and_shapes():
    from transformer_nb.transformer import Transformer
    text = pydoc.render_doc(Transformer, renderer=pydoc.plaintext)
    for piece in ("Parameters", "d_model : int", "num_heads : int", "(B, S) source token ids",
                  "Returns", "(B, T, V)"):
        assert piece in text, piece
    assert "Should be overridden by all subclasses" not in text


def test_the_checks_can_fail(tmp_path, monkeypatch):
    "A function with an undocumented parameter fails each of the three checks above."
    (tmp_path / "tnb_probe.py").write_text(
        'def f(a:int, b:int)->int:\n    """Sum\n\n    Parameters\n    ----------\n'
        '    a : int\n        the first\n    """\n    return a + b\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    f = importlib.import_module("tnb_probe").f
    from fastcore.docments import docments
    text = pydoc.render_doc(f, renderer=pydoc.plaintext)
    assert re.search(r"^\s*a : int$", text, re.M) and not re.search(r"^\s*b( : .*)?$", text, re.M)
    dm = docments(f, full=True)
    assert dm["a"]["docment"] == "the first" and not dm["b"]["docment"]
    assert not dm["return"]["docment"]


def test_no_docments_comment_is_left_in_a_signature():
    """The parameters are documented once, in the docstring: no exported signature of the
    package carries a comment that fastcore would read as a second copy."""
    import ast
    import io
    import tokenize
    found = []
    for path in sorted((ROOT / "transformer_nb").rglob("*.py")):
        src = path.read_text()
        comments = {t.start[0] for t in tokenize.generate_tokens(io.StringIO(src).readline)
                    if t.type == tokenize.COMMENT}
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
                header = range(node.lineno, node.body[0].lineno)
                if any(k in comments for k in header) and ast.get_docstring(node):
                    found.append(f"{path.name}:{node.lineno} {node.name}")
    assert not found, found


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
        _ = transformer_nb.nope


def test_version_matches_settings():
    settings = (ROOT / "settings.ini").read_text()
    assert f"version = {transformer_nb.__version__}" in settings


def test_init_comes_from_the_api_notebook():
    cells = json.loads((ROOT / "nbs" / "99_api.ipynb").read_text())["cells"]
    assert any("".join(c["source"]).strip() == "#| default_exp __init__" for c in cells)


def numpydoc_sections(doc: str) -> dict[str, list[str]]:
    "A numpydoc docstring's sections by title (Parameters, Returns), each a list of lines"
    out, name, lines = {}, None, doc.splitlines()
    for i, line in enumerate(lines):
        if i + 1 < len(lines) and line.strip() and re.fullmatch(r"\s*-{3,}", lines[i + 1]):
            name = line.strip(); out[name] = []
        elif name and not re.fullmatch(r"\s*-{3,}", line): out[name].append(line)
    return out


def entries(lines: list[str]) -> dict[str, str]:
    "A section's entries: the text under each `name : type` line, joined"
    lines = [l for l in lines if l.strip()]
    base = min((len(l) - len(l.lstrip()) for l in lines), default=0)
    out, cur = {}, None
    for l in lines:
        if len(l) - len(l.lstrip()) == base: cur = l.strip(); out[cur] = ""
        else: out[cur] = f"{out[cur]} {l.strip()}".strip()
    return out


def restates(annotation: str, text: str) -> bool:
    "Does `text` only name the annotation's type again ('Figure': 'the figure')?"
    words = lambda s: set(re.findall(r"[a-z]+", s.lower()))
    return words(text) <= words(annotation) | {"the", "a", "an", "matplotlib"}


@pytest.mark.parametrize("name", sorted(API))
def test_each_description_says_something_of_its_own(name):
    """Issue 39: no two parameters of one docstring share a copied description, and a
    Returns section says more than the annotation beside it."""
    doc = inspect.getdoc(API[name]) or ""
    sections = numpydoc_sections(doc)
    params = entries(sections.get("Parameters", []))
    texts = [t for t in params.values() if t]
    shared = {t for t in texts if texts.count(t) > 1}
    assert not shared, f"{name}: parameters with one copied description: {shared}"
    for ann, text in entries(sections.get("Returns", [])).items():
        assert text and not restates(ann, text), f"{name}: Returns {ann!r} says {text!r}"


def test_private_helpers_have_one_line():
    """A private function, class or method (a name starting with one underscore, or any
    method of such a class) is described in one sentence, without numpydoc sections; one
    that becomes a public method (`Transformer.from_config = classmethod(_from_config)`)
    is public."""
    import ast
    long = []
    for path in sorted((ROOT / "transformer_nb").rglob("*.py")):
        if path.name == "_modidx.py": continue
        text = path.read_text()
        tree = ast.parse(text)
        published = set(re.findall(r"\.[a-z]\w* = (?:classmethod\()?(_\w+)\)?$", text, re.M))
        def visit(node, private_owner=False):
            for child in ast.iter_child_nodes(node):
                if not isinstance(child, (ast.FunctionDef, ast.ClassDef)): continue
                own = (child.name.startswith("_") and not child.name.startswith("__")
                       and child.name not in published)
                doc = ast.get_docstring(child) or ""
                if (own or private_owner) and "\n" in doc.strip():
                    long.append(f"{path.name}: {child.name}")
                visit(child, private_owner or (own and isinstance(child, ast.ClassDef)))
        visit(tree)
    assert not long, long


def test_the_description_checks_can_fail():
    doc = """Sum

    Parameters
    ----------
    a : int
        a number
    b : int
        a number

    Returns
    -------
    Figure
        the figure
    """
    sections = numpydoc_sections(inspect.cleandoc(doc))
    assert list(entries(sections["Parameters"]).values()) == ["a number", "a number"]
    assert restates("Figure", "the figure") and not restates("int", "the exit status")


def test_every_activation_parameter_names_every_activation():
    """A public signature that takes `activation` documents every name it accepts (before: the encoder, decoder,
    Transformer, TransformerConfig and GPT listed only "relu" and "gelu"), and the GPT's Returns says what
    need_weights adds"""
    from fastcore.docments import docments, parse_docstring

    from transformer_nb.ffn import _ACTIVATIONS
    takes = {n: o for n, o in API.items()                       # check_activation's lists them in its summary
             if "activation" in parameters(o, n) and not n.rsplit(".", 1)[1].startswith("check_")}
    assert {"transformer_nb.gpt.GPT", "transformer_nb.transformer.Transformer"} <= takes.keys()
    assert "transformer_nb.transformer.TransformerConfig" in takes
    for name, obj in takes.items():
        if generated(obj): continue                                 # a dataclass's __init__: its class says
        text = (" ".join(parse_docstring(obj)["Parameters"]["activation"].desc) if is_record(obj)
                else docments(obj, full=True)["activation"]["docment"])
        assert all(f'"{a}"' in text for a in _ACTIVATIONS), (name, text)
    from transformer_nb.gpt import GPT
    assert "need_weights" in docments(GPT.forward, full=True)["return"]["docment"]
