"""The site in a real browser: headless Debian Chromium driven by Playwright, pages served from localhost.

Each page must load with its title, its whole subtitle, its maths typeset by the local KaTeX (no raw TeX left
visible), its plots decoded with a non-zero size, no console error, no request leaving localhost and no "source" link
outside the package. Each page is loaded once and then looked at on a desktop (1280 px) and a phone (390 px), in the
light and the dark theme (the system's preference, emulated): nothing wider than its column unless it scrolls in a
box of its own that shows it does; the panels of a figure wider than its column shown one by one, each inside the
column; the theme applied, figures and the explorer on a light card; the explorers' keyboard and colours. With
TNB_SCREENSHOTS=1, screenshots of every page in the four views go to artifacts/screenshots/."""
import functools
import json
import os
import re
import shutil
from urllib.parse import urlparse

import pytest

from conftest import ROOT, all_pages, chapter_pages, serve

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
SHOTS = ROOT / "artifacts" / "screenshots"
NO_DIAGRAM: set = set()  # every chapter opens with a diagram
ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--disable-dev-shm-usage"]


@pytest.fixture(scope="module")
def server(docs):
    "Serve _docs/ on a free localhost port for the duration of the module."
    httpd, url = serve(docs)
    yield url
    httpd.shutdown()


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright
    if not shutil.which(CHROMIUM) and not ROOT.joinpath(CHROMIUM).exists():
        msg = "chromium is not installed (make test installs Debian's chromium)"
        if os.environ.get("TNB_REQUIRE_SITE") == "1": pytest.fail(msg)
        pytest.skip(msg)
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


def open_page(browser, width: int, height: int):
    """A page in a context of its own that records console errors and every request that does not go to localhost
    (and blocks it); returns (context, page)."""
    ctx = browser.new_context(viewport={"width": width, "height": height}, color_scheme="light")
    pg = ctx.new_page()
    pg.errors, pg.outside = [], []
    pg.on("console", lambda m: pg.errors.append(m.text) if m.type == "error" else None)
    pg.on("pageerror", lambda e: pg.errors.append(str(e)))
    pg.on("response", lambda r: pg.errors.append(f"HTTP {r.status}: {r.url}") if r.status >= 400 else None)
    def guard(route):
        host = urlparse(route.request.url).hostname
        if route.request.url.startswith("data:") or host in ("127.0.0.1", "localhost"):
            return route.continue_()
        pg.outside.append(route.request.url)
        return route.abort()
    pg.route("**/*", guard)
    return ctx, pg


@pytest.fixture
def page(server, browser):  # server first: without a built site, skip before starting chromium
    "A fresh page at 1280 px, for the tests that click and type."
    ctx, pg = open_page(browser, 1280, 900)
    yield pg
    ctx.close()


def loaded(server, browser, name, width, height):
    "Open one page of the site at this viewport and wait until its images are decoded."
    ctx, pg = open_page(browser, width, height)
    pg.goto(f"{server}/{name}", wait_until="load")
    pg.wait_for_function("Array.from(document.images).every(i => i.complete)", timeout=10_000)
    return ctx, pg


@pytest.fixture(scope="module", params=all_pages())
def loaded_page(request, server, browser):
    """Every page of the site, loaded once (at 1280 px) for the tests that read it; module scope makes pytest run the
    tests of one page together, and a fresh context per page keeps the pages apart."""
    ctx, pg = loaded(server, browser, request.param, 1280, 900)
    pg.name = request.param
    yield pg
    ctx.close()


def at_width(pg, width: int, height: int, scheme: str = "light"):
    """The loaded page at this viewport, in this colour scheme. Resizing runs what a narrower screen runs (media
    queries, and the site's scripts listen for them: margin notes move, the sidebar folds, wide figures re-flow), and
    the emulated preference for dark or light is what a reader's system says (the site follows it while the reader
    has not chosen with the toggle); neither loads the page again."""
    if pg.viewport_size != {"width": width, "height": height}:
        pg.set_viewport_size({"width": width, "height": height})
    if getattr(pg, "scheme", "light") != scheme:
        pg.emulate_media(color_scheme=scheme)
        pg.scheme = scheme
        dark = "true" if scheme == "dark" else "false"
        pg.wait_for_function(f"document.documentElement.classList.contains('quarto-dark') === {dark}",
                             timeout=5_000)
    pg.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
    pg.evaluate("() => window.tnbSite && window.tnbSite.refresh()")
    return pg


@pytest.fixture
def desk(loaded_page):
    "The page on a desktop's screen"
    return at_width(loaded_page, 1280, 900)


@pytest.fixture
def phone(loaded_page):
    "The page on a phone's"
    return at_width(loaded_page, 390, 844)


def visible_text_outside_code(pg) -> str:
    "The page's rendered text, without code blocks and outputs (where a `$` may be legitimate) and without KaTeX."
    return pg.evaluate("""() => {
        const main = document.querySelector('main') || document.body;
        const clone = main.cloneNode(true);
        clone.querySelectorAll('pre, code, .katex, script, style, .cell-output').forEach(e => e.remove());
        return clone.innerText;
    }""")


def test_page_renders(desk):
    page, name = desk, desk.name
    title = page.title()
    assert title and "transformer_nb" in title, f"title: {title!r}"
    h1 = page.locator("h1").first.inner_text()
    assert h1.strip()
    has_math = page.locator(".math").count() > 0
    if has_math:
        page.wait_for_selector(".katex", timeout=10_000)
        assert page.locator(".math .katex").count() == page.locator(".math").count(), "some maths was not typeset"
        assert page.locator(".katex-error").count() == 0, "KaTeX could not parse some maths"
        # KaTeX's fonts were loaded from site_libs
        assert page.evaluate("document.fonts.check('16px KaTeX_Main')")
    text = visible_text_outside_code(page)
    raw = re.findall(r"\$[^$\n]{1,80}\$|\\\(|\\\[|\\frac|\\sqrt", text)
    assert not raw, f"raw TeX visible: {raw[:5]}"
    imgs = page.eval_on_selector_all("main img", "els => els.map(e => ({src: e.getAttribute('src').slice(0, 60), "
                                     "ok: e.complete && e.naturalWidth > 0 && e.naturalHeight > 0, alt: e.getAttribute('alt'), "
                                     "plot: !!e.closest('.cell-output')}))")
    bad = [i["src"] for i in imgs if not i["ok"]]
    assert not bad, f"{name}: images that did not load with a size: {bad}"
    diagrams = [i for i in imgs if "images/" in i["src"]]
    assert all(i["alt"] and len(i["alt"]) > 10 for i in diagrams), f"{name}: a diagram without alt text"
    if name in chapter_pages():
        assert has_math, f"{name}: a chapter without maths"
        assert any(i["plot"] for i in imgs), f"{name}: a chapter without plots"
        assert diagrams or name in NO_DIAGRAM, f"{name}: a chapter that does not open with its diagram"
    # the subtitle whole, on the page and in its description
    whole = summaries().get(name)
    if whole:
        shown = page.locator("main .description").first.inner_text()
        meta = page.locator('meta[name="description"]').get_attribute("content")
        assert plain(shown) == plain(whole), f"{name}: subtitle {shown!r}, the notebook's {whole!r}"
        assert plain(meta) == plain(whole), f"{name}: description {meta!r}"
    # every "source" link points into the package's own files in the repository
    src = page.eval_on_selector_all("main a", "els => els.filter(a => a.textContent.trim() === 'source')"
                                    ".map(a => a.href)")
    ours = f"{git_url()}/blob/"
    bad = [u for u in src if not (u.startswith(ours) and "/transformer_nb/" in u[len(ours):]
                                  and "/.venv/" not in u and "site-packages" not in u)]
    assert not bad, f"{name}: source links outside the package: {bad[:5]}"
    assert not page.errors, f"console errors: {page.errors}"
    assert not page.outside, f"requests left localhost: {page.outside}"


@functools.lru_cache(maxsize=1)
def summaries() -> dict[str, str]:
    "page -> the whole summary under its notebook's title (tools/build_site.py's summary_of)"
    import importlib.util
    spec = importlib.util.spec_from_file_location("build_site", ROOT / "tools" / "build_site.py")
    mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
    out = {}
    for nb in sorted((ROOT / "nbs").glob("*.ipynb")):
        whole = mod.summary_of(nb)
        if whole: out[re.sub(r"^\d+[a-zA-Z0-9]*_", "", nb.stem) + ".html"] = whole
    return out


def plain(text: str) -> str:
    "Text compared as words: typographic quotes made straight, Markdown marks and repeated spaces dropped"
    for a, b in (("\u201c", '"'), ("\u201d", '"'), ("\u2018", "'"), ("\u2019", "'")):
        text = text.replace(a, b)
    return " ".join(text.replace("`", "").replace("*", "").split())


def git_url() -> str:
    import configparser
    cfg = configparser.ConfigParser(); cfg.read(ROOT / "settings.ini")
    return cfg["DEFAULT"]["git_url"].rstrip("/")


def test_sidebar_click_through_in_reading_order(page, server):
    """The sidebar lists the chapters in reading order, and from the home page clicking its links one after another
    walks them: the first three and the last are clicked (each click loads a whole page)."""
    page.goto(f"{server}/index.html", wait_until="load")
    hrefs = page.eval_on_selector_all("#quarto-sidebar a[href]", "els => els.map(e => e.getAttribute('href'))")
    listed = [h.split("/")[-1].split("#")[0] for h in hrefs]
    chapters = chapter_pages()
    assert [h for h in listed if h in chapters] == chapters, listed
    for name in chapters[:3] + chapters[-1:]:
        link = page.locator(f'#quarto-sidebar a[href$="{name}"]').first
        link.click()
        page.wait_for_load_state("load")
        assert page.url.endswith("/" + name), f"clicked {name}, landed on {page.url}"
        assert page.locator("h1").first.inner_text().strip()
        active = page.locator("#quarto-sidebar a.active")
        assert active.count() >= 1 and active.first.get_attribute("href").endswith(name)
    assert not page.errors, page.errors
    assert not page.outside, page.outside


@pytest.mark.parametrize("word, expected", [("sinusoidal", "embeddings.html"), ("LayerNorm", "norms.html"),
                                            ("teacher forcing", "masking.html")])
def test_search_finds_a_chapter_by_a_word_in_it(page, server, word, expected):
    "Typing a word of a chapter into the navbar's search box lists that chapter among the results."
    page.goto(f"{server}/index.html", wait_until="load")
    box = page.locator("#quarto-search input").first
    if not box.is_visible():
        page.locator("#quarto-search .sd-search-toggle, #quarto-search button").first.click()
    box.fill(word)
    page.wait_for_selector(".search-result", timeout=5_000)
    hrefs = page.eval_on_selector_all(".search-result", "els => els.map(e => e.getAttribute('href'))")
    assert any(h.split("#")[0].endswith(expected) for h in hrefs), f"{word!r}: {hrefs}"
    assert not page.outside, page.outside


def test_code_is_shown_as_written(desk):
    """At 1280 px no line of code wraps: every code block keeps `white-space: pre`, is as tall as its lines, and
    a line wider than the block scrolls inside the block (the page itself never gets wider)."""
    bad = desk.evaluate("""() => {
        const out = [];
        document.querySelectorAll('main pre').forEach(pre => {
            const code = pre.querySelector('code') || pre;
            if (!pre.offsetParent) return;                       // inside a closed <details>
            const cs = getComputedStyle(code), ps = getComputedStyle(pre);
            if (cs.whiteSpace !== 'pre') out.push(`white-space ${cs.whiteSpace}: ${code.textContent.slice(0, 40)}`);
            const lines = code.textContent.replace(/\\n$/, '').split('\\n').length;
            const lh = parseFloat(cs.lineHeight);
            const h = pre.clientHeight - parseFloat(ps.paddingTop) - parseFloat(ps.paddingBottom);
            if (lh > 0 && Math.round(h / lh) > lines) out.push(`${Math.round(h / lh)} rows for ${lines} lines: ${code.textContent.slice(0, 40)}`);
            if (pre.scrollWidth > pre.clientWidth + 1 && !['auto', 'scroll'].includes(ps.overflowX))
                out.push(`cut off, overflow-x ${ps.overflowX}: ${code.textContent.slice(0, 40)}`);
        });
        return out;
    }""")
    assert not bad, f"{desk.name}: code not shown as written:\n" + "\n".join(bad[:10])


def test_nothing_is_cut_off_on_a_phone(phone):
    "At 390 px the page is no wider than the screen, and every table wider than its column scrolls in its own box."
    name = phone.name
    width = phone.evaluate("document.documentElement.scrollWidth")
    assert width <= 390, f"{name}: the page is {width} px wide at 390 px"
    bad = phone.evaluate("""() => Array.from(document.querySelectorAll('main table')).filter(t => {
            const box = t.parentElement, col = document.querySelector('main').clientWidth;
            if (t.offsetWidth <= col) return false;
            return !(box.classList.contains('table-scroll') && getComputedStyle(box).overflowX === 'auto'
                     && box.clientWidth <= col);
        }).map(t => t.innerText.slice(0, 40))""")
    assert not bad, f"{name}: wide tables without their own scroll box: {bad}"


# ---- every page on a desktop and a phone, light and dark

SCREENS = [(1280, "light"), (390, "light"), (1280, "dark"), (390, "dark")]

CUT_OFF = """() => {
    // (1) whatever scrolls sideways shows that it does: a scroll cue (tools/site.js marks the side where more lies,
    // styles.css fades it with a mask); (2) nothing reaches past the column unless a box inside the column holds
    // it (one that scrolls, or clips: a figure's panel); hidden elements (a folded source, a figure shown panel by
    // panel) do not count
    const main = document.querySelector('main'), m = main.getBoundingClientRect(), bad = [];
    const what = e => e.tagName.toLowerCase() + (typeof e.className === 'string' && e.className
        ? '.' + e.className.trim().split(/\\s+/)[0] : '') + ' "' +
        (e.getAttribute('alt') || e.textContent || '').trim().replace(/\\s+/g, ' ').slice(0, 50) + '"';
    for (const e of main.querySelectorAll('*')) {
        if (!e.getClientRects().length) continue;
        const cs = getComputedStyle(e);
        if (cs.visibility === 'hidden') continue;
        if (['auto', 'scroll'].includes(cs.overflowX) && e.scrollWidth > e.clientWidth + 1) {
            const mask = cs.maskImage || cs.webkitMaskImage || 'none';
            const cue = e.classList.contains('tnb-more-right') || e.classList.contains('tnb-more-left');
            if (!cue || mask === 'none') bad.push('scrolls without a cue: ' + what(e));
        }
        const r = e.getBoundingClientRect();
        if (r.width > 0 && (r.right > m.right + 4 || r.left < m.left - 4)) {  // a glyph's overhang aside
            let a = e.parentElement, held = false;
            for (; a && a !== main; a = a.parentElement)
                if (getComputedStyle(a).overflowX !== 'visible') { held = true; break; }
            if (!held) bad.push(`reaches ${Math.round(r.right - m.right)} px past the column: ` + what(e));
        }
    }
    return bad;
}"""

PANELS = """() => {
    // a figure with panels (data-panels, found by the site's builder) that cannot shrink to its column (its
    // min-width, the narrowest it stays legible at, is wider) is shown panel by panel, every panel inside the
    // column; one that fits, shrunk or not, is shown whole
    const main = document.querySelector('main'), m = main.getBoundingClientRect(), out = [];
    let reflowed = 0;
    document.querySelectorAll('main img.tnb-figure[data-panels]').forEach(img => {
        const box = img.closest('.figure-scroll'), flow = box.nextElementSibling;
        if (box.closest('details:not([open])')) return;
        const col = box.parentElement.clientWidth, W = +(img.dataset.minWidth || img.getAttribute('width'));
        const n = img.dataset.panels.split(';').length, alt = img.getAttribute('alt');
        if (W <= col + 1) {
            if (!img.getClientRects().length) out.push('a figure that fits, hidden: ' + alt);
            return;
        }
        if (!flow || !flow.classList.contains('figure-flow-on') || img.getClientRects().length) {
            out.push(`at least ${W} px wide, wider than its column (${col} px), not shown panel by panel: ` + alt);
            return;
        }
        reflowed += 1;
        const crops = flow.querySelectorAll('.figure-crop');
        if (crops.length !== n) out.push(`${crops.length} of ${n} panels shown: ` + alt);
        crops.forEach((c, i) => {  // inside the column; one wider than it alone, in a box inside the column
            const r = c.getBoundingClientRect(), w = +c.style.width.replace('px', '');
            const b = w > col + 1 ? c.parentElement.getBoundingClientRect() : r;
            if (b.left < m.left - 1 || b.right > m.right + 1 || !r.width)
                out.push(`panel ${i} of ${alt} not inside the column (${Math.round(b.left)}-${Math.round(b.right)})`);
        });
    });
    return {bad: out, reflowed};
}"""

THEME = """() => {
    const lum = c => { const v = (c.match(/[\\d.]+/g) || [255, 255, 255]).slice(0, 3).map(Number);
                       return (0.299 * v[0] + 0.587 * v[1] + 0.114 * v[2]) / 255; };
    const bodyBg = getComputedStyle(document.body).backgroundColor;
    const main = document.querySelector('main');
    const text = getComputedStyle(main.querySelector('p') || main).color;
    const figures = Array.from(document.querySelectorAll('main img.tnb-figure')).filter(i => i.getClientRects().length)
        .map(i => ({blend: getComputedStyle(i).mixBlendMode,
                    card: lum(getComputedStyle(i.closest('.figure-scroll')).backgroundColor),
                    alt: i.getAttribute('alt')}));
    const crops = Array.from(document.querySelectorAll('main .figure-flow-on .figure-crop'))
        .map(c => lum(getComputedStyle(c).backgroundColor));
    const explorers = Array.from(document.querySelectorAll('.tnb-explorer')).map(e =>
        [lum(getComputedStyle(e).backgroundColor), lum(getComputedStyle(e.querySelector('.tnb-caption') || e).color)]);
    return {dark: document.documentElement.classList.contains('quarto-dark'), bg: lum(bodyBg), text: lum(text),
            figures, crops, explorers,
            toggle: !!document.querySelector('.quarto-color-scheme-toggle')};
}"""


@pytest.fixture(params=SCREENS, ids=[f"{w}-{s}" for w, s in SCREENS])
def screen(request, loaded_page):
    "The page on each screen: 1280 and 390 px, in the light and the dark theme"
    width, scheme = request.param
    return at_width(loaded_page, width, 900 if width > 500 else 844, scheme)


def test_every_screen_shows_the_whole_page(screen):
    """At 1280 and 390 px, light and dark: the page no wider than the screen; nothing wider than its column unless it
    scrolls in a box of its own that shows it does (display maths, code, tables, figures, explorers); every figure
    wider than its column shown panel by panel with each panel inside the column; the theme applied (dark: a dark
    page with light text, figures and explorers on a light card; light: the opposite page), the toggle there; on a
    phone, every diagram a link to its full size."""
    pg, name = screen, screen.name
    width, scheme = pg.viewport_size["width"], pg.scheme if hasattr(pg, "scheme") else "light"
    where = f"{name} at {width} px, {scheme}"
    assert pg.evaluate("document.documentElement.scrollWidth") <= width, f"{where}: the page is wider than the screen"
    bad = pg.evaluate(CUT_OFF)
    panels = pg.evaluate(PANELS)
    bad += panels["bad"]
    if (name, width) in REFLOWED:  # the figures the issue names: these are wider than their column here
        if panels["reflowed"] < REFLOWED[name, width]:  # at least these
            bad.append(f"{panels['reflowed']} figures shown panel by panel, expected {REFLOWED[name, width]}")
    t = pg.evaluate(THEME)
    assert t["toggle"], f"{where}: no toggle between light and dark"
    if scheme == "dark":
        assert t["dark"] and t["bg"] < 0.35 and t["text"] > 0.55, f"{where}: not dark: {t['bg']:.2f} {t['text']:.2f}"
        bad += [f"figure on a dark page without its light card: {f['alt']}" for f in t["figures"]
                if f["blend"] != "normal" or f["card"] < 0.9]
        bad += [f"a panel without its light card ({c:.2f})" for c in t["crops"] if c < 0.9]
    else:
        assert not t["dark"] and t["bg"] > 0.9 and t["text"] < 0.45, f"{where}: not light: {t['bg']:.2f}"
    bad += [f"explorer not a light card with dark text: {e}" for e in t["explorers"] if e[0] < 0.9 or e[1] > 0.5]
    if width < 500:
        diagrams = pg.eval_on_selector_all("main img[src^='images/']", """els => els
            .filter(i => i.getClientRects().length).map(i => {
                const a = i.closest('a.diagram-link'), hint = a && a.nextElementSibling;
                return {src: i.getAttribute('src'), small: i.getBoundingClientRect().width < i.naturalWidth - 1,
                        link: a ? a.getAttribute('href') : null, hint: !!(hint && hint.getClientRects().length)};
            })""")
        bad += [f"diagram {d['src']} shrunk without a link to its full size" for d in diagrams
                if d["small"] and not (d["link"] == d["src"] and d["hint"])]
    if os.environ.get("TNB_SCREENSHOTS") == "1":  # for a person to look at; 1-3 s a page, so on request
        SHOTS.mkdir(parents=True, exist_ok=True)
        pg.screenshot(path=str(SHOTS / f"{name.removesuffix('.html')}-{width}-{scheme}.png"), full_page=True)
    assert not bad, f"{where}:\n" + "\n".join(bad[:15])
    assert not pg.errors, pg.errors


# pages with figures wider than their column at that width, shown panel by panel (the check is generic; these keep
# it from passing because no figure needed it): the dates decoder's self-attention (training) and the benchmark's
# four panels at 1280 px, the training chapter's attention grids at 390 px. A chapter that redraws its figure to fit
# the column needs no re-flow: lower its count here.
REFLOWED = {("training.html", 1280): 1, ("benchmark.html", 1280): 1, ("training.html", 390): 1}


FIGURES = """() => {
    const col = document.querySelector('main').clientWidth;
    // the figures themselves; one shown panel by panel is measured on its panels, crops of the same picture drawn
    // at the picture's size (and the panels' own check is PANELS)
    return Array.from(document.querySelectorAll('main .cell-output img'))
        .filter(i => !i.closest('.figure-flow') && (i.offsetParent || i.closest('.figure-reflowed'))).map(i => {
        const flowed = i.closest('.figure-reflowed');
        const s = flowed ? flowed.nextElementSibling.querySelector('.figure-crop img') : i;
        const r = s.getBoundingClientRect(), box = i.closest('.figure-scroll');
        const natural = +i.getAttribute('width') || 0, scale = natural ? r.width / natural : 0;
        return {alt: i.getAttribute('alt') || i.getAttribute('src').slice(0, 40), sized: i.classList.contains('tnb-figure'),
                width: r.width, natural: natural, least: +(i.dataset.minWidth || natural),
                cell: i.dataset.minCell ? +i.dataset.minCell * scale : null,
                label: i.dataset.minLabel ? +i.dataset.minLabel * scale : null,
                cut: !flowed && r.width > col + 1 &&
                     !(box && getComputedStyle(box).overflowX === 'auto' && box.clientWidth <= col + 1)};
    });
}"""


def check_figures(pg) -> list[str]:
    """Every plot of the page is shown at its natural size (the width the helpers sized it for, which the site builder
    writes on the image) or, in a narrower column, shrunk no further than its min-width; at the size shown its
    smallest heatmap cell and smallest text, as the PNG records them, are at least MIN_CELL_PX and MIN_LABEL_PX CSS
    px; a plot wider than the column scrolls in its own box, never cut off. Returns what is wrong, and prints the
    smallest sizes found."""
    from transformer_nb.plotting import MIN_CELL_PX, MIN_LABEL_PX
    width = pg.viewport_size["width"]
    figures = pg.evaluate(FIGURES)
    bad, cells, labels = [], [], []
    for f in figures:
        where = f"{pg.name} at {width} px, {f['alt']!r}"
        if not f["sized"]:
            bad.append(f"{where}: a plot without its natural size (re-execute the notebook)")
            continue
        if f["width"] < f["least"] - 0.5:
            bad.append(f"{where}: shown {f['width']:.0f} px wide, below its min-width {f['least']} px")
        if f["cell"] is not None:
            cells.append(f["cell"])
            if f["cell"] < MIN_CELL_PX: bad.append(f"{where}: cells of {f['cell']:.1f} px < {MIN_CELL_PX}")
        if f["label"] is not None:
            labels.append(f["label"])
            if f["label"] < MIN_LABEL_PX: bad.append(f"{where}: text of {f['label']:.1f} px < {MIN_LABEL_PX}")
        if f["cut"]: bad.append(f"{where}: wider than the column and not in a scroll box")
    if pg.name in chapter_pages() and not labels:  # every chapter has plots (test_page_renders), each with text
        bad.append(f"{pg.name} at {width} px: no plot whose smallest text was recorded ({len(figures)} plots)")
    if pg.name == "attention.html" and not cells:  # chapter 2's heatmaps: the cell check is not vacuous
        bad.append(f"{pg.name} at {width} px: no heatmap whose smallest cell was recorded ({len(figures)} plots)")
    print(f"{pg.name} at {width} px: {len(figures)} figures"
          + (f", smallest cell {min(cells):.1f} px" if cells else "")
          + (f", smallest text {min(labels):.1f} px" if labels else ""))
    return bad


def test_figures_are_legible_at_the_size_the_page_shows_them(desk):
    "At 1280 px: see check_figures."
    bad = check_figures(desk)
    assert not bad, "\n".join(bad)


def test_figures_are_legible_on_a_phone(phone):
    "At 390 px: see check_figures (a plot that cannot shrink to the screen scrolls in its box, at its min-width)."
    bad = check_figures(phone)
    assert not bad, "\n".join(bad)


EXPLORERS = {"explorer.html": 2, "induction.html": 1, "pronouns.html": 1, "numbers.html": 1, "training.html": 1,
             "decoding.html": 1, "gpt.html": 1, "inside.html": 1}


def check_explorers(pg) -> None:
    """The attention explorers of the page (`transformer_nb.explorer.attention_explorer`), where EXPLORERS says they are: every
    view draws; after choosing the first view's last kind (cross-attention on the trained models' pages), layer 0 and
    head 0, pointing at query 1 shows the weights the page embeds; the page still fits the screen. Runs last on each
    loaded page, since it changes the view."""
    views = pg.locator(".tnb-explorer")
    assert views.count() == EXPLORERS.get(pg.name, 0), f"{pg.name}: {views.count()} explorers"
    if not views.count(): return
    assert pg.locator(".tnb-explorer[data-tnb-ready]").count() == views.count()
    assert pg.locator(".tnb-fallback").count() == 0
    assert pg.locator("style#tnb-explorer-css").count() == 1
    view = views.first
    data = json.loads(view.locator("script.tnb-data").text_content())
    kind = data["kinds"][-1]
    choose(view, 0, label=kind["name"])
    choose(view, 1, "0")
    choose(view, 2, "0")
    assert view.locator(".tnb-row").all_inner_texts() == [visible(t) for t in kind["rows"]]
    target = view.locator(".tnb-row[data-i='1']")
    # the readout sticks to the bottom of the screen (issue 33): on a phone, after the earlier views, a row can sit
    # under it, where a reader scrolls it up first; the test sends the row its click (what is read is the readout)
    target.evaluate("e => e.scrollIntoView({block: 'center'})")
    target.dispatch_event("click")
    row = kind["w"][0][0][1]  # layer 0, head 0, query 1
    shown = [float(t) for t in view.locator(".tnb-readout .tnb-chips .tnb-num").all_inner_texts()]
    assert shown == [v / 10 ** data["decimals"] for v in row]
    # colour: each head on its own scale by default, its largest weight the brightest colour; per row on request
    m = kind["w"][0][0]
    i, j = max(((i, j) for i in range(len(m)) for j in range(len(m[0]))), key=lambda ij: m[ij[0]][ij[1]])
    assert view.locator(".tnb-app").get_attribute("data-scale") == data.get("scale", "head")
    if data.get("scale", "head") == "head":
        assert cell_colour(view, i, j) == TOP, f"{pg.name}: the head's largest weight is not the brightest"
    view.locator("select").nth(3).select_option("row")
    for r in range(len(m)):
        if max(m[r]) > 0:
            assert cell_colour(view, r, m[r].index(max(m[r]))) == TOP, f"{pg.name}: row {r} per row"
    view.locator("select").nth(3).select_option("head")
    # the keyboard: the grids are one Tab stop, the arrow keys move from it
    for v in range(views.count()):
        assert views.nth(v).locator(".tnb-panels [tabindex='0']").count() == 1, f"{pg.name}: view {v}"
    view.locator(".tnb-panels [tabindex='0']").focus()
    before = pg.evaluate("[document.activeElement.dataset.i, document.activeElement.dataset.j]")
    pg.keyboard.press("ArrowRight")
    after = pg.evaluate("[document.activeElement.dataset.i, document.activeElement.dataset.j]")
    assert after != before and view.locator(".tnb-panels [tabindex='0']").count() == 1
    # every head at once: a tap on a row of the first head shows its numbers on the screen (the readout stays at the
    # bottom of the screen while the view is on it)
    if view.locator("select").nth(2).locator("option[value='all']").count():
        choose(view, 2, "all")
    row = view.locator(".tnb-panel .tnb-row[data-i='1']").first
    row.scroll_into_view_if_needed()
    row.click()
    box, vh = view.locator(".tnb-readout").bounding_box(), pg.viewport_size["height"]
    assert box["y"] < vh and box["y"] + min(box["height"], 40) <= vh, f"{pg.name}: the readout is off the screen: {box}"
    width = pg.viewport_size["width"]
    assert pg.evaluate("document.documentElement.scrollWidth") <= width
    assert not pg.errors, pg.errors
    assert not pg.outside, pg.outside


TOP = "rgb(253, 231, 37)"  # viridis at 1


def choose(view, n: int, value: str | None = None, label: str | None = None) -> None:
    "Choose in the view's n-th menu, which a view with one choice there shows disabled (already chosen)"
    menu = view.locator("select").nth(n)
    if menu.is_enabled():
        menu.select_option(value, label=label) if label else menu.select_option(value)
    else:
        now = menu.evaluate("m => [m.value, m.options[m.selectedIndex].text]")
        assert (label or value) in now, f"menu {n} holds {now}, disabled"


def visible(token: str) -> str:
    "A token as the explorer labels it: white space made visible"
    if token == "": return "\u2205"
    return "".join({" ": "\u2423", "\n": "\u23ce", "\t": "\u21e5", "\r": "\u240d", "\u00a0": "\u2423"}
                   .get(c, c) for c in token)


def cell_colour(view, i: int, j: int) -> str:
    return view.locator(f".tnb-panel .tnb-cell[data-i='{i}'][data-j='{j}']").first.evaluate(
        "e => e.style.background")


def test_explorers_work(desk):
    "At 1280 px: see check_explorers."
    check_explorers(desk)


def test_explorers_work_on_a_phone(phone):
    "At 390 px: see check_explorers."
    check_explorers(phone)


def test_dark_mode_follows_the_system_and_the_toggle_is_remembered(server, browser):
    """A reader whose system prefers dark gets the dark theme; the navbar's toggle switches to light, and the choice
    holds on the next page and after a reload, against the system's preference."""
    ctx = browser.new_context(viewport={"width": 1280, "height": 900}, color_scheme="dark")
    pg = ctx.new_page()
    errors = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.goto(f"{server}/attention.html", wait_until="load")
    is_dark = "document.documentElement.classList.contains('quarto-dark')"
    pg.wait_for_function(is_dark, timeout=5_000)
    pg.locator(".quarto-color-scheme-toggle").first.click()
    pg.wait_for_function(f"!{is_dark}", timeout=5_000)
    pg.goto(f"{server}/multihead.html", wait_until="load")
    pg.wait_for_timeout(200)
    assert not pg.evaluate(is_dark), "the choice of light was not remembered on the next page"
    pg.reload(wait_until="load")
    pg.wait_for_timeout(200)
    assert not pg.evaluate(is_dark)
    pg.locator(".quarto-color-scheme-toggle").first.click()
    pg.wait_for_function(is_dark, timeout=5_000)
    assert not errors, errors
    ctx.close()


@pytest.mark.parametrize("query, first", [("MultiHeadAttention", "multihead.html"),
                                          ("greedy_search", "decoding.html"),
                                          ("padding_mask", "masking.html")])
def test_search_ranks_chapters_first_with_plain_text_snippets(page, server, query, first):
    """A name explained in a chapter: the chapter's result comes before any copy on the API page, and no snippet
    shows TeX (backslashes, dollar signs)."""
    page.goto(f"{server}/index.html", wait_until="load")
    box = page.locator("#quarto-search input").first
    if not box.is_visible():
        page.locator("#quarto-search .sd-search-toggle, #quarto-search button").first.click()
    box.fill(query)
    page.wait_for_selector(".search-result", timeout=5_000)
    hrefs = page.eval_on_selector_all(".search-result", "els => els.map(e => e.getAttribute('href'))")
    pages = [h.split("#")[0].split("/")[-1] for h in hrefs]
    assert pages[0] == first, f"{query!r}: {pages}"
    if "api.html" in pages:
        assert pages.index("api.html") > max(i for i, p in enumerate(pages) if p == first)
    box.fill("brings the variance back")  # a sentence of chapter 2 around \\(\\sqrt{d_k}\\)
    page.wait_for_function("Array.from(document.querySelectorAll('.search-result-text'))"
                           ".some(e => e.textContent.includes('variance'))", timeout=5_000)
    texts = page.eval_on_selector_all(".search-result-text", "els => els.map(e => e.textContent)")
    raw = [t for t in texts if re.search(r"\\[a-zA-Z]+|\\\(|\$", t)]
    assert not raw, f"TeX in search snippets: {raw[:3]}"
    assert any("√(d_k)" in t for t in texts), texts[:3]


@pytest.mark.parametrize("width, height", [(1280, 900), (390, 844)], ids=["desktop", "phone"])
def test_a_folded_answer_opens(server, browser, width, height):
    """Each chapter ends with questions whose answers are folded (<details><summary>Answer</summary>): on the
    attention chapter, an answer is hidden until its summary is clicked, then shown, inside the column."""
    ctx, pg = loaded(server, browser, "attention.html", width, height)
    try:
        folds = pg.locator("details:has(> summary)").filter(has_text="Answer")
        assert folds.count() >= 3, "the chapter's questions have no folded answers"
        fold = folds.first
        summary = fold.locator("summary").first
        answer = fold.locator("p").first
        summary.scroll_into_view_if_needed()
        assert fold.get_attribute("open") is None and not answer.is_visible(), "the answer is not folded"
        summary.click()
        pg.wait_for_function("d => d.open", arg=fold.element_handle(), timeout=5_000)
        assert answer.is_visible(), "clicking the summary did not show the answer"
        box = answer.bounding_box()
        assert box and box["height"] > 0 and box["x"] >= 0 and box["x"] + box["width"] <= width + 1, box
        assert answer.inner_text().strip(), "an empty answer"
        assert not pg.errors, pg.errors
    finally:
        ctx.close()
