"""The site in a real browser: headless Debian Chromium driven by Playwright, pages served from localhost.

Each page must load with its title, its maths typeset by the local KaTeX (no raw TeX left visible), its plots
decoded with a non-zero size, no console error, and no request leaving localhost. Screenshots of every page are
saved in artifacts/screenshots/ (CI keeps them as artifacts)."""
import json, os, re, shutil
from urllib.parse import urlparse
import pytest
from conftest import ROOT, chapter_pages, all_pages, serve

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
    ctx = browser.new_context(viewport={"width": width, "height": height})
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


def at_width(pg, width: int, height: int):
    """The loaded page at this viewport. Resizing runs what a narrower screen runs (media queries, and the site's
    script listens for them: margin notes move, the sidebar folds), without loading the page again."""
    if pg.viewport_size != {"width": width, "height": height}:
        pg.set_viewport_size({"width": width, "height": height})
        pg.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
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
    if os.environ.get("TNB_SCREENSHOTS") == "1":  # for a person to look at; 1-3 s a page, so on request
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / f"{name.removesuffix('.html')}.png"), full_page=True)
    assert not page.errors, f"console errors: {page.errors}"
    assert not page.outside, f"requests left localhost: {page.outside}"


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


FIGURES = """() => {
    const col = document.querySelector('main').clientWidth;
    return Array.from(document.querySelectorAll('main .cell-output img')).filter(i => i.offsetParent).map(i => {
        const r = i.getBoundingClientRect(), box = i.closest('.figure-scroll');
        const natural = +i.getAttribute('width') || 0, scale = natural ? r.width / natural : 0;
        return {alt: i.getAttribute('alt') || i.getAttribute('src').slice(0, 40), sized: i.classList.contains('tnb-figure'),
                width: r.width, natural: natural,
                cell: i.dataset.minCell ? +i.dataset.minCell * scale : null,
                label: i.dataset.minLabel ? +i.dataset.minLabel * scale : null,
                cut: r.width > col + 1 && !(box && getComputedStyle(box).overflowX === 'auto' && box.clientWidth <= col + 1)};
    });
}"""


def check_figures(pg) -> list[str]:
    """Every plot of the page is shown at its natural size (the width the helpers sized it for, which the site builder
    writes on the image), never scaled down; at that size its smallest heatmap cell and smallest text, as the PNG
    records them, are at least MIN_CELL_PX and MIN_LABEL_PX CSS px; a plot wider than the column scrolls in its own
    box, never cut off. Returns what is wrong, and prints the smallest sizes found."""
    from transformer_nb.plotting import MIN_CELL_PX, MIN_LABEL_PX
    width = pg.viewport_size["width"]
    figures = pg.evaluate(FIGURES)
    bad, cells, labels = [], [], []
    for f in figures:
        where = f"{pg.name} at {width} px, {f['alt']!r}"
        if not f["sized"]:
            bad.append(f"{where}: a plot without its natural size (re-execute the notebook)")
            continue
        if f["width"] < f["natural"] - 0.5:
            bad.append(f"{where}: shown {f['width']:.0f} px wide, smaller than its natural {f['natural']} px")
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
    "At 390 px: see check_figures (a plot wider than the screen scrolls in its box, at its natural size)."
    bad = check_figures(phone)
    assert not bad, "\n".join(bad)


EXPLORERS = {"plotting.html": 2, "pronouns.html": 1, "numbers.html": 1, "training.html": 1, "decoding.html": 1}


def check_explorers(pg) -> None:
    """The attention explorers of the page (chapter 0a's `attention_explorer`), where EXPLORERS says they are: every
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
    view.locator("select").nth(0).select_option(label=kind["name"])
    view.locator("select").nth(1).select_option("0")
    view.locator("select").nth(2).select_option("0")
    assert view.locator(".tnb-row").all_inner_texts() == kind["rows"]
    view.locator(".tnb-row[data-i='1']").click()
    row = kind["w"][0][0][1]  # layer 0, head 0, query 1
    shown = [float(t) for t in view.locator(".tnb-readout .tnb-chips .tnb-num").all_inner_texts()]
    assert shown == [v / 10 ** data["decimals"] for v in row]
    width = pg.viewport_size["width"]
    assert pg.evaluate("document.documentElement.scrollWidth") <= width
    assert not pg.errors, pg.errors
    assert not pg.outside, pg.outside


def test_explorers_work(desk):
    "At 1280 px: see check_explorers."
    check_explorers(desk)


def test_explorers_work_on_a_phone(phone):
    "At 390 px: see check_explorers."
    check_explorers(phone)
