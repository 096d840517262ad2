"""Every hint of an exercise names code that exists. The hints (`EFFORT` in transformer_nb.book.exercises, written on
the checkers' page) are prose with code in it: spans in backticks (`with ablate_heads(model, [(kind, layer, head)]):`)
and bare keyword arguments ("run the model with need_weights=True"). A span must compile, and each call in it whose
callable the book or torch names must accept every keyword it passes; a bare `name=value` must be a parameter that
some function of the book, of torch or of Python's builtins takes. A hint that tells learners to pass an argument
nothing takes (once `return_attention=True`: a TypeError) fails here."""
import ast
import builtins
import importlib
import inspect
import pkgutil
import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import transformer_nb
from transformer_nb.book.exercises import EFFORT

SPAN = re.compile(r"`([^`]+)`")
KEYWORD = re.compile(r"(?<![\w.=!<>])([A-Za-z_]\w*)=(?!=)")


def book_modules():
    "Every module of the package but the book's own machinery"
    names = [m.name for m in pkgutil.iter_modules(transformer_nb.__path__, "transformer_nb.")
             if not m.name.split(".")[-1].startswith("_") and m.name != "transformer_nb.cli"]
    return [importlib.import_module(n) for n in names]


def callables():
    "Everything a hint may call: the book's public names, torch, torch.nn, F and Python's builtins"
    out = {}
    for mod in book_modules():
        for name in getattr(mod, "__all__", []):
            obj = getattr(mod, name)
            if callable(obj): out[name] = obj
    for ns in (torch, nn, F, builtins):
        for name in dir(ns):
            if not name.startswith("_") and callable(getattr(ns, name, None)):
                out.setdefault(name, getattr(ns, name))
    return out


def parameters(obj) -> set[str] | None:
    "The keyword names obj takes (a class: its __init__ and forward); None where it takes any or cannot say"
    targets = [obj]
    if inspect.isclass(obj): targets = [obj.__init__, getattr(obj, "forward", None)]
    names = set()
    for t in targets:
        if t is None: continue
        try: sig = inspect.signature(t)
        except (TypeError, ValueError):          # torch's C functions: their docstring's signature
            doc = getattr(t, "__doc__", "") or ""
            found = re.findall(r"\b([A-Za-z_]\w*)=", doc) + re.findall(r"\b([A-Za-z_]\w*) \(", doc)
            if not found: return None
            names |= set(found); continue
        if any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()): return None
        names |= set(sig.parameters)
    return names


KNOWN = callables()
ALL_PARAMETERS = set().union(*(p for p in map(parameters, KNOWN.values()) if p))
# the keyword names of Python's sorting, whose signatures say `*args`, and the names torch still takes under an
# older spelling (torch.var: "Previously this argument was called ``unbiased``")
ALL_PARAMETERS |= {n for f in (max, min, sorted) for n in re.findall(r"\b([A-Za-z_]\w*)=", f.__doc__ or "")}
ALL_PARAMETERS |= {n for f in KNOWN.values() if not inspect.isclass(f)
                   for n in re.findall(r"argument was called ``(\w+)``", getattr(f, "__doc__", None) or "")}


def spans(hint: str) -> list[str]:
    "The code spans of a hint that read as Python (an expression, a statement, a `with` header)"
    out = []
    for s in SPAN.findall(hint):
        src = s + " pass" if s.rstrip().endswith(":") else s
        try: ast.parse(src)
        except SyntaxError: continue               # a name with prose around it, e.g. `x (B, T)`
        out.append(src)
    return out


def bad_calls(src: str) -> list[str]:
    "Keywords passed to a callable the book or torch names that its signature does not take"
    bad = []
    for node in ast.walk(ast.parse(src)):
        if not isinstance(node, ast.Call): continue
        f = node.func
        name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
        params = parameters(KNOWN[name]) if name in KNOWN else None
        if params is None: continue
        bad += [f"{name}({k.arg}=...)" for k in node.keywords if k.arg and k.arg not in params]
    return bad


def test_the_checker_can_fail():
    "The checks find what they are for: a keyword nothing takes, and one the called function does not take."
    assert "return_attention" not in ALL_PARAMETERS and "need_weights" in ALL_PARAMETERS
    assert bad_calls("ablate_heads(model, heads, strict=True)") == ["ablate_heads(strict=...)"]
    assert bad_calls("ablate_heads(model, [(kind, layer, head)])") == []
    assert KEYWORD.findall("Run the model with return_attention=True; x == y, a<=b") == ["return_attention"]


@pytest.mark.parametrize("checker", sorted(EFFORT))
def test_hint_code_exists(checker):
    hint = EFFORT[checker][2]
    prose = SPAN.sub(" ", hint)
    unknown = [k for k in KEYWORD.findall(prose) if k not in ALL_PARAMETERS]
    assert not unknown, f"{checker}'s hint passes {unknown}, which no function of the book or torch takes"
    for src in spans(hint):
        unknown = [k for k in KEYWORD.findall(src) if k not in ALL_PARAMETERS]
        assert not unknown, f"{checker}'s hint: `{src}` passes {unknown}, which nothing takes"
        assert not bad_calls(src), f"{checker}'s hint: `{src}` calls {bad_calls(src)}"
