"""Docstrings for `help()`, generated from the docments when nbdev exports the notebooks.

The notebooks keep the house style: a one-line docstring and a docments comment beside (or
above) each parameter, which nbdev renders as a table on the site. `help()` and editors show
only `__doc__`, so at export time each public function, class and method gets a numpydoc
docstring built from those comments:

    Summary line, as written in the notebook.

    Parameters
    ----------
    d_model : int
        width of the inputs and the output

    Returns
    -------
    Tensor
        (B, T, V) logits

The site is unchanged: nbdev shows a docstring's summary and extended text only, and its
table comes from the same comments. `tools/venv.sh` installs this file beside the nbdev guard,
which runs `add_docstrings` on every exported cell (so `nbdev_export` and `make export` write
the same modules). Only the source that goes into `transformer_nb/` changes, never a notebook.
"""
import ast
import io
import re
import textwrap
import tokenize

WIDTH = 88
_COMMENT = re.compile(r"^\s*#(.*)$")


def _comments(src: str) -> dict[int, str]:
    "Line number -> the text of the comment on it (fastcore.docments reads the same)."
    out = {}
    try:
        for t in tokenize.generate_tokens(io.StringIO(src).readline):
            if t.type == tokenize.COMMENT and not t.string.startswith("#|"):
                m = _COMMENT.match(t.string)
                if m: out[t.start[0]] = m.group(1).strip()
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return {}
    return out


def _comment_for(line: int, comments: dict[int, str], params: dict[int, str]) -> str | None:
    "As fastcore.docments: the comment on the line, else the comment lines right above it."
    if line in comments: return comments[line]
    res, line = [], line - 1
    while line and line in comments and line not in params:
        res.append(comments[line]); line -= 1
    return " ".join(reversed(res)) if res else None


def _param_docs(fn: ast.FunctionDef, comments: dict[int, str], method: bool = False):
    "[(name, annotation, comment)] of `fn`'s documented parameters and the return's (anno, comment)."
    a = fn.args
    star = [x for x in (a.vararg, a.kwarg) if x is not None]
    args = (a.args[1:] if method and a.args else a.args) + a.kwonlyargs + star
    locs = {x.lineno: x.arg for x in a.args + a.kwonlyargs}
    locs.update({x.lineno: x.arg for x in star if x.lineno not in locs})  # as fastcore reads
    if fn.returns is not None: locs[fn.returns.lineno] = "return"
    out = []
    for x in args:
        doc = _comment_for(x.lineno, comments, locs) if locs.get(x.lineno) == x.arg else None
        anno = ast.unparse(x.annotation) if x.annotation is not None else ""
        stars = "*" if x is a.vararg else "**" if x is a.kwarg else ""
        if doc: out.append((stars + x.arg, anno, doc))
    ret = None
    if fn.returns is not None and locs.get(fn.returns.lineno) == "return":
        doc = _comment_for(fn.returns.lineno, comments, locs)
        if doc: ret = (ast.unparse(fn.returns), doc)
    return out, ret


def _field_docs(cls: ast.ClassDef, comments: dict[int, str]):
    "[(name, annotation, comment)] of the annotated fields of a NamedTuple or dataclass."
    fields = [s for s in cls.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)]
    locs = {s.lineno: s.target.id for s in fields}
    out = []
    for s in fields:
        doc = _comment_for(s.lineno, comments, locs)
        if doc: out.append((s.target.id, ast.unparse(s.annotation), doc))
    return out


def _wrap(text: str, indent: str) -> list[str]:
    return textwrap.wrap(text, WIDTH - len(indent), initial_indent=indent,
                         subsequent_indent=indent, break_long_words=False,
                         break_on_hyphens=False) or [indent]


def _section(title: str, rows, indent: str) -> list[str]:
    out = ["", indent + title, indent + "-" * len(title)]
    for name, anno, doc in rows:
        out.append(indent + (f"{name} : {anno}" if name and anno else name or anno))
        out += _wrap(doc, indent + "    ")
    return out


def _docstring(summary: str, params, ret, indent: str) -> list[str]:
    "The lines of a numpydoc docstring literal at `indent`."
    body = [indent + l if l else "" for l in summary.split("\n")]
    if params: body += _section("Parameters", params, indent)
    if ret: body += _section("Returns", [("", ret[0], ret[1])], indent)
    text = "\n".join(body).replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
    if text.endswith('"'): text = text[:-1] + '\\"'
    lines = text.split("\n")
    lines[0] = indent + '"""' + lines[0][len(indent):]
    if len(lines) == 1: return [lines[0] + '"""']
    return lines + [indent + '"""']


def _edit(lines: list[str], node, summary: str, params, ret, force=False) -> list[str] | None:
    "Put the docstring into `node` (a def or class) of `lines`; None where its layout forbids it."
    if not (params or ret or force) or not summary and not params and not ret: return None
    first = node.body[0]
    has_doc = ast.get_docstring(node, clean=False) is not None
    if lines[first.lineno - 1][:first.col_offset].strip() and not has_doc:
        return None  # the body starts on the header's line
    if has_doc:
        a, b = first.lineno - 1, first.end_lineno - 1
        if lines[a][:first.col_offset].strip() or lines[b][first.end_col_offset:].strip():
            return None  # shares its lines with other code
    indent = " " * first.col_offset
    new = _docstring(summary, params, ret, indent)
    if has_doc: return lines[:first.lineno - 1] + new + lines[first.end_lineno:]
    return lines[:first.lineno - 1] + new + lines[first.lineno - 1:]


def _public(name: str) -> bool: return not name.startswith("_") or name == "__init__"


def add_docstrings(src: str) -> str:
    "The cell's code with numpydoc docstrings made from its docments (unchanged if it has none)."
    try: tree = ast.parse(src)
    except SyntaxError: return src
    comments = _comments(src)
    edits = []  # (node, summary, params, ret, force), applied from the bottom up
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and _public(node.name):
            params, ret = _param_docs(node, comments)
            edits.append((node, ast.get_docstring(node) or "", params, ret, False))
        elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            summary = ast.get_docstring(node) or ""
            init = next((s for s in node.body if isinstance(s, ast.FunctionDef)
                         and s.name == "__init__"), None)
            params = _param_docs(init, comments, True)[0] if init \
                else _field_docs(node, comments)
            edits.append((node, summary, params, None, False))
            for m in node.body:
                if not (isinstance(m, ast.FunctionDef) and _public(m.name)): continue
                static = any(isinstance(d, ast.Name) and d.id == "staticmethod"
                             for d in m.decorator_list)
                p, r = _param_docs(m, comments, not static)
                doc = ast.get_docstring(m)
                if m.name == "__init__" and not doc:
                    edits.append((m, f"Build a `{node.name}`: `help({node.name})` describes "
                                  "the parameters.", [], None, True))
                    continue
                elif m.name == "forward" and not doc:  # what the module does is what it does
                    edits.append((m, summary.split("\n")[0], p, r, bool(summary)))
                    continue
                edits.append((m, doc or "", p, r, False))
    lines = src.split("\n")
    for node, summary, params, ret, force in sorted(edits, key=lambda e: -e[0].lineno):
        new = _edit(lines, node, summary, params, ret, force)
        if new is not None: lines = new
    out = "\n".join(lines)
    try: ast.parse(out)
    except SyntaxError: return src  # never export broken code
    return out


def export_proc(cell) -> None:
    "An nbdev processor: give the exported cells' public API its docstrings."
    if cell.cell_type != "code" or not getattr(cell, "directives_", None): return
    if not {"export", "exports", "exporti"} & set(cell.directives_): return
    cell.source = add_docstrings(cell.source)
