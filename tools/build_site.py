"""Build the documentation site into `_docs/` where Quarto is not installed.

The steps are those of `nbdev_docs`, with smalldocs in Quarto's place:

1. nbdev writes `nbs/nbdev.yml` from `settings.ini`, rebuilds the doc-link index and processes every notebook into
   `_proc/` (show_doc tables, hidden cells, front matter with `output-file`), exactly as `nbdev_proc_nbs` does.
2. smalldocs renders `_proc/` from the same `nbs/_quarto.yml`. It ignores `output-file`, which Quarto honours, so the
   processed notebooks are first renamed to the page names nbdev's doc links use (`02_attention.ipynb` ->
   `attention.ipynb`), and the sidebar with them.
3. smalldocs 0.5.4 links KaTeX from a CDN. The site must work offline, so KaTeX is installed from the npm registry,
   copied into `site_libs/katex/`, and every page is pointed at that copy.
4. README.md is the Markdown copy of the home page that smalldocs writes (`llms-txt`), as `nbdev_readme` renders
   `index.ipynb` to GitHub Markdown with Quarto.
5. Between nbdev and smalldocs, the processed notebooks are fixed for readers (`postprocess_notebooks`; nbs/ is never
   touched, so nbval and nbdev still read every directive): `# NBVAL_...` and stray `#|` comment lines leave the code
   shown; links to the doc host become relative; each API card's signature is rebuilt from the object (classes with
   their constructor's parameters, NamedTuples with their fields, annotations and defaults as written) and the
   "Exported source" under it is folded, and its "source" link follows `__wrapped__` into the package's own file (or
   is dropped); chapters get their number (the file's) in the title, every chapter a download of its notebook near
   the top, and every page its whole summary as description (nbdev keeps the first line of a `>` paragraph).
6. After smalldocs, the pages are fixed (`postprocess_pages`): tables scroll in a box of their own, and so do figures:
   a plot drawn by the package's helpers carries its natural size and legibility in a PNG text chunk
   (`transformer_nb.plotting.figure_png`), and is shown at that size, or shrunk to a narrower column no further than
   its smallest text and cells stay legible (`figure_html`); an automatic
   link to an anchor that does not exist (nbdev links private names too) becomes plain code. A figure whose panels
   stand side by side carries them (`figure_panels`, found in its pixels) for tools/site.js, which shows the figure
   panel by panel where it is wider than its column; diagrams link their full-size picture; attention explorers get
   the package's current script.
7. The search index is made plain text (no TeX) and ranked, chapters first (`postprocess_search`), and every page
   loads tools/site.js (scroll cues, panels). Dark mode is smalldocs' own: `theme: {light, dark}` in _quarto.yml.

Deployment publishes `_docs/` as built here (.github/workflows/deploy.yaml runs `make site`).

Quarto's `nbdev_docs` would build a similar site without the fixes of steps 5 and 6; it is not what is deployed.
"""
from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
KATEX_VERSION = "0.16.11"  # the version smalldocs 0.5.4 links to; pinned so that its auto-render API matches
SMALLDOCS_KATEX = f"https://cdn.jsdelivr.net/npm/katex@{KATEX_VERSION}/dist"
NPM_PREFIX = ROOT / ".build" / "npm"


def log(msg: str) -> None:
    print(f"site: {msg}", flush=True)


def process_notebooks() -> Path:
    "Run nbdev's own pre-render steps (those of `nbdev_proc_nbs`, without its Quarto install) and return `_proc`."
    os.chdir(ROOT)
    from nbdev.config import get_config
    from nbdev.quarto import nbdev_sidebar
    from nbdev.serve import proc_nbs

    cfg = get_config()
    nbdev_sidebar.__wrapped__(path=cfg.nbs_path)  # a no-op with custom_sidebar = True: nbs/sidebar.yml is ours
    # n_workers=0: one notebook after another in this process. Two spawned workers each import nbdev, torch and
    # matplotlib again: 8.7 s and 16.9 CPU-seconds against 7.4 s and 8.4 (the same _proc/, cell ids aside).
    cache = proc_nbs(cfg.nbs_path, n_workers=0, force=True)
    return Path(cache)


def refresh_nbdev_files() -> None:
    "What nbdev writes into the repository before processing: nbs/nbdev.yml and the doc-link index (`_modidx.py`)."
    os.chdir(ROOT)
    import nbdev.doclinks
    from nbdev.quarto import refresh_quarto_yml
    refresh_quarto_yml()
    nbdev.doclinks._build_modidx()


def front_matter(nb_path: Path) -> dict:
    "The YAML front matter nbdev put in the first raw cell of a processed notebook."
    import json

    nb = json.loads(nb_path.read_text(encoding="utf-8"))
    for cell in nb.get("cells", [])[:1]:
        src = "".join(cell.get("source", ""))
        m = re.match(r"^---\n(.*?)\n---", src, re.S)
        if cell.get("cell_type") == "raw" and m:
            return yaml.safe_load(m.group(1)) or {}
    return {}


def rename_to_output_files(cache: Path) -> dict[str, str]:
    "Rename each processed notebook to the `output-file` nbdev gave it; return the map of old to new names."
    renames = {}
    for nb in sorted(cache.glob("*.ipynb")):
        out = front_matter(nb).get("output-file")
        if not out:
            continue
        new = Path(out).with_suffix(".ipynb").name
        if new != nb.name:
            if (cache / new).exists():
                sys.exit(f"site: {nb.name} and {new} would both become {out}")
            nb.rename(cache / new)
            renames[nb.name] = new
    sidebar = cache / "sidebar.yml"
    if sidebar.exists():
        text = sidebar.read_text(encoding="utf-8")
        for old, new in renames.items():
            text = re.sub(rf"(?<![\w/]){re.escape(old)}\b", new, text)
        sidebar.write_text(text, encoding="utf-8")
    return renames


def render(cache: Path) -> Path:
    "Render `_proc` with smalldocs and move the result to the doc path of settings.ini (`_docs`), as nbdev_docs does."
    from nbdev.config import get_config
    from smalldocs.site import build

    site = build(cache, quiet=True)
    for w in site.warnings:
        if "output-file is not read" not in w:  # handled above: pages are named by their output-file
            log(f"smalldocs warning: {w}")
    cfg = get_config()
    built = cache / cfg.doc_path.name
    dest = cfg.doc_path
    shutil.rmtree(dest, ignore_errors=True)
    shutil.move(str(built), str(dest))
    return Path(dest)


def katex_dist() -> Path:
    "KaTeX from the npm registry, installed once into .build/npm."
    dist = NPM_PREFIX / "node_modules" / "katex" / "dist"
    if not (dist / "katex.min.js").exists():
        npm = shutil.which("npm")
        if npm is None:
            sys.exit("site: npm is needed to install KaTeX for offline maths (apt-get install npm)")
        log(f"installing katex@{KATEX_VERSION} from the npm registry")
        NPM_PREFIX.mkdir(parents=True, exist_ok=True)
        subprocess.run([npm, "install", "--no-save", "--no-package-lock", "--no-audit", "--no-fund",
                        "--prefix", str(NPM_PREFIX), f"katex@{KATEX_VERSION}"], check=True)
    return dist


def vendor_katex(docs: Path) -> int:
    "Copy KaTeX into `site_libs/katex` and point every page at it instead of the CDN; return the pages changed."
    dist = katex_dist()
    dest = docs / "site_libs" / "katex"
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    for name in ("katex.min.css", "katex.min.js"):
        shutil.copy2(dist / name, dest / name)
    (dest / "contrib").mkdir()
    shutil.copy2(dist / "contrib" / "auto-render.min.js", dest / "contrib" / "auto-render.min.js")
    shutil.copytree(dist / "fonts", dest / "fonts")
    changed = 0
    for page in docs.rglob("*.html"):
        html = page.read_text(encoding="utf-8")
        if SMALLDOCS_KATEX not in html:
            continue
        up = "../" * (len(page.relative_to(docs).parts) - 1)
        page.write_text(html.replace(SMALLDOCS_KATEX, f"{up}site_libs/katex"), encoding="utf-8")
        changed += 1
    return changed


def write_readme(docs: Path, renames: dict[str, str]) -> None:
    """README.md from the Markdown copy of the home page, as `nbdev_readme` makes it with Quarto.

    Links to other pages point at their notebooks in `nbs/` (what a reader of the repository can open), and the
    figures are copied into `images/` (committed, so that the README shows them); every such link is then made
    absolute (`absolute_links`), for the package index."""
    from nbdev.config import get_config

    cfg = get_config()
    md = docs / "index.llms.md"
    if not md.exists():
        sys.exit("site: smalldocs wrote no index.llms.md; is website.llms-txt on in nbs/_quarto.yml?")
    text = md.read_text(encoding="utf-8")
    text = text.replace("<!-- WARNING: THIS FILE WAS AUTOGENERATED! DO NOT EDIT! -->\n\n", "")
    source = {Path(new).stem: old for old, new in renames.items()}

    def page_link(m: re.Match) -> str:
        stem = m.group(1)
        return f"]({cfg.nbs_path.name}/{source.get(stem, stem + '.ipynb')}{m.group(2) or ''})"

    text = re.sub(r"\]\(([\w-]+)\.llms\.md(#[^)]*)?\)", page_link, text)
    images = cfg.config_path / "images"
    for old in sorted(set(re.findall(r"\]\((index_files/[^)]+\.png)\)", text))):
        name = "readme_" + Path(old).name
        images.mkdir(exist_ok=True)
        png = (docs / old).read_bytes()
        write_if_changed(images / name, png)
        text = text.replace(f"]({old})", f"](images/{name})")
        # the figure's title as its alt text, as on the site (nbdev writes "png")
        try: title = json.loads(png_text(png)["tnb-legibility"]).get("title")
        except (KeyError, ValueError): title = None
        if title: text = text.replace(f"![png](images/{name})", f"![{title}](images/{name})")
    text = absolute_links(text, cfg)
    text = link_the_site(text, doc_host())
    header = ("<!-- WARNING: THIS FILE WAS AUTOGENERATED! DO NOT EDIT! It is built from nbs/index.ipynb "
              "by `make site`. -->\n\n")
    write_if_changed(cfg.config_path / "README.md", (header + text).encode("utf-8"))


def link_the_site(text: str, site: str) -> str:
    """The README links the rendered book (settings.ini's doc_host and doc_baseurl) in a line after the home page's
    summary. The home page itself cannot: its links are relative, so that the site works offline (test_site)."""
    line = f"**Read the book online:** <{site}> (the same pages as `make site` builds)."
    paras = text.split("\n\n")
    title = next((i for i, p in enumerate(paras) if p.startswith("# ")), None)
    at = 0 if title is None else min(title + 2, len(paras))    # after the title and its summary
    return "\n\n".join(paras[:at] + [line] + paras[at:])


def absolute_links(text: str, cfg) -> str:
    """README.md is also the package's description on the package index, which resolves no relative link: every
    link to a file of the repository points at it on GitHub (`git_url/blob/branch/path`), every image at its raw
    file (`raw.githubusercontent.com/user/repo/branch/path`), in Markdown and in HTML alike. Both work in the
    repository too."""
    blob = f"{cfg.git_url.rstrip('/')}/blob/{cfg.branch}/"
    raw = f"https://raw.githubusercontent.com/{cfg.user}/{cfg.repo}/{cfg.branch}/"
    relative = r"(?![a-z][\w+.-]*:|#|/)"

    def md(m: re.Match) -> str:
        return f"{m.group(1)}]({(raw if m.group(1).startswith('!') else blob)}{m.group(2)})"
    text = re.sub(rf"(!?\[[^\]]*)\]\({relative}([^)\s]+)\)", md, text)
    text = re.sub(rf'(<img\b[^>]*\bsrc="){relative}([^"]+)"', lambda m: f'{m.group(1)}{raw}{m.group(2)}"', text)
    text = re.sub(rf'(<a\b[^>]*\bhref="){relative}([^"]+)"', lambda m: f'{m.group(1)}{blob}{m.group(2)}"', text)
    return text


def write_if_changed(path: Path, data: bytes) -> bool:
    """Write `data` to `path` unless it holds them already, through a temporary file and a rename: the tests that run
    beside the build (`make test`) never read a half-written README or figure. Returns whether it wrote."""
    if path.exists() and path.read_bytes() == data: return False
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return True


def make_exercises() -> list[Path]:
    "Regenerate `exercises/` from the chapters' `#| exercise` cells (transformer_nb.book.exercises), before anything is rendered."
    from transformer_nb.book.exercises import make_exercises as make
    return make(ROOT / "nbs", ROOT / "exercises")


def standalone(nb_path: Path) -> str:
    """A chapter notebook as a reader downloads it: without the nbdev export cell (which needs this repository), with
    the diagrams embedded as attachments and the committed results it reads (JSON) written by a cell before the
    reading one (`embed_results`, as in the exercise notebooks), and with a first code cell that has torch use the AVX2 kernels the stored
    outputs come from (`kernels_source`, as the exercise notebooks' set-up cell does), so that it runs, shows everything
    and trains the book's models to the digit on its own."""
    import json

    from transformer_nb.book.exercises import (
        embed_images,
        embed_results,
        kernels_source,
    )
    nb = json.loads(nb_path.read_text(encoding="utf-8"))
    nb["cells"] = [c for c in nb["cells"] if "nbdev_export()" not in "".join(c["source"])]
    kernels = dict(cell_type="code", execution_count=None, id="kernels", metadata={}, outputs=[],
                   source=kernels_source().rstrip("\n").splitlines(keepends=True))
    first_code = next(i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code")
    nb["cells"].insert(first_code, kernels)   # before any cell can import torch
    embed_results(nb["cells"], ROOT / "benchmarks" / "results")
    embed_images(nb["cells"], nb_path.parent)
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


def copy_downloads(docs: Path, src: Path, pattern: str, folder: str) -> int:
    """Copy notebooks into the site as downloads that the chapters link: the chapters themselves, standalone
    (`notebooks/NN_name.ipynb`), and their exercises (`exercises/NN_name.ipynb`). Returns how many."""
    dest = docs / folder
    dest.mkdir(exist_ok=True)
    paths = sorted(src.glob(pattern))
    for p in paths:
        (dest / p.name).write_text(standalone(p), encoding="utf-8")
    return len(paths)


def draw_diagrams() -> list[Path]:
    "Regenerate the diagrams of images/ from the code that draws them (byte-identical when nothing changed)."
    import matplotlib

    from transformer_nb.book.diagrams import save_diagrams
    matplotlib.use("Agg")
    return save_diagrams(ROOT / "images")


# ---------------------------------------------------------------------------------------------------------------------
# Build-time fixes of the processed notebooks (`_proc/`, after nbdev, before smalldocs) and of the rendered pages.
# The notebooks in nbs/ stay as their authors wrote them: nbval and nbdev still read every directive there.

DIRECTIVE = re.compile(r"#\s*NBVAL_\w+|#\|")


def strip_directives(code: str) -> str:
    """Drop the comment lines that are directives for the tools (`# NBVAL_IGNORE_OUTPUT`, `# NBVAL_SKIP: why`, a `#|`
    line below the cell's first line of code) from a code cell shown to readers. The `#|` options at the top of the cell
    stay: smalldocs reads them (echo, output, code-fold) and never shows them. A `#|` inside a string is code, and
    stays."""
    import io
    import tokenize

    lines = code.split("\n")
    top = 0
    while top < len(lines) and lines[top].startswith("#|"):
        top += 1
    drop = set()
    try:
        for tok in tokenize.generate_tokens(io.StringIO(code).readline):
            row = tok.start[0] - 1
            if tok.type == tokenize.COMMENT and row >= top and DIRECTIVE.match(tok.string) \
                    and lines[row].strip() == tok.string.strip():
                drop.add(row)
    except (tokenize.TokenError, SyntaxError, IndentationError):  # not Python (a %magic): whole-line matches only
        drop = {i for i, l in enumerate(lines) if i >= top and DIRECTIVE.match(l.strip())}
    return "\n".join(l for i, l in enumerate(lines) if i not in drop)


def doc_host() -> str:
    "The documentation host and path of settings.ini, where nbdev's automatic links point: `https://host/base/`."
    from nbdev.config import get_config
    cfg = get_config()
    return cfg.doc_host.rstrip("/") + "/" + cfg.doc_baseurl.strip("/") + "/"


def relative_links(text: str, page: str, host: str) -> str:
    "Links to the documentation host made relative (all pages lie side by side); links within `page` become `#anchor`."
    text = re.sub(re.escape(host) + re.escape(page) + r"(?=#)", "", text)
    return text.replace(host, "")


def _anno(a) -> str:
    import inspect
    if isinstance(a, str):  # as written in the source (the modules use `from __future__ import annotations`)
        return a
    return inspect.formatannotation(a).replace("ForwardRef(", "").replace(" ", "")


def _default(v) -> str:
    import inspect
    if inspect.isfunction(v) or inspect.isbuiltin(v) or inspect.isclass(v):
        return v.__name__
    return repr(v)


def _comment(doc: str | None) -> str:
    "A parameter's comment as it reads in code: one line, without the Markdown backticks of a docment"
    return f"  # {' '.join(doc.split()).replace('`', '')}" if doc else ""


def _params(obj, skip_self: bool) -> tuple[list[tuple[str, str]], object, str]:
    "(parameter text, its comment) of a callable, its return annotation and the return's comment, from the source"
    import inspect

    from fastcore.docments import docments
    sig = inspect.signature(obj)
    try:
        docs = docments(obj, full=True)
    except Exception:
        docs = {}
    P = inspect.Parameter
    out, star_done = [], False
    params = list(sig.parameters.values())
    if skip_self and params and params[0].name in ("self", "cls"):
        params = params[1:]
    for i, p in enumerate(params):
        if p.kind == P.KEYWORD_ONLY and not star_done:
            out.append(("*", ""))
            star_done = True
        if p.kind == P.VAR_POSITIONAL:
            star_done = True
        s = {P.VAR_POSITIONAL: "*", P.VAR_KEYWORD: "**"}.get(p.kind, "") + p.name
        if p.annotation is not P.empty:
            s += ":" + _anno(p.annotation)
        if p.default is not P.empty:
            s += "=" + _default(p.default)
        out.append((s, _comment((docs.get(p.name) or {}).get("docment"))))
        if p.kind == P.POSITIONAL_ONLY and (i + 1 == len(params) or params[i + 1].kind != P.POSITIONAL_ONLY):
            out.append(("/", ""))
    ret_doc = (docs.get("return") or {}).get("docment")
    return out, sig.return_annotation, _comment(ret_doc)


def _layout(head: str, params: list[tuple[str, str]], tail: str, width: int = 88) -> str:
    "`head(p1, p2)tail` on one line when it fits and no parameter has a comment, else one parameter per line"
    one = f"{head}({', '.join(p for p, _ in params)}){tail}"
    if len(one) <= width and not any(c for _, c in params) or not params:
        return one
    body = "\n".join(f"    {p},{c}" for p, c in params)
    return f"{head}(\n{body}\n){tail}"


def namedtuple_fields(cls) -> str:
    """The fields of a NamedTuple as its source declares them, each with its type, default and meaning (a comment
    beside it, else its entry in the class docstring's numpydoc Parameters)"""
    import ast
    import inspect
    import io
    import textwrap
    import tokenize

    from fastcore.docments import parse_docstring
    src = textwrap.dedent(inspect.getsource(cls))
    comments = {}
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.string.lstrip("#").strip()
    documented = {k: " ".join(p.desc) for k, p in parse_docstring(cls)["Parameters"].items()}
    node = ast.parse(src).body[0]
    lines = []
    for st in node.body:
        if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name):
            s = f"{st.target.id}:{ast.unparse(st.annotation).replace(' ', '')}"
            if st.value is not None:
                s += f" = {ast.unparse(st.value)}"
            doc = comments.get(st.lineno) or documented.get(st.target.id)
            lines.append(f"    {s}{_comment(doc)}")
    bases = ", ".join(ast.unparse(b) for b in node.bases) or "NamedTuple"
    return f"class {cls.__name__}({bases}):\n" + "\n".join(lines)


def whole_summary(md: str) -> str:
    """A card's summary in italics as a whole: where a docstring's summary runs over several lines, nbdev puts only the
    first in italics."""
    return re.sub(r"(```\n\n)\*([^\n]+)\*\n((?:[^\n]+\n?)+)",
                  lambda m: f"{m.group(1)}*{m.group(2)} {' '.join(m.group(3).split())}*\n", md, count=1)


def card_signature(obj, name: str) -> str:
    """The code block of an API card, as the object is declared: `def f(...)->T:` for a function, `class C(...)` with
    the constructor's parameters for a class, the fields with their meanings for a NamedTuple. Types are the
    annotations as written (none when there is none: no `NoneType=None`), defaults as written (`print`, not
    `builtin_function_or_method=print`), comments without Markdown."""
    import inspect
    if inspect.isclass(obj) and issubclass(obj, tuple) and hasattr(obj, "_fields"):
        return namedtuple_fields(obj)
    if inspect.isclass(obj):
        try:
            params, _, _ = _params(obj, skip_self=True)
        except ValueError:  # no constructor of its own (an exception class): its bases
            return f"class {name}({', '.join(b.__name__ for b in obj.__bases__)})"
        return _layout(f"class {name}", params, "")
    params, ret, ret_c = _params(obj, skip_self=False)
    head = ("async def " if inspect.iscoroutinefunction(obj) else "def ") + name
    tail = ("" if ret is inspect.Signature.empty else "->" + _anno(ret)) + ":" + ret_c
    return _layout(head, params, tail)


def find_symbol(name: str, modules: list[str]):
    "The object `name` (a qualified name, `Class.method`) in the first of `modules` that has it, and that module."
    import importlib
    for m in modules:
        try:
            obj = importlib.import_module(m)
        except ImportError:
            continue
        for part in name.split("."):
            obj = getattr(obj, part, None)
            if obj is None:
                break
        if obj is not None:
            return obj, m
    return None, None


def page_modules(nb_path: Path) -> list[str]:
    "The module a notebook exports (its `#| default_exp`), then every other module of the package."
    import json
    lib = "transformer_nb"
    own = []
    if nb_path.exists():
        for cell in json.loads(nb_path.read_text(encoding="utf-8"))["cells"]:
            m = re.search(r"^#\|\s*default_exp\s+(\S+)", "".join(cell["source"]), re.M)
            if m:
                own.append(f"{lib}.{m.group(1)}")
    others = sorted(f"{lib}." + ".".join(p.relative_to(ROOT / lib).with_suffix("").parts)
                    for p in (ROOT / lib).rglob("*.py") if not p.name.startswith("_"))
    return own + [m for m in others if m not in own]


def fix_card(md: str, modules: list[str]) -> tuple[str, bool]:
    """Rewrite one show_doc card (nbdev's Markdown): its code block from `card_signature`, and its source link pointing
    at the module the page documents (nbdev looks names up globally, so two `main`s share one link)."""
    head = re.search(r"^#{2,4} (\S+)\s*$", md, re.M)
    block = re.search(r"```python\n.*?\n```", md, re.S)
    if not head or not block:
        return md, False
    obj, mod = find_symbol(head.group(1), modules)
    if obj is None:
        return md, False
    try:
        sig = card_signature(obj, head.group(1).split(".")[-1])
    except (ValueError, TypeError, OSError) as e:
        log(f"API card of {head.group(1)} left as nbdev made it: {e}")
        return md, False
    md = md[:block.start()] + f"```python\n{sig}\n```" + md[block.end():]
    url = source_url(obj)
    if url:
        md = re.sub(r"\[source\]\([^)]*\)", f"[source]({url})", md, count=1)
    else:  # not our code (or no source to find): no link at all rather than one into .venv
        md = re.sub(r"\s*\[source\]\([^)]*\)(\{[^}]*\})?", "", md, count=1)
    return md, True


def source_url(obj) -> str | None:
    """The link to `obj`'s definition in the repository: through `__wrapped__` (a function under `@torch.no_grad()`
    is torch's wrapper, defined in torch/utils/_contextlib.py), and only into the package's own files."""
    import inspect

    from nbdev.config import get_config
    try:
        target = inspect.unwrap(obj)
        src = Path(inspect.getsourcefile(target)).resolve()
        line = inspect.getsourcelines(target)[1]
    except (TypeError, OSError, ValueError):
        return None
    pkg = ROOT / "transformer_nb"
    if not src.is_relative_to(pkg):
        return None
    cfg = get_config()
    return f"{cfg.git_url}/blob/{cfg.branch}/{src.relative_to(ROOT).as_posix()}#L{line}"


def summary_of(nb_path: Path) -> str | None:
    """The whole one-paragraph summary under a notebook's title (`# Title` then `> summary`, which may run over several
    lines, each after the first with or without its `>`), as one line; None without one."""
    import json
    if not nb_path.exists():
        return None
    for cell in json.loads(nb_path.read_text(encoding="utf-8"))["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        src = "".join(cell["source"])
        if not re.match(r"^#\s", src):
            return None
        m = re.search(r"^>\s*(\S.*?)(?:\n\s*\n|\Z)", src, re.S | re.M)
        if not m:
            return None
        return " ".join(re.sub(r"^>\s?", "", l.strip()) for l in m.group(1).split("\n")).strip()
    return None


@functools.cache
def summary_fixes() -> tuple[tuple[str, str], ...]:
    """(the first line nbdev took, the whole summary) of every notebook whose summary nbdev cut; read once per build
    (whole_summaries runs for every page, and read every notebook twice each time: 9 of the build's 34 s)"""
    out = []
    for nb in sorted((ROOT / "nbs").glob("*.ipynb")):
        whole = summary_of(nb)
        if not whole:
            continue
        src = json_cells_title(nb)
        m = re.search(r"^>\s+(\S.*?)\s*$", src, re.M)  # what nbdev took: the first line
        cut = m.group(1) if m else None
        if cut and cut != whole:
            out.append((cut, whole))
    return tuple(out)


def whole_summaries(text: str) -> str:
    "Every notebook's summary that nbdev cut at its first line, made whole in `text` (the API page quotes them)"
    for cut, whole in summary_fixes():
        if whole not in text:
            text = text.replace(cut, whole)
    return text


def json_cells_title(nb_path: Path) -> str:
    "The source of a notebook's first markdown cell"
    import json
    cells = json.loads(nb_path.read_text(encoding="utf-8"))["cells"]
    return next(("".join(c["source"]) for c in cells if c["cell_type"] == "markdown"), "")


# a "source" link of a card that does not point into the package's own files (nbdev links a wrapper's file: torch's)
FOREIGN_SOURCE = re.compile(r"\s*\[source\]\((?![^)]*/blob/[^/)]+/transformer_nb/)[^)]*\)(\{[^}]*\})?")


def chapter_numbers() -> dict[str, str]:
    """The number of each chapter, from its file name: `01_embeddings.ipynb` is chapter 1, `13_benchmark.ipynb` chapter
    13, `11a_pronouns.ipynb` chapter 11a (the files are numbered in reading order, as the prose counts them), for
    the notebooks of the sidebar's sections Chapters and Performance."""
    side = yaml.safe_load((ROOT / "nbs" / "sidebar.yml").read_text(encoding="utf-8"))
    out = {}

    def walk(items, numbered=False):
        for it in items:
            if isinstance(it, dict):
                walk(it.get("contents", []), numbered or it.get("section") in ("Chapters", "Performance"))
            elif numbered:
                m = re.match(r"^(\d+)([a-z]?)_", Path(it).name)
                if m:                                   # 11a_pronouns.ipynb: chapter "11a", after 11
                    out[Path(it).name] = f"{int(m.group(1))}{m.group(2)}"
    walk(side["website"]["sidebar"]["contents"])
    return out


DOWNLOADED = ("Differences",)  # pages outside the numbered chapters that also link their notebook


def download_line(src_name: str) -> str:
    return (f'**Run it yourself:** download this chapter as a <a href="notebooks/{src_name}" download>notebook</a> '
            '(it needs this package and the notebook tools: `pip install -e ".[dev]"` in a clone of the repository).')


def postprocess_notebooks(cache: Path, renames: dict[str, str]) -> dict[str, int]:
    "Apply the build-time fixes to every processed notebook; return counts of what changed."
    import json
    host = doc_host()
    numbers = chapter_numbers()
    source_of = {new: old for old, new in renames.items()}
    downloads = set(numbers) | {"98_differences.ipynb"}
    stats = dict(directives=0, links=0, cards=0, folded=0, numbered=0, downloads=0, foreign_sources=0,
                 summaries=0)
    for nb_path in sorted(cache.glob("*.ipynb")):
        nb = json.loads(nb_path.read_text(encoding="utf-8"))
        page = nb_path.with_suffix(".html").name
        orig = source_of.get(nb_path.name, nb_path.name)
        modules = page_modules(ROOT / "nbs" / orig)
        for cell in nb["cells"]:
            src = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
            if cell["cell_type"] == "code":
                new = strip_directives(src)
                stats["directives"] += src.count("\n") - new.count("\n")
                if "#| code-fold: show" in new and 'code-summary: "Exported source"' in new:
                    new = new.replace("#| code-fold: show", "#| code-fold: true")  # the card already shows it
                    stats["folded"] += 1
                current = modules  # the API page shows many modules' cards in one cell, each after its `## module`
                for out in cell.get("outputs", []):
                    data = out.get("data") or {}
                    for mime in ("text/markdown", "text/html"):
                        if mime in data:
                            v = "".join(data[mime]) if isinstance(data[mime], list) else data[mime]
                            m = re.match(r"## (transformer_nb\.\S+)", v)
                            if mime == "text/markdown" and m:
                                current = [m.group(1)] + [x for x in modules if x != m.group(1)]
                            if mime == "text/markdown" and v.startswith("---") and "```python" in v:
                                v, ok = fix_card(whole_summary(v), current)
                                stats["cards"] += ok
                            if mime == "text/markdown":
                                v, n = FOREIGN_SOURCE.subn("", v)
                                stats["foreign_sources"] += n
                            w = relative_links(v, page, host)
                            stats["links"] += v.count(host)
                            data[mime] = w
                src = new
            elif cell["cell_type"] == "markdown":
                stats["links"] += src.count(host)
                src = relative_links(src, page, host)
            cell["source"] = src
        # the whole summary as the page's description (nbdev keeps the first line of a `>` paragraph), also where the
        # API page quotes a module's (nbdev's module docstring: that same first line)
        first = nb["cells"][0] if nb["cells"] else None
        if first and first["cell_type"] == "raw":
            fm_text = "".join(first["source"])
            m = re.match(r"^---\n(.*?)\n---", fm_text, re.S)
            fm = yaml.safe_load(m.group(1)) if m else None
            whole = summary_of(ROOT / "nbs" / orig)
            if fm and whole and fm.get("description") and fm["description"] != whole:
                fm["description"] = whole
                first["source"] = "---\n" + yaml.safe_dump(fm, sort_keys=False, allow_unicode=True, width=10**6) \
                    + "\n---\n\n"
                stats["summaries"] += 1
        if orig == "99_api.ipynb":
            for cell in nb["cells"]:
                for out in cell.get("outputs", []):
                    md = (out.get("data") or {}).get("text/markdown")
                    if isinstance(md, str):
                        out["data"]["text/markdown"] = whole_summaries(md)
        # the chapter's number in its title, the download of its notebook near the top
        if first and first["cell_type"] == "raw" and orig in numbers:
            fm = "".join(first["source"])
            fm2 = re.sub(r"^title: *(['\"]?)(.*?)\1 *$", lambda m: f"title: \"{numbers[orig]}. "
                         + m.group(2).replace('"', '\\"') + '"', fm, count=1, flags=re.M)
            stats["numbered"] += fm2 != fm
            first["source"] = fm2
        if orig in downloads and not any(f"notebooks/{orig}" in "".join(c["source"]) for c in nb["cells"]
                                         if c["cell_type"] == "markdown"):
            at = next((i + 1 for i, c in enumerate(nb["cells"]) if c["cell_type"] == "markdown"
                       and "AUTOGENERATED" in "".join(c["source"])), 1)
            nb["cells"].insert(at, {"cell_type": "markdown", "metadata": {}, "source": download_line(orig)})
            stats["downloads"] += 1
        nb_path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return stats


def png_text(png: bytes) -> dict[str, str]:
    "The tEXt chunks of a PNG: {keyword: text}"
    import struct
    out, at = {}, 8
    while at + 8 <= len(png):
        n, kind = struct.unpack(">I4s", png[at:at + 8])
        if kind == b"tEXt":
            key, _, text = png[at + 8:at + 8 + n].partition(b"\0")
            out[key.decode("latin-1")] = text.decode("latin-1")
        if kind in (b"IDAT", b"IEND"):  # matplotlib writes its text before the pixels
            break
        at += 12 + n
    return out


FIGURE = re.compile(r'<img src="data:image/png;base64,([^"]+)" class="img-fluid">')


def figure_html(m: re.Match) -> str:
    """A plot with its legibility (`tnb-legibility`, see transformer_nb.plotting): at its natural size where the
    column has room, else shrunk to the column, but never below the width at which its smallest text would be
    MIN_LABEL_PX or its smallest cell MIN_CELL_PX (its `min-width`); narrower than that, it scrolls sideways in its
    box. The figure's title is its alt text. Other pictures stay as they are."""
    import base64
    import html
    import json
    import math
    try:
        leg = json.loads(png_text(base64.b64decode(m.group(1)))["tnb-legibility"])
    except (KeyError, ValueError):
        return m.group(0)
    from transformer_nb.plotting import MIN_CELL_PX, MIN_LABEL_PX
    alt = html.escape(leg.get("title") or "a figure", quote=True)
    data = "".join(f' data-min-{k}="{leg[k]}"' for k in ("cell", "label") if leg.get(k) is not None)
    # the narrowest it may be shown: where its smallest text or cell reaches the floor the helpers draw to
    floors = {"label": MIN_LABEL_PX, "cell": MIN_CELL_PX}
    least = max((floors[k] / leg[k] for k in floors if leg.get(k)), default=1.0)
    floor = min(leg["width"], math.ceil(leg["width"] * least))
    data += f' data-min-width="{floor:.0f}" style="min-width: {floor:.0f}px"'
    panels = figure_panels(base64.b64decode(m.group(1)), leg["width"])
    if panels:
        data += ' data-panels="' + ";".join(",".join(map(str, p)) for p in panels) + '"'
    return (f'<div class="figure-scroll"><img src="data:image/png;base64,{m.group(1)}" class="tnb-figure" '
            f'alt="{alt}" width="{leg["width"]}" height="{leg["height"]}"{data}></div>')


def figure_panels(png: bytes, width: int, gap: float = 8, text: float = 48, sliver: float = 30,
                  panel: float = 80) -> list[tuple]:
    """The panels of a figure, found in its pixels, for the page to show one by one where the whole is wider than
    the column (tools/site.js): (x, y, w, h, kind) in CSS px at the natural `width`, kind "p" for a panel, "t" for a
    line of text that belongs to no one panel (a title over all of them), in reading order.

    A recursive XY cut: the figure splits into bands at rows without ink at least `gap` px high, each band into
    parts at columns without ink at least `gap` px wide. A band lower than `text` px (a line of titles, legends or
    axis labels) joins the band next to it when each of its parts lies over exactly one part there; a band of text
    that joins none stays whole, a title. A part narrower than `sliver` px (an axis label on its side) joins the part
    beside it, unless it is a word in a line of text. A first line of text over more parts than it has is the
figure's title, whole; a part beside the grid with nothing under it (a colour bar) comes right after the title. A
figure without two parts side by side at least `panel` px wide has no panels to show one by one:
    []."""
    import io

    import numpy as np
    from PIL import Image
    img = np.asarray(Image.open(io.BytesIO(png)).convert("L"))
    k = img.shape[1] / width
    ink = img < 245
    g = max(1, round(gap * k))

    def runs(mask):
        idx = np.flatnonzero(mask)
        if not len(idx): return []
        cut = np.flatnonzero(np.diff(idx) > g)
        starts = np.r_[idx[0], idx[cut + 1]]
        ends = np.r_[idx[cut], idx[-1]] + 1
        return list(zip(starts.tolist(), ends.tolist()))

    def union(a, b): return [min(a[0], b[0]), min(a[1], b[1]), max(a[2], b[2]), max(a[3], b[3])]

    bands = []  # each: list of [x0, y0, x1, y1] in pixels
    for y0, y1 in runs(ink.any(axis=1)):
        parts = []
        for x0, x1 in runs(ink[y0:y1].any(axis=0)):
            ys = np.flatnonzero(ink[y0:y1, x0:x1].any(axis=1))
            parts.append([x0, y0 + int(ys[0]), x1, y0 + int(ys[-1]) + 1])
        # a sliver (an axis's label set on its side) belongs to the part beside it; in a line of text (a band
        # lower than `text`) a short word such as "keys" under each panel is no sliver
        while y1 - y0 >= text * k and len(parts) > 1 and min(p[2] - p[0] for p in parts) < sliver * k:
            i = min(range(len(parts)), key=lambda n: parts[n][2] - parts[n][0])
            j = i + 1 if i + 1 < len(parts) and (i == 0 or parts[i + 1][0] - parts[i][2]
                                                  <= parts[i][0] - parts[i - 1][2]) else i - 1
            parts[min(i, j)] = union(parts[i], parts[j])
            del parts[max(i, j)]
        bands.append(parts)

    def short(b): return max(p[3] for p in b) - min(p[1] for p in b) < text * k
    def over(a, b): return a[0] < b[2] and b[0] < a[2]
    def fits(small, big):  # each part of `small` over exactly one of `big`
        hits = [[j for j, q in enumerate(big) if over(p, q)] for p in small]
        return all(len(h) == 1 for h in hits)

    def join(small, big):
        out = [list(q) for q in big]
        for p in small:
            q = next(q for q in out if over(p, q))
            q[:] = [min(p[0], q[0]), min(p[1], q[1]), max(p[2], q[2]), max(p[3], q[3])]
        return out

    # a first line of text over more parts than it has (a figure's title over its panels) is the figure's title,
    # whole, however the gaps between its words happen to fall over the gaps between the panels
    title = bands[0] if len(bands) > 1 and short(bands[0]) and len(bands[0]) < len(bands[1]) else None
    if title: title[:] = [[min(p[0] for p in title), min(p[1] for p in title), max(p[2] for p in title),
                           max(p[3] for p in title)]]

    def merge(down: bool) -> None:
        "Join text bands to the panels below them (titles, legends), or else (down=False) to those above"
        changed = True
        while changed:
            changed = False
            for i in range(len(bands) - 1):
                a, b = bands[i], bands[i + 1]
                if title is not None and (a is title or b is title): continue  # the title stays
                if down and short(a) and not short(b) and fits(a, b):
                    bands[i:i + 2] = [join(a, b)]
                elif down and short(a) and short(b) and len(a) == len(b) >= 2 and fits(a, b) and fits(b, a):
                    bands[i:i + 2] = [join(a, b)]
                elif not down and short(b) and not short(a) and fits(b, a):
                    bands[i:i + 2] = [join(b, a)]
                else:
                    continue
                changed = True
                break
    merge(down=True)
    merge(down=False)
    # panels side by side, or there is nothing to re-flow: a band with two parts at least `panel` px wide
    if not any(not short(b) and sum(p[2] - p[0] >= panel * k for p in b) >= 2 for b in bands):
        return []
    out, side = [], []
    for i, b in enumerate(bands):
        if short(b) and not (len(b) >= 2 and any(not short([p]) for p in b)):
            b = [[min(p[0] for p in b), min(p[1] for p in b), max(p[2] for p in b), max(p[3] for p in b)]]
            kind = "t"
        else:
            kind = "p"
        for x0, y0, x1, y1 in b:
            pad = 2 * k  # a little white around each part
            x0, y0 = max(0, x0 - pad), max(0, y0 - pad)
            x1, y1 = min(img.shape[1], x1 + pad), min(img.shape[0], y1 + pad)
            part = (round(x0 / k), round(y0 / k), round((x1 - x0) / k), round((y1 - y0) / k), kind)
            # a part beside the grid with nothing under it (a colour bar by the first row) is shown before the
            # panels, under the title, rather than between two rows
            below = bands[i + 1] if i + 1 < len(bands) else None
            if kind == "p" and below and not any(over([x0, 0, x1, 0], q) for q in below): side.append(part)
            else: out.append(part)
    top = next((n for n, p in enumerate(out) if p[4] == "p"), len(out))
    return out[:top] + side + out[top:]


# the script of an attention explorer as a notebook stored it (transformer_nb.explorer._explorer_script)
EXPLORER_SCRIPT = re.compile(r"<script>\(function\(\)\{if\(!window\.__tnbExplorer1\)\{.*?"
                             r"window\.__tnbExplorer1\.boot\(document\.currentScript\);\}\)\(\);</script>", re.S)


def explorer_script() -> str:
    """The explorer's script as the package writes it now: a page shows the current explorer even where its notebook
    was stored before explorer.js last changed (nbval leaves the script out of its comparison, see conftest.py)."""
    from transformer_nb.explorer import _explorer_script
    return _explorer_script()


DIAGRAM = re.compile(r'(<img [^>]*src="(images/[\w.-]+\.png)"[^>]*>)')


def diagram_html(m: re.Match) -> str:
    "A diagram of images/ as a link to itself at full size, with a line that says so on a narrow screen"
    return (f'<a class="diagram-link" href="{m.group(2)}" title="the diagram at its full size">{m.group(1)}</a>'
            '<span class="diagram-hint">Tap the diagram to open it at full size.</span>')


CARD_HEADING = re.compile(r'<h[34] id="([^"]+)"')
TOC_LEAF = re.compile(r'<li><a href="#([^"]+)"[^>]*>(?:(?!</a>).)*</a></li>', re.S)


def card_ids(html: str) -> set[str]:
    "The anchors of a page's API cards: nbdev's show_doc headings, which sit inside a cell's output"
    out = set()
    for m in CARD_HEADING.finditer(html):
        before = html[:m.start()]
        if before.rfind('<div class="cell-output') > max(before.rfind("<section"), before.rfind('<div id="cell-')):
            out.add(m.group(1))
    return out


def toc_narrative_first(html: str) -> tuple[str, int]:
    """The page's contents ("On this page") with its narrative sections first: the API cards, which smalldocs lists
    under the sections that define them, move to one group at the end, the page's own Reference section if it has
    one, else "Functions on this page". Returns the page and how many entries moved."""
    m = re.search(r'(<nav id="TOC"[^>]*>.*?)(</nav>)', html, re.S)
    cards = card_ids(html)
    if not m or not cards: return html, 0
    toc = m.group(1)
    moved = [x.group(0) for x in TOC_LEAF.finditer(toc) if x.group(1) in cards]
    if not moved: return html, 0
    toc = TOC_LEAF.sub(lambda x: "" if x.group(1) in cards else x.group(0), toc).replace("<ul></ul>", "")
    ref = re.search(r'<li><a href="#reference"[^>]*>Reference</a></li>', toc)
    if ref:
        head, toc = ref.group(0).removesuffix("</li>"), toc.replace(ref.group(0), "", 1)
    else:
        first = TOC_LEAF.match(moved[0]).group(1)
        head = (f'<li><a href="#{first}" id="toc-functions-on-this-page" class="nav-link" '
                f'data-scroll-target="#{first}">Functions on this page</a>')
    k = toc.rfind("</ul>")
    toc = toc[:k] + head + "<ul>" + "".join(moved) + "</ul></li>" + toc[k:]
    return html[:m.start()] + toc + m.group(2) + html[m.end():], len(moved)


def postprocess_pages(docs: Path) -> dict[str, int]:
    """Fixes of the rendered pages: every table in a container that scrolls sideways (with a shadow while more lies to
    either side), no link to the documentation host, and no automatic link to an anchor that does not exist (nbdev
    links any backticked name of its index, private helpers too, whose cards are not shown): such a link becomes its
    plain code."""
    host = doc_host()
    pages = sorted(docs.glob("*.html"))
    ids = {p.name: set(re.findall(r'\sid="([^"]+)"', p.read_text(encoding="utf-8"))) for p in pages}
    stats = dict(tables=0, figures=0, panelled=0, diagrams=0, explorers=0, unlinked=0, links=0, toc_moved=0)
    chapters = set(chapter_pages_of_sidebar())
    for p in pages:
        html = p.read_text(encoding="utf-8")
        stats["links"] += html.count(host)
        if p.name in chapters:
            html, n = toc_narrative_first(html)
            stats["toc_moved"] += n
        html = relative_links(html, p.name, host)

        def check(m):
            href, inner = m.group(1), m.group(2)
            target, _, frag = href.partition("#")
            target = target or p.name
            if target in ids and frag and frag not in ids[target]:
                owner = frag.split(".")[0]  # a method without a card of its own: link its class's card
                if "." in frag and owner in ids[target]:
                    return m.group(0).replace(f"#{frag}", f"#{owner}", 1)
                stats["unlinked"] += 1
                log(f"{p.name}: unlinked {inner} (no #{frag} in {target})")
                return inner
            return m.group(0)
        html = re.sub(r'<a href="((?:[\w-]+\.html)?#[^"]+)">(<code>[^<]*</code>)</a>', check, html)
        main_start = html.find('<main')
        head, body = html[:main_start], html[main_start:]
        n = len(re.findall(r"<table\b", body))
        body = re.sub(r"<table\b", '<div class="table-scroll"><table', body)
        body = body.replace("</table>", "</table></div>")
        stats["tables"] += n
        body = FIGURE.sub(figure_html, body)
        stats["figures"] += body.count('class="tnb-figure"')
        stats["panelled"] += body.count("data-panels=")
        body, n = DIAGRAM.subn(diagram_html, body)
        stats["diagrams"] += n
        body, n = EXPLORER_SCRIPT.subn(lambda m: explorer_script(), body)
        stats["explorers"] += n
        p.write_text(head + body, encoding="utf-8")
    return stats


TEX_SYMBOLS = {
    "alpha": "α", "beta": "β", "gamma": "γ", "delta": "δ", "epsilon": "ε", "varepsilon": "ε", "theta": "θ",
    "lambda": "λ", "mu": "μ", "pi": "π", "sigma": "σ", "tau": "τ", "phi": "φ", "omega": "ω", "Delta": "Δ",
    "Sigma": "Σ", "odot": "⊙", "cdot": "·", "cdots": "⋯", "ldots": "…", "dots": "…", "times": "×", "in": "∈",
    "le": "≤", "leq": "≤", "ge": "≥", "geq": "≥", "ne": "≠", "neq": "≠", "approx": "≈", "infty": "∞",
    "to": "→", "rightarrow": "→", "leftarrow": "←", "sum": "Σ", "prod": "∏", "top": "ᵀ", "mid": "|",
    "quad": " ", "qquad": " ", "left": "", "right": "", "big": "", "Big": "", "max": "max", "min": "min",
    "log": "log", "exp": "exp", "softmax": "softmax", "lfloor": "⌊", "rfloor": "⌋", "lceil": "⌈", "rceil": "⌉",
}


def tex_to_text(text: str) -> str:
    r"""Maths written for KaTeX made plain text for search snippets: `\sqrt{d_k}` -> `√(d_k)`, `\frac{a}{b}` ->
    `(a)/(b)`, `\text{model}` -> `model`, `\gamma` -> `γ`, `\mathbb{R}` -> `ℝ`; delimiters and braces dropped."""
    t = re.sub(r"\\[()\[\]]|\$", "", text)
    t = re.sub(r"\\mathbb\{R\}", "ℝ", t)
    for _ in range(3):  # nested
        t = re.sub(r"\\(?:text|mathrm|mathbf|mathit|operatorname|textrm|boldsymbol)\{([^{}]*)\}", r"\1", t)
        t = re.sub(r"\\sqrt\{([^{}]*)\}", r"√(\1)", t)
        t = re.sub(r"\\frac\{([^{}]*)\}\{([^{}]*)\}", r"(\1)/(\2)", t)
    t = re.sub(r"\^\{?\\top\}?", "ᵀ", t)
    t = re.sub(r"\\([A-Za-z]+)", lambda m: TEX_SYMBOLS.get(m.group(1), m.group(1)), t)
    t = re.sub(r"\\[,;:! ]", " ", t)
    t = t.replace("{", "").replace("}", "").replace("\\", "")
    return re.sub(r"[ \t]{2,}", " ", t)


SEARCH_PATCH = ("const hits = fuse ? fuse.search(q, { limit }).map((h) => h.item)",
                "const hits = fuse ? fuse.search(q, { limit: limit * 4 }).sort((a, b) => (a.item.rank || 0) - "
                "(b.item.rank || 0)).slice(0, limit).map((h) => h.item)")


def postprocess_search(docs: Path) -> dict[str, int]:
    """The search index for readers: snippets in plain text (no TeX), each entry ranked (0 a chapter, 1 another
    page, 2 the API reference) and the search sorting its hits by rank, then by Fuse's score, so that a chapter comes
    before the API page's copy of what it explains; an API entry for a name that has a card on another page is
    dropped (the chapter's card is the same card, with its lesson)."""
    import json
    path = docs / "search.json"
    entries = json.loads(path.read_text(encoding="utf-8"))
    chapters = set(chapter_pages_of_sidebar())
    carded = {(e["section"]) for e in entries if not e["href"].startswith("api.html") and "#" in e["href"]}
    out, dropped = [], 0
    for e in entries:
        page = e["href"].split("#")[0]
        if page == "api.html" and "#" in e["href"] and e["section"] in carded:
            dropped += 1
            continue
        e["text"] = tex_to_text(e["text"])
        e["section"] = tex_to_text(e["section"])
        e["rank"] = 0 if page in chapters else 2 if page == "api.html" else 1
        out.append(e)
    out.sort(key=lambda e: e["rank"])  # stable: Fuse breaks ties of score by position
    path.write_text(json.dumps(out, ensure_ascii=False), encoding="utf-8")
    js = docs / "site_libs" / "smalldocs.js"
    code = js.read_text(encoding="utf-8")
    if SEARCH_PATCH[0] not in code:
        sys.exit("site: smalldocs.js no longer has the search line that build_site.py sorts by rank; update SEARCH_PATCH")
    js.write_text(code.replace(*SEARCH_PATCH), encoding="utf-8")
    return dict(entries=len(out), dropped=dropped)


def chapter_pages_of_sidebar() -> list[str]:
    "The pages of the sidebar's Chapters and Performance sections"
    return [re.sub(r"^\d+[a-z]?_", "", Path(nb).stem) + ".html" for nb in chapter_numbers()]


def install_site_script(docs: Path) -> int:
    "Copy tools/site.js into site_libs/tnb-site.js and load it on every page, after smalldocs.js; return the pages"
    shutil.copy2(ROOT / "tools" / "site.js", docs / "site_libs" / "tnb-site.js")
    n = 0
    for page in docs.rglob("*.html"):
        html = page.read_text(encoding="utf-8")
        up = "../" * (len(page.relative_to(docs).parts) - 1)
        tag = f'<script src="{up}site_libs/smalldocs.js" defer></script>'
        if tag not in html or "tnb-site.js" in html:
            continue
        page.write_text(html.replace(tag, tag + f'<script src="{up}site_libs/tnb-site.js" defer></script>'),
                        encoding="utf-8")
        n += 1
    return n


def prepare() -> None:
    "The steps that write into the repository itself: exercises/, images/, nbs/nbdev.yml, the doc-link index."
    log(f"regenerated {len(make_exercises())} exercise notebook(s) in exercises/")
    drawn = draw_diagrams()
    log(f"drew {len(drawn)} diagrams into images/")
    refresh_nbdev_files()


def build_pages() -> None:
    "The steps that write `_proc/` and `_docs/` (and README.md with its figures, only where they changed)."
    t0 = time.perf_counter()
    cache = process_notebooks()
    log(f"nbdev processed the notebooks into {cache.name}/ ({time.perf_counter() - t0:.1f}s)")
    renames = rename_to_output_files(cache)
    log("pages: " + ", ".join(f"{a} -> {b}" for a, b in renames.items()))
    fixed = postprocess_notebooks(cache, renames)
    log("processed notebooks: " + ", ".join(f"{k} {v}" for k, v in fixed.items()))
    docs = render(cache)
    fixed = postprocess_pages(docs)
    log("rendered pages: " + ", ".join(f"{k} {v}" for k, v in fixed.items()))
    n = vendor_katex(docs)
    log(f"KaTeX {KATEX_VERSION} served from site_libs/katex on {n} page(s)")
    log("search index: " + ", ".join(f"{k} {v}" for k, v in postprocess_search(docs).items()))
    log(f"tnb-site.js loaded on {install_site_script(docs)} page(s)")
    write_readme(docs, renames)
    log(f"copied {copy_downloads(docs, ROOT / 'nbs', '[0-9]*.ipynb', 'notebooks')} chapter notebook(s) into {docs.relative_to(ROOT)}/notebooks/")
    log(f"copied {copy_downloads(docs, ROOT / 'exercises', '*.ipynb', 'exercises')} exercise notebook(s) into {docs.relative_to(ROOT)}/exercises/")


def main(argv: list[str]) -> None:
    """`build_site.py` builds everything; `build_site.py prepare` and `build_site.py pages` do one half each (`make
    test` prepares first, then builds the pages beside the tests, whose site tests wait for them)."""
    steps = argv[1:] or ["prepare", "pages"]
    if not set(steps) <= {"prepare", "pages"}: sys.exit(f"usage: {argv[0]} [prepare] [pages]")
    t0 = time.perf_counter()
    if "prepare" in steps: prepare()
    if "pages" in steps:
        build_pages()
        pages = sorted(p.name for p in (ROOT / "_docs").glob("*.html"))
        log(f"built {len(pages)} pages into _docs/ in {time.perf_counter() - t0:.1f}s: {' '.join(pages)}")


if __name__ == "__main__":
    main(sys.argv)
