"The built site (`_docs/`), checked as files: offline, complete, every link and image resolving, plots on every chapter."
import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

from conftest import ROOT, all_pages, chapter_pages

NETWORK = re.compile(r"^(https?:)?//", re.I)


class Refs(HTMLParser):
    "Collect what a page loads (scripts, styles, images, fonts) and what it links to."
    def __init__(self):
        super().__init__()
        self.loads, self.links, self.imgs, self.title, self._in_title = [], [], [], "", False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "script" and a.get("src"): self.loads.append(a["src"])
        if tag == "link" and a.get("href") and set((a.get("rel") or "").split()) & {"stylesheet", "icon", "preload", "modulepreload"}:
            self.loads.append(a["href"])
        if tag in ("img", "source", "video", "audio", "iframe", "embed") and a.get("src"):
            self.loads.append(a["src"]); self.imgs.append(a["src"])
        if tag == "a" and a.get("href"): self.links.append(a["href"])
        if tag == "title": self._in_title = True

    def handle_endtag(self, tag):
        if tag == "title": self._in_title = False

    def handle_data(self, data):
        if self._in_title: self.title += data


def parse(page: Path) -> Refs:
    r = Refs(); r.feed(page.read_text(encoding="utf-8")); return r


def html_pages(docs):
    return sorted(docs.rglob("*.html"))


def test_every_notebook_has_a_page(docs):
    "One page per notebook, named as nbdev's doc links name it (01_embeddings.ipynb -> embeddings.html)."
    missing = [p for p in all_pages() if not (docs / p).exists()]
    assert not missing, f"pages missing from _docs: {missing}"


def test_no_network_resources(docs):
    "No page, and no stylesheet, loads a script, style, image or font from the network (no CDN)."
    bad = []
    for page in html_pages(docs):
        bad += [f"{page.name}: {u}" for u in parse(page).loads if NETWORK.match(u)]
    for css in docs.rglob("*.css"):
        text = css.read_text(encoding="utf-8", errors="replace")
        bad += [f"{css.relative_to(docs)}: {u}" for u in re.findall(r"url\(\s*['\"]?((?:https?:)?//[^'\")]+)", text)]
        bad += [f"{css.relative_to(docs)}: @import {u}" for u in re.findall(r"@import\s+(?:url\()?['\"]?((?:https?:)?//[^'\");]+)", text)]
    for js in docs.rglob("*.js"):
        text = js.read_text(encoding="utf-8", errors="replace")
        bad += [f"{js.relative_to(docs)}: {u}" for u in re.findall(r"(https?://cdn[^'\"\s)]+)", text)]
    assert not bad, "network resources:\n" + "\n".join(bad)


def resolve(page: Path, url: str, docs: Path) -> Path | None:
    "The file a relative URL of `page` points at, or None for external links and pure fragments."
    u = urlparse(url)
    if u.scheme or u.netloc or url.startswith(("mailto:", "data:", "javascript:")) or not u.path:
        return None
    target = (docs / u.path.lstrip("/")) if u.path.startswith("/") else (page.parent / unquote(u.path))
    return target / "index.html" if url.endswith("/") else target


def test_internal_links_and_images_resolve(docs):
    "Every relative link, script, stylesheet and image of every page exists in the site, and so does each #fragment."
    broken = []
    ids = {}
    for page in html_pages(docs):
        r = parse(page)
        for url in r.loads + r.links:
            target = resolve(page, url, docs)
            if target is None: continue
            if not target.exists():
                broken.append(f"{page.relative_to(docs)}: {url}")
                continue
            frag = urlparse(url).fragment
            if frag and target.suffix == ".html":
                if target not in ids:
                    ids[target] = set(re.findall(r'\sid="([^"]+)"', target.read_text(encoding="utf-8")))
                if frag not in ids[target]: broken.append(f"{page.relative_to(docs)}: {url} (no such anchor)")
    assert not broken, "broken:\n" + "\n".join(broken)


def test_katex_is_local_and_complete(docs):
    "Pages with maths load KaTeX from site_libs, and its fonts are there."
    katex = docs / "site_libs" / "katex"
    for f in ("katex.min.js", "katex.min.css", "contrib/auto-render.min.js"):
        assert (katex / f).exists(), f
    assert len(list((katex / "fonts").glob("*.woff2"))) >= 10
    math_pages = [p for p in html_pages(docs) if 'class="math' in p.read_text(encoding="utf-8")]
    assert math_pages, "no page has maths"
    for p in math_pages:
        loads = parse(p).loads
        assert any(u.endswith("site_libs/katex/katex.min.js") for u in loads), p.name


@pytest.mark.parametrize("page", chapter_pages())
def test_chapter_has_plots_and_maths(docs, page):
    "Every chapter page has at least one stored plot, typeset-ready maths, and a title."
    html = (docs / page).read_text(encoding="utf-8")
    plots = re.findall(r'<div class="cell-output cell-output-display">\s*(?:<div[^>]*>\s*(?:<figure[^>]*>\s*<p>)?)?<img src="(?:data:image/png;base64,|[^"]+\.png)', html)
    assert plots, f"{page}: no plot among the cell outputs"
    assert 'class="math' in html, f"{page}: no maths"
    assert parse(docs / page).title.strip()


def test_plots_are_legible_at_every_size_the_page_may_show(docs):
    """Each plot the helpers drew sits in a scroll box at its natural size (width and height from the PNG's text
    chunk), with an alt text; its smallest cell and text at that size are at least the helpers' minimums, and still
    are at its min-width, the narrowest a column may shrink it to."""
    from transformer_nb.plotting import MIN_CELL_PX, MIN_LABEL_PX
    n, bad = 0, []
    for p in html_pages(docs):
        html = p.read_text(encoding="utf-8")
        for img in re.findall(r'<div class="figure-scroll"><img [^>]*class="tnb-figure"[^>]*>', html):
            n += 1
            a = dict(re.findall(r'([\w-]+)="([^"]*)"', img))
            if not (a.get("alt") and int(a["width"]) > 0 and int(a["height"]) > 0):
                bad.append(f"{p.name}: {a.get('alt')!r} without alt text or size")
            if float(a.get("data-min-cell", MIN_CELL_PX)) < MIN_CELL_PX:
                bad.append(f"{p.name}: {a['alt']!r} has cells of {a['data-min-cell']} px")
            if float(a.get("data-min-label", 0)) < MIN_LABEL_PX:
                bad.append(f"{p.name}: {a['alt']!r} has text of {a.get('data-min-label')} px")
            least, w = int(a.get("data-min-width", 0)), int(a["width"])
            if f"min-width: {least}px" not in a.get("style", "") or not 0 < least <= w:
                bad.append(f"{p.name}: {a['alt']!r} without a min-width in (0, {w}] px")
            elif any(float(a[k]) * least / w < low - 0.01 for k, low in
                     (("data-min-label", MIN_LABEL_PX), ("data-min-cell", MIN_CELL_PX)) if k in a):
                bad.append(f"{p.name}: {a['alt']!r} at its min-width {least} px is below the minimums")
    assert n >= 20, f"only {n} sized plots on the site"
    assert not bad, "\n".join(bad)


def test_sidebar_lists_chapters_in_reading_order(docs):
    "The home page's sidebar links the chapters in the order of nbs/sidebar.yml."
    html = (docs / "index.html").read_text(encoding="utf-8")
    sidebar = html[html.find('id="quarto-sidebar"'):]
    hrefs = [h for h in re.findall(r'href="([^"#]+\.html)"', sidebar)]
    order = [h for h in hrefs if h in chapter_pages()]
    assert list(dict.fromkeys(order)) == chapter_pages()


def test_search_index_covers_chapters(docs):
    "The search index has entries for every chapter page."
    import json
    entries = json.loads((docs / "search.json").read_text())
    hrefs = {e["href"].split("#")[0] for e in entries}
    assert set(chapter_pages()) <= hrefs


def test_readme_is_generated_from_index(docs):  # docs: after the site build wrote it
    """README.md and its figure are what the site build makes from nbs/index.ipynb, and they are committed. It is
    also the package's description on the package index, which resolves no relative link: every link and image is
    absolute, a file of the repository on GitHub (images as raw files), and each names a file that exists here."""
    import configparser
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert readme.startswith("<!-- WARNING: THIS FILE WAS AUTOGENERATED!")
    assert "make site" in readme and "make test" in readme
    cfg = configparser.ConfigParser(); cfg.read(ROOT / "settings.ini"); c = cfg["DEFAULT"]
    site = c["doc_host"].rstrip("/") + "/" + c["doc_baseurl"].strip("/") + "/"
    assert f"<{site}>" in readme, f"the README does not link the rendered book, {site}"
    assert "127.0.0.1" not in readme and "localhost" not in readme, "a local address is dead for a reader"
    from transformer_nb.cli import build_parser
    sub = next(a for a in build_parser()._actions if a.choices and a.dest == "command")
    missing = [cmd for cmd in sub.choices if f"transformer-nb {cmd}" not in readme]
    assert not missing, f"the README does not name these commands: {missing}"
    blob = f"{c['git_url'].rstrip('/')}/blob/{c['branch']}/"
    raw = f"https://raw.githubusercontent.com/{c['user']}/{c['repo']}/{c['branch']}/"
    links = re.findall(r"(!?)\[[^\]]*\]\(([^)\s]+)\)", readme)
    links += [("!", u) for u in re.findall(r'<img\b[^>]*\bsrc="([^"]+)"', readme)]
    links += [("", u) for u in re.findall(r'<a\b[^>]*\bhref="([^"]+)"', readme)]
    assert len([u for _, u in links if u.startswith(raw)]) >= 2, "the README's figures"
    for bang, url in links:
        assert re.match(r"https?://", url), f"a relative link in README.md: {url}"
        base = raw if bang else blob
        if url.startswith((blob, raw)):
            assert url.startswith(base), f"{'an image' if bang else 'a link'} not on {base}: {url}"
            path = url[len(base):].split("#")[0]
            assert (ROOT / path).exists(), f"README.md links {url}, but there is no {path}"
    out = subprocess.run(["git", "status", "--porcelain", "--", "README.md", "images"], cwd=ROOT,
                         capture_output=True, text=True)
    if out.returncode == 0:  # inside a git checkout: the generated files must match what is committed
        assert out.stdout.strip() == "", f"README.md/images changed by the site build; commit them:\n{out.stdout}"


def test_api_reference_lists_every_exported_name(docs):
    "api.html documents every name in every module's __all__ (re-run nbs/99_api.ipynb after exporting new names)."
    import importlib
    html = (docs / "api.html").read_text(encoding="utf-8")
    missing = []
    for py in sorted((ROOT / "transformer_nb").glob("*.py")):
        if py.stem.startswith("_"): continue
        mod = importlib.import_module(f"transformer_nb.{py.stem}")
        if f"transformer_nb.{py.stem}" not in html: missing.append(f"module {py.stem}")
        missing += [f"{py.stem}.{n}" for n in getattr(mod, "__all__", []) if not re.search(rf">\s*{re.escape(n)}\s*</h3>", html)]
    assert not missing, f"not on the API page (run `make execute` or execute nbs/99_api.ipynb): {missing}"


def test_deployment_publishes_what_make_site_builds():
    "The GitHub Pages workflow deploys the branch of settings.ini by running `make site` and publishing `_docs/`."
    import configparser

    import yaml
    cfg = configparser.ConfigParser(); cfg.read(ROOT / "settings.ini")
    wf = yaml.safe_load((ROOT / ".github" / "workflows" / "deploy.yaml").read_text())
    on = wf.get("on") or wf.get(True)  # YAML 1.1 reads the key `on` as True
    assert cfg["DEFAULT"]["branch"] in on["push"]["branches"]
    steps = [s for job in wf["jobs"].values() for s in job["steps"]]
    runs = " ".join(str(s.get("run", "")) for s in steps)
    uses = [str(s.get("uses", "")) for s in steps]
    assert "make site" in runs, "the deployed site must be the one `make site` builds (and the tests check)"
    assert not any("quarto" in u or "nbdev" in u for u in uses) and "nbdev_docs" not in runs
    upload = next(s for s in steps if "upload-pages-artifact" in str(s.get("uses", "")))
    assert upload["with"]["path"].strip("./") == cfg["DEFAULT"]["doc_path"] == "_docs"
    assert any("deploy-pages" in u for u in uses)
    test_wf = (ROOT / ".github" / "workflows" / "test.yaml").read_text()
    assert "make test" in test_wf


def test_every_figure_in_images_is_drawn_by_the_site_command_and_used(docs):
    "images/ holds exactly what the code draws (plus the README's figures), and each diagram appears on a page."
    from transformer_nb.book.diagrams import DIAGRAMS
    images = {p.name for p in (ROOT / "images").glob("*.png")}
    drawn = {Path(f).name for f in DIAGRAMS} if isinstance(DIAGRAMS, dict) else {Path(f[0]).name for f in DIAGRAMS}
    readme = {n for n in images if n.startswith("readme_")}
    assert images - readme == drawn, f"images/ not drawn by the site command: {sorted(images - readme - drawn)}"
    html = " ".join(p.read_text(encoding="utf-8") for p in docs.glob("*.html"))
    unused = sorted(n for n in drawn if f"images/{n}" not in html)
    assert not unused, f"diagrams on no page: {unused}"


# --- what a reader sees: code as written, local links, right API cards, numbered chapters with their notebooks ---

def cell_code_blocks(html: str) -> list[str]:
    "The highlighted HTML of every code cell's source on a page (not outputs, not code quoted in prose)."
    return re.findall(r'<pre class="[^"]*cell-code[^"]*"><code[^>]*>(.*?)</code></pre>', html, re.S)


def test_no_tool_directive_is_shown(docs):
    "No `# NBVAL_...` or `#| ...` comment in the code cells of any page (nbval and nbdev read them in nbs/ only)."
    bad = []
    for page in html_pages(docs):
        for block in cell_code_blocks(page.read_text(encoding="utf-8")):
            bad += [f"{page.name}: {c}" for c in re.findall(r'<span class="co">([^<]*)</span>', block)
                    if re.match(r"#\s*(NBVAL_|\|)", c)]
    assert not bad, "directives visible:\n" + "\n".join(bad)


def test_directives_stay_in_the_notebooks():
    "The notebooks still carry the directives the pages do not show (so stripping them happens only at build time)."
    text = " ".join(p.read_text(encoding="utf-8") for p in (ROOT / "nbs").glob("1[0-2]_*.ipynb"))
    assert "NBVAL_IGNORE_OUTPUT" in text


def test_no_page_links_to_the_documentation_host(docs):
    "Links between pages are relative: no page sends an offline reader to the documentation host of settings.ini."
    import configparser
    cfg = configparser.ConfigParser(); cfg.read(ROOT / "settings.ini")
    host = urlparse(cfg["DEFAULT"]["doc_host"]).netloc
    bad = [f"{p.name}: {u}" for p in html_pages(docs) for u in parse(p).links + parse(p).loads if host in u]
    assert not bad, "\n".join(bad[:20])


def test_every_page_has_a_favicon(docs):
    "Each page links an icon that exists in the site (browsers otherwise ask for /favicon.ico and log a 404)."
    for page in html_pages(docs):
        icons = re.findall(r'<link[^>]*rel="[^"]*icon[^"]*"[^>]*href="([^"]+)"|<link[^>]*href="([^"]+)"[^>]*rel="[^"]*icon',
                           page.read_text(encoding="utf-8"))
        hrefs = [a or b for a, b in icons]
        assert hrefs, f"{page.name}: no favicon"
        assert all(resolve(page, h, docs).exists() for h in hrefs), f"{page.name}: {hrefs}"


def test_notation_is_not_autolinked(docs):
    "The home page's list of notation names the paper's hyperparameters; `dropout` there is not a link to a function."
    html = (docs / "index.html").read_text(encoding="utf-8")
    para = next(p for p in re.findall(r"<p>.*?</p>", html, re.S) if "Conventions" in p)
    assert "<code>dropout</code>" in para and not re.search(r"<a [^>]*><code>dropout</code></a>", para)


def api_card(html: str, name: str) -> str:
    "The code block of the API card of `name` on a page."
    m = re.search(rf'<h3 id="{re.escape(name.lower())}"[^>]*>{re.escape(name)}</h3>\s*(.*?)</code></pre>', html, re.S)
    assert m, f"no card for {name}"
    return re.sub(r"<[^>]+>", "", m.group(1)).replace("&quot;", '"').replace("&#x27;", "'").replace("&gt;", ">")


@pytest.mark.parametrize("page, name, start, contains", [
    ("embeddings.html", "TokenEmbedding", "class TokenEmbedding(", "padding_idx:int | None=None,"),
    ("transformer.html", "Attention", "class Attention(NamedTuple):", "encoder:Tensor  # encoder self-attention"),
    ("data.html", "Batch", "class Batch(NamedTuple):", ""),
    ("core.html", "ProgressBar", "class ProgressBar(", "file=None,"),
    ("checkpoints.html", "load_model", "def load_model(", "# file written by save_model"),
    ("attention.html", "scaled_dot_product_attention", "def scaled_dot_product_attention(", ")->"),
    ("grading.html", "Hint", "class Hint(Exception)", ""),
])
def test_api_cards_show_the_object_as_declared(docs, page, name, start, contains):
    "Classes as classes with their constructor's parameters, NamedTuples with their fields, functions as functions."
    code = api_card((docs / page).read_text(encoding="utf-8"), name)
    assert code.strip().startswith(start), code[:200]
    assert contains in code, code


def test_api_cards_have_no_inferred_types_nor_markdown(docs):
    """No card shows a type guessed from a default (`NoneType=None`) or Markdown inside its code, and none repeats its
    signature in an open 'Exported source' block."""
    for page in html_pages(docs):
        html = page.read_text(encoding="utf-8")
        assert not re.search(r"<details open[^>]*>\s*<summary>Exported source", html), f"{page.name}: open source"
        cards = re.findall(r'<div class="cell-output[^"]*cell-output-markdown">.*?<pre[^>]*>(.*?)</pre>', html, re.S)
        for block in cards:
            assert "](" not in block and "<a " not in block, f"{page.name}: a link inside a signature"
            for bad in ("NoneType", "builtin_function_or_method"):
                assert bad not in block, f"{page.name}: {bad}"


def numbered_pages() -> dict[str, tuple[str, str]]:
    "page -> (chapter number, notebook) for the sidebar's Chapters and Performance sections, numbered by file."
    import yaml
    side = yaml.safe_load((ROOT / "nbs" / "sidebar.yml").read_text())
    out = {}
    def walk(items, on=False):
        for it in items:
            if isinstance(it, dict): walk(it.get("contents", []), on or it.get("section") in ("Chapters", "Performance"))
            elif on:
                num = re.match(r"^(\d+)([a-z]?)_", Path(it).name)
                out[re.sub(r"^\d+[a-z]?_", "", Path(it).stem) + ".html"] = (
                    f"{int(num.group(1))}{num.group(2)}", Path(it).name)
    walk(side["website"]["sidebar"]["contents"])
    return out


def test_chapters_are_numbered_in_reading_order(docs):
    "Chapter N is titled 'N. ...' on its page and in the sidebar, N its file's number, in the sidebar's order 1, 2, ..."
    pages = numbered_pages()
    numbers = [n for n, _ in pages.values()]                  # "1", ..., "11", "11a", "12", ...
    assert [n for n in numbers if n.isdigit()] == [str(i) for i in range(1, len(numbers) + 1)][
        :sum(n.isdigit() for n in numbers)]
    assert numbers == sorted(numbers, key=lambda n: (int(re.match(r"\d+", n).group()), n))
    side = (docs / "index.html").read_text(encoding="utf-8")
    for page, (n, _) in pages.items():
        html = (docs / page).read_text(encoding="utf-8")
        assert re.search(rf'<h1 class="title">{n}\. ', html), page
        assert re.search(rf'href="{page}"[^>]*><span class="menu-text">{n}\. ', side), f"sidebar: {page}"


def test_every_chapter_links_its_notebook(docs):
    "Every chapter, and the page of differences, links a download of its own notebook near the top, and it exists."
    pages = {p: nb for p, (_, nb) in numbered_pages().items()} | {"differences.html": "98_differences.ipynb"}
    for page, nb in pages.items():
        html = (docs / page).read_text(encoding="utf-8")
        m = re.search(rf'<a href="notebooks/{nb}" download>', html)
        assert m, f"{page}: no download of {nb}"
        main = html.find("<main")
        assert m.start() < html.find("<h2", main), f"{page}: the download comes after the first section"
        assert (docs / "notebooks" / nb).exists()


def test_a_downloaded_chapter_notebook_sets_the_books_kernels_first(docs):
    """A chapter notebook downloaded from its page runs its first code cell before any import of torch, and that cell
    has torch use the AVX2 kernels the stored outputs come from (on x86-64): chapter 10's asserts about one trained
    model hold there only with them. The JSON results it reads are written beside it by a cell of its own."""
    import json
    import platform

    from transformer_nb.book.exercises import kernels_source
    names = sorted(p.name for p in (docs / "notebooks").glob("*.ipynb"))
    assert "10_training.ipynb" in names
    for name in names:
        cells = json.loads((docs / "notebooks" / name).read_text(encoding="utf-8"))["cells"]
        code = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
        assert code[0] + "\n" == kernels_source(), name               # the first code of the notebook
        # the committed results it reads travel inside it (a saved model, 11d's, stays a file)
        reads = [m for c in code for m in re.findall(
            r'\.\./benchmarks/results/[\w.-]+\.json|"benchmarks"\s*/\s*"results"\s*/\s*"[\w.-]+\.json"', c)]
        assert not reads, (name, reads)
    if platform.machine().lower() not in ("x86_64", "amd64") or "avx2" not in Path("/proc/cpuinfo").read_text():
        return
    env = {k: v for k, v in os.environ.items() if k not in ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS",
                                                            "ONEDNN_MAX_CPU_ISA")}
    run = lambda src: subprocess.run([sys.executable, "-c", src], capture_output=True, text=True, env=env,
                                     timeout=120).stdout.strip()
    probe = "import torch; print(torch.backends.cpu.get_cpu_capability())"
    assert run(kernels_source() + probe) == "AVX2"


def test_exercises_page_lists_every_exercise(docs):
    """The Exercises page lists every `#| exercise` of the chapters, numbered in reading order and grouped by chapter,
    each with a download that exists, a time, a named level and a hint that opens on request; the totals by level open
    the page;
    the page is for learners: the generator's documentation is on the exercise notebooks' page (90a), which the
    Exercises page links."""
    from transformer_nb.book.exercises import LEVELS, list_exercises
    exercises = list_exercises(ROOT / "nbs")
    html = (docs / "exercises.html").read_text(encoding="utf-8")
    listing = re.search(r'<div class="exercises">(.*?)</div>', html, re.S)
    assert listing and 'id="how-the-exercise-notebooks-are-made"' not in html
    assert 'href="exercise_notebooks.html#how-the-exercise-notebooks-are-made"' in html
    assert 'id="how-the-exercise-notebooks-are-made"' in (docs / "exercise_notebooks.html").read_text(encoding="utf-8")
    assert not re.search(r'<h3[^>]*id="(make_exercise_notebook|list_exercises)"', html), "machinery on the learners' page"
    body = listing.group(1)
    minutes = sum(e.minutes for e in exercises)
    total = re.search(r'<p class="exercises-total"><strong>(\d+) exercises in (\d+) chapters, about (.*?) in all', html)
    assert total and html.find('class="exercises-total"') < html.find('id="the-exercises"') < listing.start()
    assert total and int(total[1]) == len(exercises) >= 18 and int(total[2]) == len({e.chapter for e in exercises})
    assert total[3].startswith(f"{minutes // 60} h")
    sections = re.findall(r'<section class="exercise-chapter">(.*?)</section>', body, re.S)
    assert [re.search(r'href="exercises/([^"]+)" download', x)[1] for x in sections] == list(
        dict.fromkeys(e.chapter for e in exercises))
    items = re.findall(r'<li id="exercise-(\d+)">(.*?)</li>', body, re.S)
    assert [int(n) for n, _ in items] == list(range(1, len(exercises) + 1))
    for (_, item), e in zip(items, exercises):
        assert all(f"<code>{n}</code>" in item for n in e.names), item
        assert f"{e.minutes} min, {'★' * e.level} {LEVELS[e.level]}" in item
        assert "<details><summary>hint</summary>" in item and (docs / "exercises" / e.chapter).exists()


def test_home_page_lists_every_chapter_and_opens_with_the_readers_path(docs):
    """The home page links every chapter of the sidebar (a new chapter must be added to its list), and its first
    section is for readers (read here, open the notebooks), before the commands for those who build and test."""
    html = (docs / "index.html").read_text(encoding="utf-8")
    main = html[html.find("<main"):]
    linked = set(re.findall(r'href="([\w-]+\.html)', main))
    missing = [p for p in numbered_pages() if p not in linked]
    assert not missing, f"chapters missing from the home page: {missing}"
    heads = re.findall(r"<h2[^>]*>(.*?)</h2>", main, re.S)
    first = re.sub(r"<[^>]+>", "", heads[0])
    assert "Read" in first, f"the home page opens with {first!r}"
    assert main.find("jupyter lab") < main.find("make test"), "the maintainer's commands come before the reader's path"


def test_subtitles_are_whole_in_the_search_index(docs):
    """A notebook summary that runs over several lines is whole wherever the site quotes it (nbdev keeps its first
    line): in the search index, as on the pages (test_browser checks those)."""
    import importlib.util
    import json
    spec = importlib.util.spec_from_file_location("build_site", ROOT / "tools" / "build_site.py")
    bs = importlib.util.module_from_spec(spec); spec.loader.exec_module(bs)
    text = " ".join(e["text"] for e in json.loads((docs / "search.json").read_text(encoding="utf-8")))
    norm = lambda t: " ".join(t.replace("\u201c", '"').replace("\u201d", '"').replace("\u2019", "'").split())
    text = norm(text)
    for nb in sorted((ROOT / "nbs").glob("*.ipynb")):
        whole = bs.summary_of(nb)
        first = re.search(r"^>\s+(\S.*?)\s*$", bs.json_cells_title(nb), re.M)
        if not whole or not first or first.group(1) == whole:
            continue
        cut = norm(first.group(1))
        assert cut not in text or norm(whole) in text, f"{nb.name}: its summary cut at {cut[-30:]!r} in search"
        n_cut, n_whole = text.count(cut), text.count(norm(whole))
        assert n_cut == n_whole, f"{nb.name}: {n_cut - n_whole} quotation(s) of its summary cut at the first line"


def test_search_index_is_plain_text_and_ranked(docs):
    "No TeX in the search index; every entry ranked, chapters (0) before other pages (1) and the API page (2)"
    import json
    entries = json.loads((docs / "search.json").read_text(encoding="utf-8"))
    tex = [e["href"] for e in entries if re.search(r"\\[a-zA-Z]+|\\[()\[\]]|\$", e["text"] + e["section"])]
    assert not tex, f"TeX in the search index: {tex[:5]}"
    ranks = [e["rank"] for e in entries]
    assert ranks == sorted(ranks) and set(ranks) == {0, 1, 2}
    chapters = set(numbered_pages())
    assert all((e["rank"] == 0) == (e["href"].split("#")[0] in chapters) for e in entries)
    js = (docs / "site_libs" / "smalldocs.js").read_text(encoding="utf-8")
    assert "(a.item.rank || 0) - (b.item.rank || 0)" in js


def test_no_source_link_leaves_the_package(docs):
    "Every card's source link points at the package's own file on GitHub, never into .venv (a wrapper's file)"
    bad = []
    for page in html_pages(docs):
        for href in re.findall(r'<a href="([^"]+)"[^>]*>source</a>', page.read_text(encoding="utf-8")):
            if "/blob/" not in href or "/transformer_nb/" not in href.split("/blob/", 1)[1] or ".venv" in href:
                bad.append(f"{page.name}: {href}")
    assert not bad, "\n".join(bad[:10])


# "the second layer", and "the first decoder layer", "the second cross-attention layer"
ORDINAL = re.compile(r"\b(first|second|third|fourth|fifth|sixth|1st|2nd|3rd)\s+(?:(?:encoder|decoder|"
                     r"cross-attention|self-attention|attention)\s+)?(layer|head)s?\b(?!\s+of\s+the\s+FFN)", re.I)
# a layer of the feed-forward network, not of the Transformer: not a layer the figures number
NOT_A_BLOCK = re.compile(r"FFN['’]s (first|second) layer|activation after the second layer")


@pytest.mark.parametrize("page", [p for p in all_pages() if p != "api.html"])
def test_layers_and_heads_are_named_by_their_numbers(docs, page):
    """Layers and heads are numbered from 0, as the code indexes them and the figures and the explorer label them
    ("layer 1, head 2" is weights[1][2]); the prose names them by those numbers, never by an ordinal ("the second
    layer" would be layer 1 to the code and the figures)."""
    html = (docs / page).read_text(encoding="utf-8")
    text = re.sub(r"<pre.*?</pre>|<code>.*?</code>|<[^>]+>", " ", html[html.find("<main"):], flags=re.S)
    text = NOT_A_BLOCK.sub("", " ".join(text.split()))
    found = [text[max(0, m.start() - 40):m.end() + 20] for m in ORDINAL.finditer(text)]
    assert not found, f"{page}: a layer or head named by an ordinal: {found[:5]}"


def test_contents_show_the_narrative_sections_before_the_api_cards(docs):
    """On every chapter page the contents ("On this page") list the chapter's sections in reading order and only then
    its API cards, in one group at the end (tools/build_site.py `toc_narrative_first`): no section after a card."""
    bad, grouped = [], 0
    for page in chapter_pages():
        html = (docs / page).read_text(encoding="utf-8")
        cards = {m.group(1) for m in re.finditer(r'<h[34] id="([^"]+)"', html)
                 if html.rfind('<div class="cell-output', 0, m.start())
                 > max(html.rfind("<section", 0, m.start()), html.rfind('<div id="cell-', 0, m.start()))}
        toc = re.search(r'<nav id="TOC".*?</nav>', html, re.S)
        if not toc: continue
        hrefs = re.findall(r'<a href="#([^"]+)"', toc.group(0))
        first = next((i for i, h in enumerate(hrefs) if h in cards), len(hrefs))
        after = [h for h in hrefs[first + 1:] if h not in cards]
        if after: bad.append(f"{page}: sections after its first card in the contents: {after[:3]}")
        grouped += first < len(hrefs)
    assert not bad, "\n".join(bad)
    assert grouped >= 15, f"only {grouped} chapter pages list API cards in their contents"
