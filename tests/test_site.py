"The built site (`_docs/`), checked as files: offline, complete, every link and image resolving, plots on every chapter."
import re, subprocess
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlparse, unquote
import pytest
from conftest import ROOT, chapter_pages, all_pages

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
    plots = re.findall(r'<div class="cell-output cell-output-display">\s*(?:<div[^>]*>\s*<figure[^>]*>\s*<p>)?<img src="(?:data:image/png;base64,|[^"]+\.png)', html)
    assert plots, f"{page}: no plot among the cell outputs"
    assert 'class="math' in html, f"{page}: no maths"
    assert parse(docs / page).title.strip()


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


def test_readme_is_generated_from_index():
    "README.md and its figure are what the site build makes from nbs/index.ipynb, and they are committed."
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert readme.startswith("<!-- WARNING: THIS FILE WAS AUTOGENERATED!")
    assert "make site" in readme and "make test" in readme
    for img in re.findall(r"\]\((images/[^)]+)\)", readme):
        assert (ROOT / img).exists(), img
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


def test_deployment_workflow_matches_settings():
    "The GitHub Pages workflow deploys the branch of settings.ini with nbdev's Quarto action, which publishes doc_path."
    import configparser, yaml
    cfg = configparser.ConfigParser(); cfg.read(ROOT / "settings.ini")
    wf = yaml.safe_load((ROOT / ".github" / "workflows" / "deploy.yaml").read_text())
    on = wf.get("on") or wf.get(True)  # YAML 1.1 reads the key `on` as True
    assert cfg["DEFAULT"]["branch"] in on["push"]["branches"]
    assert any("quarto-ghp" in str(s.get("uses", "")) for s in wf["jobs"]["deploy"]["steps"])
    assert cfg["DEFAULT"]["doc_path"] == "_docs"  # where quarto-ghp and `make site` both put the site
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
