"""Bring notebook code lines to at most 88 columns without changing what the code does.

    python tools/wrap_lines.py nbs/*.ipynb        # rewrite in place, list what is left

Only rewrites whose result parses to the same syntax tree as before are kept:
- a trailing comment that pushes a line past the limit moves onto its own line(s) above
  the code, at the code's indentation (nbdev's docments read a comment on the line above a
  parameter as well as one beside it);
- a comment line that is too long is wrapped;
- `a; b` on one line becomes two lines, and `if cond: body` becomes a block;
- `from m import a, b, c` that is too long is wrapped in parentheses.
- a statement with no comment inside that is still too long is laid out by ruff format
  (run on that statement alone, so the rest of the cell keeps its house style);
- a string that is still too long is split into adjacent literals at a space.
Lines it cannot shorten safely (long strings, long expressions) are listed for a person.
"""
import ast
import io
import subprocess
import sys
import textwrap
import tokenize
from pathlib import Path

import nbformat

LIMIT = 88
MAGIC = ("%", "!")


def _tokens(lines):
    src = "\n".join("#" + " " * (len(l) - 1) if l.lstrip().startswith(MAGIC) else l
                    for l in lines) + "\n"
    try: return list(tokenize.generate_tokens(io.StringIO(src).readline)), src
    except (tokenize.TokenError, SyntaxError, IndentationError): return None, src


def _tree(src):
    try: return ast.dump(ast.parse(src))
    except SyntaxError: return None


def _comment_lines(indent, text):
    width = max(LIMIT - len(indent) - 2, 30)
    return [f"{indent}# {t}" for t in textwrap.wrap(text, width, break_long_words=False,
                                                  break_on_hyphens=False)] or [f"{indent}#"]


def _rewrite(line, row, toks):
    "New lines for one long `line` (1-based `row`), or None."
    indent = line[:len(line) - len(line.lstrip())]
    stripped = line.strip()
    if stripped.startswith("#|") or stripped.startswith(MAGIC): return None
    row_toks = [t for t in toks if t.start[0] == row]
    comment = next((t for t in row_toks if t.type == tokenize.COMMENT), None)
    if comment is not None:
        code = line[:comment.start[1]].rstrip()
        text = comment.string.lstrip("#").strip()
        if not code: return _comment_lines(indent, text)
        if text.startswith(("noqa", "type:", "NBVAL", "pragma")): return None
        rest = _rewrite(code, row, [t for t in row_toks if t is not comment]) \
            if len(code) > LIMIT else None
        return _comment_lines(indent, text) + (rest or [code])
    # statements joined by `;` at bracket depth 0, in a line that opens no block
    first = next((t for t in row_toks if t.type == tokenize.NAME), None)
    depth, semis, colon = 0, [], None
    starts_here = row_toks and row_toks[0].start[1] == len(indent)
    for t in row_toks:
        if t.type == tokenize.OP and t.string in "([{": depth += 1
        elif t.type == tokenize.OP and t.string in ")]}": depth -= 1
        elif t.type == tokenize.OP and t.string == ";" and depth == 0: semis.append(t)
        elif (t.type == tokenize.OP and t.string == ":" and depth == 0 and colon is None
              and first is not None and first.string in
              ("if", "elif", "else", "for", "while", "with", "try", "except", "finally", "def")):
            colon = t
    if not starts_here: return None
    if colon is not None:
        head, body = line[:colon.end[1]], line[colon.end[1]:].strip()
        if body: return [head, indent + "    " + body]
        return None
    if semis:
        parts, prev = [], 0
        for s in semis:
            parts.append(line[prev:s.start[1]].strip()); prev = s.end[1]
        parts.append(line[prev:].strip())
        return [indent + p for p in parts if p]
    if first is not None and first.string == "from" and " import " in line and "(" not in line:
        head, names = line.split(" import ", 1)
        body = textwrap.wrap(names.strip(), LIMIT - len(indent) - 4, break_long_words=False)
        return [f"{head} import ("] + [indent + "    " + b for b in body[:-1]] + \
            [indent + "    " + body[-1] + ")"]
    return None


RUFF = str(Path(sys.executable).parent / "ruff")


def _ruff(text, width):
    r = subprocess.run([RUFF, "format", "--isolated", f"--line-length={width}", "--config",
                        "format.quote-style='preserve'", "--stdin-filename=x.py", "-"],
                       input=text, capture_output=True, text=True)
    return r.stdout if r.returncode == 0 else None


def _simple_stmts(tree):
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt) and not hasattr(node, "body"): yield node


def _by_ruff(lines, i, toks, tree):
    "Lay out the simple statement that holds line i (0-based) with ruff, or None."
    row = i + 1
    stmts = [n for n in _simple_stmts(tree) if n.lineno <= row <= n.end_lineno]
    if len(stmts) != 1: return None
    n = stmts[0]
    a, b = n.lineno - 1, n.end_lineno - 1
    indent = lines[a][:n.col_offset]
    if indent.strip() or lines[b][n.end_col_offset:].strip(): return None  # shares its line
    if any(t.type == tokenize.COMMENT and a + 1 <= t.start[0] <= b + 1 for t in toks):
        return None
    out = _ruff("\n".join([lines[a][n.col_offset:]] + lines[a + 1:b + 1]) + "\n",
                LIMIT - len(indent))
    if out is None: return None
    return lines[:a] + [indent + l if l else l for l in out.rstrip("\n").split("\n")] + \
        lines[b + 1:]


def _by_ruff_header(lines, i, toks, tree):
    "Lay out the header of the compound statement (if/for/def/with...) holding line i, or None."
    row = i + 1
    heads = [n for n in ast.walk(tree) if hasattr(n, "body") and isinstance(n, ast.stmt)
             and isinstance(n.body, list) and n.body and n.lineno <= row < n.body[0].lineno]
    if not heads: return None
    n = min(heads, key=lambda n: n.body[0].lineno - n.lineno)
    a, b = n.lineno - 1, n.body[0].lineno - 2  # the header's lines
    while b > a and not lines[b].strip(): b -= 1
    if getattr(n, "decorator_list", None):
        a = min(d.lineno for d in n.decorator_list) - 1 if row - 1 >= a else a
    if any(t.type == tokenize.COMMENT and a + 1 <= t.start[0] <= b + 1 for t in toks):
        return None
    head = lines[a:b + 1]
    indent = head[0][:len(head[0]) - len(head[0].lstrip())]
    text = "\n".join([head[0][len(indent):]] + head[1:])
    elif_ = text.startswith("elif ")
    if elif_: text = text[2:]
    if text.startswith(("else", "try", "finally")): return None
    out = _ruff(text + "\n" + "    pass\n", LIMIT - len(indent))
    if out is None or not out.rstrip("\n").endswith("pass"): return None
    out_lines = out.rstrip("\n").split("\n")[:-1]
    if elif_: out_lines[0] = "el" + out_lines[0]
    return lines[:a] + [indent + l if l else l for l in out_lines] + lines[b + 1:]


def _split_string(tok, room):
    "Pieces of one string token, each at most `room` wide, split after spaces, or None."
    s = tok.string
    prefix = s[:len(s) - len(s.lstrip("rbfuRBFU"))]
    body, q = s[len(prefix):], s[len(prefix)]
    if body.startswith(q * 3) or "r" in prefix.lower() or len(s) <= room: return None
    inner, depth, cuts = body[1:-1], 0, []
    for j, ch in enumerate(inner):
        if "f" in prefix.lower() and ch == "{": depth += 1
        elif "f" in prefix.lower() and ch == "}": depth -= 1
        elif ch == " " and depth == 0: cuts.append(j + 1)
    pieces, start = [], 0
    while len(inner) - start + len(prefix) + 2 > room:
        fit = [c for c in cuts if start < c and c - start + len(prefix) + 2 <= room]
        if not fit: break
        pieces.append(inner[start:fit[-1]]); start = fit[-1]
    pieces.append(inner[start:])
    if len(pieces) == 1: return None
    plain = prefix.replace("f", "").replace("F", "")
    return [f"{prefix if '{' in p else plain}{q}{p}{q}" for p in pieces]


def _by_string(lines, i, toks, tree):
    "Split the long string on line i (0-based) into adjacent literals, one per line."
    row = i + 1
    depth, depth_at = 0, {}
    for t in toks:
        if t.type == tokenize.OP and t.string in "([{": depth += 1
        elif t.type == tokenize.OP and t.string in ")]}": depth -= 1
        elif t.type == tokenize.STRING: depth_at[t.start] = depth
    for t in toks:
        if t.type != tokenize.STRING or t.start[0] != row or t.end[0] != row: continue
        if t.end[1] <= LIMIT: continue
        col = t.start[1]
        pieces = _split_string(t, LIMIT - col - 1)
        if not pieces: continue
        line = lines[i]
        head, tail = line[:col], line[t.end[1]:]
        new = [head + pieces[0]] + [" " * col + p for p in pieces[1:-1]] + \
            [" " * col + pieces[-1] + tail]
        bare = depth_at.get(t.start, 0) == 0
        if bare:  # a string statement (a docstring) needs brackets to span lines
            new = [head + "(" + pieces[0]] + [" " * (col + 1) + p for p in pieces[1:-1]] + \
                [" " * (col + 1) + pieces[-1] + ")" + tail]
        return lines[:i] + new + lines[i + 1:]
    return None


def wrap_cell(source):
    lines = source.split("\n")
    for _ in range(8):  # a rewrite can leave a shorter but still long line
        toks, src = _tokens(lines)
        before = _tree(src)
        if toks is None or before is None: return "\n".join(lines)
        changed = False
        for i in range(len(lines) - 1, -1, -1):
            if len(lines[i]) <= LIMIT: continue
            new = _rewrite(lines[i], i + 1, toks)
            if not new or new == [lines[i]]: continue
            trial = lines[:i] + new + lines[i + 1:]
            _, tsrc = _tokens(trial)
            if _tree(tsrc) == before: lines, changed = trial, True
        if changed: continue
        for how in ("ruff", "header", "string"):
            for i in range(len(lines) - 1, -1, -1):
                if len(lines[i]) <= LIMIT or lines[i].lstrip().startswith(("#", *MAGIC)):
                    continue
                toks, src = _tokens(lines)
                tree = ast.parse(src)
                trial = {"ruff": _by_ruff, "header": _by_ruff_header,
                         "string": _by_string}[how](lines, i, toks, tree)
                if trial is None or trial == lines: continue
                _, tsrc = _tokens(trial)
                if _tree(tsrc) == before: lines, changed = trial, True
            if changed: break
        if not changed: break
    return "\n".join(lines)


def main(paths):
    left = 0
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        for cell in nb["cells"]:
            if cell["cell_type"] != "code": continue
            src = "".join(cell["source"])
            new = wrap_cell(src)
            if new != src: cell["source"] = new
            for l in new.split("\n"):
                if len(l) > LIMIT:
                    left += 1; print(f"{path}: {len(l)}: {l.strip()[:100]}")
        open(path, "w").write(nbformat.writes(nb) + "\n")
    print(f"{left} lines still over {LIMIT} columns", file=sys.stderr)


if __name__ == "__main__": main(sys.argv[1:])
