"""One-off migration: move the documentation of every exported definition into its cell.

Until now the cells documented parameters with docments comments (`x:Tensor,  # (B, T, d)`)
and a `.pth` hook (tools/nbdev_docstrings.py) wrote numpydoc docstrings into the modules at
export time, so the modules were not their cells. This script writes, into each exported
cell (`#| export`, `#| exports`, `#| exporti`), the numpydoc docstring that nbdev's
`show_doc`, fastcore's `docments` and Python's `help()` all read, and removes the docments
comments it has turned into docstring text (they would be a second copy):

    def split_heads(x:Tensor, num_heads:int)->Tensor:
        \"\"\"Cut the last dimension into `num_heads` slices of width d_k ...

        Parameters
        ----------
        x : Tensor
            (B, T, d_model), e.g. the queries of all heads side by side
        num_heads : int
            H, the number of heads; must divide d_model

        Returns
        -------
        Tensor
            (B, H, T, d_k) with d_k = d_model // H
        \"\"\"

What goes where:
- functions and methods, public or private: their docstring keeps its summary (wrapped at
  88 columns) and gains `Parameters` and `Returns` from the comments, read as fastcore reads
  them (the comment on a parameter's line, else the comment lines right above it) with the
  old generator's slips fixed: a comment on a line that holds several parameters documents
  each of them; `*args` and `**kwargs` are documented under their own comments, and listed
  as `args`/`kwargs`, the names fastcore's docments looks up;
- a class's constructor parameters go into `__init__`'s docstring, because that is where
  `docments(cls)` and `show_doc(cls)` read them (a class docstring's `Parameters` are not
  read by fastcore 1.14.5); the class docstring keeps its summary. `__init__` and
  `forward` without a docstring of their own get the sections only, no summary that would
  repeat the class's;
- a NamedTuple's or dataclass's field comments become the class docstring's `Parameters`.

Only comments that document something go; every other comment stays where it is. A
signature left without comments is joined onto one line where that fits in 88 columns, else
its parameters onto one line between the opening and closing lines where they fit. For
every cell the script checks that the code's syntax tree is unchanged apart from docstrings,
that every other comment is still there, and that no line it writes is over 88 columns; a
cell that fails a check is left as it was and reported. Running it again changes nothing.

Usage (from the repository root, in the project's environment):

    .venv/bin/python tools/migrate_docstrings.py            # every notebook in nbs/
    .venv/bin/python tools/migrate_docstrings.py --check    # say what would change, write nothing
    .venv/bin/python tools/migrate_docstrings.py nbs/03_multihead.ipynb

It then runs `nbdev_export` (stock) and stores again the outputs of the cells that show the
package's source with `show_source` (chapter "Fast path"), which now include the docstrings;
`--no-export` skips both. Exit status 1 where a cell was left unchanged by a failed check, a
comment is left in a signature or a public definition has an undocumented parameter.
"""
from __future__ import annotations

import argparse
import ast
import io
import json
import re
import sys
import textwrap
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

WIDTH = 88
EXPORT = re.compile(r"^\s*#\s*\|\s*export[si]?(\s|$)", re.M)
SECTIONS = ("Parameters", "Returns")
DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)


# ---------------------------------------------------------------- reading the code

@dataclass
class Comment:
    line: int       # 1-based
    col: int
    text: str       # without the '#' and surrounding blanks
    full: bool      # alone on its line


def comments_of(src: str) -> dict[int, Comment]:
    "The comments of `src` by line (nbdev's `#|` directives left out)."
    out, lines = {}, src.split("\n")
    for t in tokenize.generate_tokens(io.StringIO(src).readline):
        if t.type == tokenize.COMMENT and not re.match(r"#\s*\|", t.string):
            (row, col) = t.start
            full = not lines[row - 1][:col].strip()
            out[row] = Comment(row, col, t.string[1:].strip(), full)
    return out


def header_end(src_tokens: list, node) -> int:
    "The line of the colon that ends the header of the def or class `node`."
    kw = "class" if isinstance(node, ast.ClassDef) else "def"
    depth, seen = 0, False
    for t in src_tokens:
        if t.start < (node.lineno, 0): continue
        if not seen:
            seen = t.type == tokenize.NAME and t.string == kw
            continue
        if t.type == tokenize.OP:
            if t.string in "([{": depth += 1
            elif t.string in ")]}": depth -= 1
            elif t.string == ":" and depth == 0: return t.start[0]
    raise ValueError(f"no end of the header of {node.name}")


@dataclass
class Entry:
    name: str       # as listed: `x`, `args`, `kwargs`, or `return`
    anno: str       # the annotation as written ("" without one)
    line: int       # where it starts
    doc: str | None = None
    last: int = 0   # where its default value ends, if on a later line


def entries_of(fn, method: bool) -> tuple[list[Entry], Entry | None]:
    "The parameters of `fn` (without self/cls of a method) and its return annotation."
    a = fn.args
    pos = a.posonlyargs + a.args
    if method and pos and not any(isinstance(d, ast.Name) and d.id == "staticmethod"
                                  for d in fn.decorator_list):
        pos = pos[1:]
    params = pos + ([a.vararg] if a.vararg else []) + a.kwonlyargs \
        + ([a.kwarg] if a.kwarg else [])
    def un(x):   # an annotation as written; a string one without its quotes
        if x is None: return ""
        return x.value if isinstance(x, ast.Constant) and isinstance(x.value, str) \
            else ast.unparse(x)
    defaults = dict(zip([id(p) for p in pos[len(pos) - len(a.defaults):]], a.defaults)) \
        if a.defaults else {}
    defaults.update({id(p): d for p, d in zip(a.kwonlyargs, a.kw_defaults) if d})
    out = [Entry(p.arg, un(p.annotation), p.lineno,
                 last=max(p.end_lineno, getattr(defaults.get(id(p)), "end_lineno", 0)))
           for p in params]
    ret = Entry("return", un(fn.returns), fn.returns.lineno) if fn.returns else None
    return out, ret


def field_entries(cls: ast.ClassDef) -> list[Entry]:
    "The annotated fields of a NamedTuple or dataclass."
    return [Entry(s.target.id, ast.unparse(s.annotation), s.lineno) for s in cls.body
            if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)]


def is_record(cls: ast.ClassDef) -> bool:
    "A NamedTuple or a dataclass: its fields are its parameters."
    names = [ast.unparse(b) for b in cls.bases] + [
        ast.unparse(d.func if isinstance(d, ast.Call) else d) for d in cls.decorator_list]
    return any(n.split(".")[-1] in ("NamedTuple", "dataclass") for n in names)


def attribute(entries: list[Entry], comments: dict[int, Comment], lo: int, hi: int,
              ) -> set[int]:
    """Give each entry its docment, as fastcore reads them: the comment on its line (or on
    a line its default value continues onto), the full-line comments right above it
    (between lines lo and hi), or both joined. Every entry on a commented line gets the
    comment; where the return annotation shares a line with parameters, the return gets it
    (as fastcore reads it). Returns the comment lines used."""
    by_line: dict[int, list[Entry]] = {}
    for e in entries: by_line.setdefault(e.line, []).append(e)
    used = set()
    for line, es in by_line.items():
        # the comment on its line, else on a line its default value continues onto
        span = [line] + [k for k in range(line + 1, max(e.last for e in es) + 1)
                         if k not in by_line]
        own = next((k for k in span if k in comments and not comments[k].full), None)
        above, k = [], line - 1
        while k >= lo and k in comments and comments[k].full and k not in by_line:
            above.append(k); k -= 1
        # comment lines above and a comment beside: one text, the lines above first
        texts = [comments[k].text for k in reversed(above)]
        if own is not None: texts.append(comments[own].text)
        if not texts: continue
        rets = [e for e in es if e.name == "return"]
        for e in (rets if own == line and rets else es): e.doc = " ".join(texts)
        used.update(above + ([own] if own is not None else []))
    return {u for u in used if lo <= u <= hi}


# ---------------------------------------------------------------- numpydoc text

def parse_doc(doc: str) -> tuple[str, dict[str, list], list[str]]:
    """(head, sections, rest) of a cleaned docstring: the text before the first
    section, {'Parameters': [(name, anno, text)], 'Returns': [...]}, and the lines of any
    other section (kept as they are)."""
    lines = doc.split("\n")
    starts = [i for i in range(len(lines) - 1) if lines[i].strip() and
              re.fullmatch(r"-{3,}", lines[i + 1].strip()) and
              len(lines[i + 1].strip()) == len(lines[i].strip())]
    if not starts: return doc.strip("\n"), {}, []
    head = "\n".join(lines[:starts[0]]).strip("\n")
    sections, rest = {}, []
    for j, s in enumerate(starts):
        title = lines[s].strip()
        body = lines[s + 2:starts[j + 1] if j + 1 < len(starts) else len(lines)]
        if title not in SECTIONS:
            rest += [lines[s], lines[s + 1]] + body
            continue
        items = []
        for ln in body:
            if not ln.strip(): continue
            if not ln.startswith(" "):
                name, _, anno = ln.partition(" : ")
                if title == "Returns" and not _: name, anno = "", ln.strip()
                items.append([name.strip(), anno.strip(), ""])
            elif items:
                items[-1][2] = (items[-1][2] + " " + ln.strip()).strip()
        sections[title] = [tuple(i) for i in items]
    while rest and not rest[-1].strip(): rest.pop()
    return head, sections, rest


def wrap(text: str, indent: str, first: int = 0) -> list[str]:
    "`text` wrapped at WIDTH columns after `indent` (the first line `first` columns shorter)."
    lines = textwrap.wrap(text, WIDTH - len(indent), break_long_words=False,
                          break_on_hyphens=False, initial_indent=" " * first)
    if lines: lines[0] = lines[0][first:]
    return [indent + ln for ln in lines] or [indent]


def render(head: str, params: list[Entry], ret: Entry | None, rest: list[str],
           indent: str, raw: bool) -> list[str]:
    "The source lines of the docstring literal."
    body: list[str] = []
    if head:
        paras = head.split("\n")
        if len(paras) == 1 and len(indent) + 3 + len(head) + 3 > WIDTH:
            body += wrap(head, indent, first=3)      # a long one-line summary
        else:
            body += [indent + ln if ln.strip() else "" for ln in paras]
    if params:
        body += ([""] if body else []) + [indent + "Parameters", indent + "-" * 10]
        for e in params:
            body.append(indent + (f"{e.name} : {e.anno}" if e.anno else e.name))
            body += wrap(e.doc, indent + "    ")
    if ret:
        body += ([""] if body else []) + [indent + "Returns", indent + "-" * 7]
        body.append(indent + (ret.anno or "object"))
        body += wrap(ret.doc, indent + "    ")
    if rest:
        body += [""] + [indent + ln if ln.strip() else "" for ln in rest]
    text = "\n".join(body)
    if not raw: text = text.replace("\\", "\\\\")
    text = text.replace('"""', '\\"\\"\\"')
    lines = text.split("\n")
    if len(lines) == 1 and text.endswith('"'): lines[0] = text[:-1] + '\\"'  # before """
    q = ('r"""' if raw else '"""')
    if not head: lines.insert(0, indent)      # no summary: the sections start below
    lines[0] = indent + q + lines[0][len(indent):]
    if len(lines) == 1: return [lines[0] + '"""']
    return lines + [indent + '"""']


# ---------------------------------------------------------------- one cell

@dataclass
class Result:
    src: str
    changed: list[str] = field(default_factory=list)     # names of the defs rewritten
    undocumented: list[str] = field(default_factory=list)
    shared: list[str] = field(default_factory=list)       # one text for several parameters
    kept: list[str] = field(default_factory=list)         # comments left in a signature
    problems: list[str] = field(default_factory=list)


def _strip_docstrings(tree):
    for n in ast.walk(tree):
        if isinstance(n, (*DEFS, ast.ClassDef, ast.Module)) and n.body and \
                isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant) \
                and isinstance(n.body[0].value.value, str):
            n.body = n.body[1:]
    return ast.dump(tree)


def _join_header(lines: list[str]) -> str | None:
    "A header of several lines, without comments, on one line (None where it does not fit)."
    out = lines[0].rstrip()
    for ln in lines[1:]:
        piece = ln.strip()
        if not piece: continue
        if piece[0] in ")]}":
            out = out.rstrip().rstrip(",") if out.rstrip().endswith(",") and \
                out.rstrip()[-2:-1] != "(" else out.rstrip()
        elif not out.endswith(("(", "[", "{")):
            out += " "
        out += piece
    return out if len(out) <= WIDTH else None


def _hug_header(lines: list[str]) -> list[str] | None:
    """A header of one parameter per line as three: the opening line, the parameters on one
    line, the closing line (None where they do not fit on one line or the layout differs)."""
    lines = [ln for ln in lines if ln.strip()]
    if len(lines) < 4 or not lines[-1].lstrip().startswith(")"): return None
    indent = lines[1][:len(lines[1]) - len(lines[1].lstrip())]
    middle = indent + " ".join(ln.strip() for ln in lines[1:-1])
    if len(middle) > WIDTH or any(ln.lstrip().startswith(")") for ln in lines[1:-1]):
        return None
    return [lines[0], middle, lines[-1]]


def migrate_code(src: str, where: str = "") -> Result:
    "The cell's code with its documentation in numpydoc docstrings (see the module's text)."
    res = Result(src)
    try:
        tree = ast.parse(src)
        toks = list(tokenize.generate_tokens(io.StringIO(src).readline))
    except (SyntaxError, tokenize.TokenError):
        return res
    comments = comments_of(src)
    lines = src.split("\n")
    edits: list[tuple[int, int, list[str]]] = []   # 0-based [start, end) -> new lines
    removed: set[int] = set()                      # comment lines used as documentation

    def doc_node(n):
        b = n.body[0]
        if isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant) \
                and isinstance(b.value.value, str):
            return b

    def one(node, entries: list[Entry], ret: Entry | None, summary_default: str = "",
            public: bool = True, name: str = ""):
        end = header_end(toks, node)
        used = attribute(entries + ([ret] if ret else []), comments, node.lineno, end)
        if isinstance(node, ast.ClassDef):   # fields: their comments, below the header
            used = attribute(entries, comments, end + 1, node.end_lineno)
        if not isinstance(node, ast.ClassDef):
            res.kept += [f"{where}{name}: {comments[k].text!r}"
                         for k in range(node.lineno, end + 1)
                         if k in comments and k not in used]
        dn = doc_node(node)
        old = ast.get_docstring(node) if dn else None
        head, secs, rest = parse_doc(old) if old is not None else (summary_default, {}, [])
        before = {e[0].lstrip("*"): e for e in secs.get("Parameters", [])}
        for e in entries:   # what the docstring says already, where no comment says it
            if e.doc is None and e.name in before: e.doc = before[e.name][2] or None
        if ret and ret.doc is None and secs.get("Returns"):
            ret.doc = secs["Returns"][0][2] or None
        shared: dict[int, list[str]] = {}   # several parameters on one commented line
        for e in entries:
            if e.doc and e.line in used: shared.setdefault(e.line, []).append(e.name)
        res.shared += [f"{where}{name}: {', '.join(v)}" for v in shared.values() if len(v) > 1]
        documented = [e for e in entries if e.doc]
        rdoc = ret if ret and ret.doc else None
        if public:
            res.undocumented += [f"{where}{name}: {e.name}" for e in entries if not e.doc]
            prop = any(ast.unparse(d).endswith("property")
                       for d in getattr(node, "decorator_list", []))
            if ret and not ret.doc and not prop and ret.anno not in ("None", "'None'", '"None"'):
                res.undocumented.append(f"{where}{name}: the return value ({ret.anno})")
        if not documented and not rdoc and not used:
            return
        if node.body[0].lineno <= end:
            res.problems.append(f"{where}{name}: body on the header's line, left as it is")
            return
        indent = " " * node.body[0].col_offset
        raw = bool(dn) and lines[dn.lineno - 1][dn.col_offset:].lstrip("(").lower() \
            .startswith("r")
        new = render(head, documented, rdoc, rest, indent, raw)
        if dn:
            a, b = dn.lineno - 1, dn.end_lineno
            if lines[a][:dn.col_offset].strip() or lines[b - 1][dn.end_col_offset:].strip():
                res.problems.append(f"{where}{name}: docstring shares a line, left as it is")
                return
            if lines[a:b] != new: edits.append((a, b, new))
        else:
            edits.append((end, end, new))
        removed.update(used)
        if isinstance(node, ast.ClassDef):
            for k in used: edits.append((k - 1, k, _uncomment(lines[k - 1], comments[k])))
            if used: res.changed.append(name)
            return
        # the header without the comments it no longer needs, on one line where it fits
        hdr = []
        for k in range(node.lineno, end + 1):
            if k in used:
                if comments[k].full: continue
                hdr.append(lines[k - 1][:comments[k].col].rstrip())
            else:
                hdr.append(lines[k - 1])
        if not used or len(hdr) == 1 or \
                any(k in comments and k not in used for k in range(node.lineno, end + 1)):
            new_hdr = hdr
        else:
            joined = _join_header(hdr)
            new_hdr = [joined] if joined is not None else _hug_header(hdr) or hdr
        if new_hdr != lines[node.lineno - 1:end]:
            edits.append((node.lineno - 1, end, new_hdr))
        if new_hdr != lines[node.lineno - 1:end] or (dn is None or lines[a:b] != new):
            res.changed.append(name)

    for node in tree.body:
        if isinstance(node, DEFS):
            es, r = entries_of(node, method=False)
            one(node, es, r, public=not node.name.startswith("_"), name=node.name)
        elif isinstance(node, ast.ClassDef):
            pub = not node.name.startswith("_")
            if is_record(node):
                one(node, field_entries(node), None, public=pub, name=node.name)
            for m in node.body:
                if not isinstance(m, DEFS): continue
                es, r = entries_of(m, method=True)
                mpub = pub and (not m.name.startswith("_") or m.name == "__init__")
                one(m, es, r, public=mpub, name=f"{node.name}.{m.name}")

    if not edits: return res
    out = lines[:]
    for a, b, new in sorted(edits, key=lambda e: -e[0]):
        out[a:b] = new
    new_src = "\n".join(out)
    # the checks: same code apart from docstrings, every other comment kept, lines fit
    try:
        same = _strip_docstrings(ast.parse(new_src)) == _strip_docstrings(ast.parse(src))
    except SyntaxError:
        same = False
    kept = sorted(c.text for k, c in comments.items() if k not in removed)
    now = sorted(c.text for c in comments_of(new_src).values()) if same else []
    long = [ln for ln in new_src.split("\n") if len(ln) > WIDTH and ln not in lines]
    if not same: res.problems.append(f"{where}: the code would change; cell left as it is")
    elif kept != now: res.problems.append(f"{where}: a comment would be lost; left as it is")
    elif long: res.problems.append(f"{where}: a line over {WIDTH} columns: {long[0]!r}")
    else: res.src = new_src
    if res.src == src: res.changed = []
    return res


def _uncomment(line: str, c: Comment) -> list[str]:
    return [] if c.full else [line[:c.col].rstrip()]


# ---------------------------------------------------------------- notebooks

SHARED: list[str] = []   # where one comment documented several parameters

def migrate_notebook(path: Path, write: bool) -> tuple[int, list[str], list[str]]:
    """(cells changed, undocumented public parameters, problems) of one notebook; comments
    left in a signature count as problems (fastcore could read one as a parameter's text)."""
    raw = path.read_text(encoding="utf-8")
    nb = json.loads(raw)
    changed, undoc, problems = 0, [], []
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code": continue
        src = "".join(cell["source"])
        if not EXPORT.search(src): continue
        r = migrate_code(src, where=f"{path.name} cell {cell.get('id', i)}: ")
        undoc += r.undocumented; problems += r.problems
        problems += [f"{k} (a comment left in a signature)" for k in r.kept]
        SHARED.extend(r.shared)
        if r.src != src:
            changed += 1
            cell["source"] = r.src.splitlines(keepends=True)
    if changed and write:
        path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return changed, undoc, problems


SHOW_SOURCE = re.compile(r"^show_source\(\s*(\w+(?:\s*,\s*\w+)*)\s*,?\s*\)\s*$")
RENDER = """
import importlib, json, pkgutil, sys
import transformer_nb
from transformer_nb.book.measure import show_source
ns = {}
for m in pkgutil.walk_packages(transformer_nb.__path__, "transformer_nb."):
    if m.name.rsplit(".", 1)[-1].startswith("_"): continue
    mod = importlib.import_module(m.name)
    ns.update({k: getattr(mod, k) for k in getattr(mod, "__all__", [])})
calls = json.load(sys.stdin)
json.dump([show_source(*[ns[n] for n in names]).data for names in calls], sys.stdout)
"""


def refresh_show_source(paths: list[Path]) -> int:
    """Store again the outputs of the cells `show_source(a, b)` (chapter "Fast path"): they
    print the package's source, which now carries the docstrings. Only those outputs are
    rewritten, so the chapter's stored timings stay as they are. Returns the cells updated."""
    import subprocess
    found = []   # (notebook, cell index, names)
    for p in paths:
        for i, cell in enumerate(json.loads(p.read_text(encoding="utf-8"))["cells"]):
            m = SHOW_SOURCE.match("".join(cell["source"]).strip())
            if cell["cell_type"] == "code" and m and cell.get("outputs"):
                found.append((p, i, [n.strip() for n in m.group(1).split(",")]))
    if not found: return 0
    out = subprocess.run([sys.executable, "-c", RENDER], input=json.dumps(
        [names for _, _, names in found]), capture_output=True, text=True, check=True)
    updated = 0
    for (p, i, _), html in zip(found, json.loads(out.stdout)):
        nb = json.loads(p.read_text(encoding="utf-8"))
        data = next((o["data"] for o in nb["cells"][i]["outputs"]
                     if "text/html" in o.get("data", {})), None)
        new = html.splitlines(keepends=True)
        if data is not None and data["text/html"] != new:
            data["text/html"] = new
            p.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
            updated += 1
    return updated


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("notebooks", nargs="*", type=Path)
    ap.add_argument("--check", action="store_true", help="write nothing, say what would change")
    ap.add_argument("--no-export", action="store_true",
                    help="do not run nbdev_export and refresh the show_source outputs after")
    args = ap.parse_args(argv)
    root = Path(__file__).resolve().parent.parent
    nbs = args.notebooks or sorted((root / "nbs").glob("*.ipynb"))
    total, all_undoc, all_problems = 0, [], []
    for p in nbs:
        n, undoc, problems = migrate_notebook(p, write=not args.check)
        total += n; all_undoc += undoc; all_problems += problems
        if n: print(f"{'would change' if args.check else 'changed'} {n} cells of {p.name}")
    for u in all_undoc: print(f"undocumented: {u}")
    for p in all_problems: print(f"check by hand: {p}")
    for s in SHARED: print(f"one comment, now the text of each of: {s}")
    print(f"{total} cells {'to change' if args.check else 'changed'}; "
          f"{len(all_undoc)} undocumented (public parameters and annotated returns); "
          f"{len(all_problems)} problems")
    if not args.check and not args.no_export:
        import subprocess
        subprocess.run([Path(sys.executable).parent / "nbdev_export"], cwd=root, check=True)
        print("nbdev_export: done")
        n = refresh_show_source(sorted((root / "nbs").glob("*.ipynb")))
        print(f"show_source outputs stored again: {n}")
    return 1 if all_problems or all_undoc else 0


if __name__ == "__main__":
    sys.exit(main())
