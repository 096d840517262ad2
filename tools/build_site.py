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

Where Quarto exists, `nbdev_docs` (or `nbdev_preview`) builds the same site from the same files.
"""
from __future__ import annotations

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
    from nbdev.quarto import refresh_quarto_yml, nbdev_sidebar
    from nbdev.serve import proc_nbs
    import nbdev.doclinks

    cfg = get_config()
    refresh_quarto_yml()
    nbdev.doclinks._build_modidx()
    nbdev_sidebar.__wrapped__(path=cfg.nbs_path)  # a no-op with custom_sidebar = True: nbs/sidebar.yml is ours
    cache = proc_nbs(cfg.nbs_path, n_workers=min(2, os.cpu_count() or 1), force=True)
    return Path(cache)


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
    figures are copied into `images/` (committed, so that the README shows them)."""
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
        shutil.copy2(docs / old, images / name)
        text = text.replace(f"]({old})", f"](images/{name})")
    header = ("<!-- WARNING: THIS FILE WAS AUTOGENERATED! DO NOT EDIT! It is built from nbs/index.ipynb "
              "by `make site`. -->\n\n")
    (cfg.config_path / "README.md").write_text(header + text, encoding="utf-8")


def make_exercises() -> list[Path]:
    "Regenerate `exercises/` from the chapters' `#| exercise` cells (transformer_nb.book.exercises), before anything is rendered."
    from transformer_nb.book.exercises import make_exercises as make
    return make(ROOT / "nbs", ROOT / "exercises")


def standalone(nb_path: Path) -> str:
    """A chapter notebook as a reader downloads it: without the nbdev export cell (which needs this repository) and
    with the diagrams embedded as attachments, so that it runs and shows everything on its own."""
    import json
    from transformer_nb.book.exercises import embed_images
    nb = json.loads(nb_path.read_text(encoding="utf-8"))
    nb["cells"] = [c for c in nb["cells"] if "nbdev_export()" not in "".join(c["source"])]
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
    from transformer_nb.book.diagrams import save_diagrams
    import matplotlib
    matplotlib.use("Agg")
    return save_diagrams(ROOT / "images")


def main() -> None:
    t0 = time.perf_counter()
    log(f"regenerated {len(make_exercises())} exercise notebook(s) in exercises/")
    drawn = draw_diagrams()
    log(f"drew {len(drawn)} diagrams into images/")
    cache = process_notebooks()
    log(f"nbdev processed the notebooks into {cache.name}/ ({time.perf_counter() - t0:.1f}s)")
    renames = rename_to_output_files(cache)
    log("pages: " + ", ".join(f"{a} -> {b}" for a, b in renames.items()))
    docs = render(cache)
    n = vendor_katex(docs)
    log(f"KaTeX {KATEX_VERSION} served from site_libs/katex on {n} page(s)")
    write_readme(docs, renames)
    log(f"copied {copy_downloads(docs, ROOT / 'nbs', '[0-9]*.ipynb', 'notebooks')} chapter notebook(s) into {docs.relative_to(ROOT)}/notebooks/")
    log(f"copied {copy_downloads(docs, ROOT / 'exercises', '*.ipynb', 'exercises')} exercise notebook(s) into {docs.relative_to(ROOT)}/exercises/")
    pages = sorted(p.name for p in docs.glob("*.html"))
    log(f"built {len(pages)} pages into {docs.relative_to(ROOT)}/ in {time.perf_counter() - t0:.1f}s: {' '.join(pages)}")


if __name__ == "__main__":
    main()
