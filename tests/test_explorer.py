"""The attention explorer (`transformer_nb.explorer.attention_explorer`).

Unit tests: its HTML loads nothing from anywhere, embeds the tensors' values, escapes
what it embeds, and rejects bad input naming the argument. Browser tests (headless
Debian chromium, pages served from localhost): a page with two views and a page with
one, at 1280 px and 390 px; choosing and pointing change what is shown, the numbers
shown are the tensor's, no request leaves localhost, no console error, nothing
overflows. The explorers on the built site's pages are checked by test_browser.py, on
the pages it has loaded anyway (check_explorers). With TNB_SCREENSHOTS=1,
screenshots go to artifacts/explorer/ (gitignored)."""
import json
import os
import re
import shutil
from html.parser import HTMLParser
from importlib import resources
from urllib.parse import urlparse

import pytest
import torch

from conftest import ROOT, serve
from transformer_nb.explorer import attention_explorer

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]
SHOTS = ROOT / "artifacts" / "explorer"
SRC = "the animal didn't cross the street because it was too tired".split()
TGT = "<bos> l' animal n' a pas traversé la rue".split()
LONG = SRC + ("and so it stayed where it was , under the tree by the river until "
              "nightfall .").split()  # 28 tokens: wider than a phone


def softmax_maps(L=2, H=4, seed=0) -> dict:
    "Random attention maps of the three kinds, (L, H, T, S); the decoder's is causal"
    g = torch.Generator().manual_seed(seed)
    def rnd(T, S, causal=False):
        s = torch.randn(L, H, T, S, generator=g) * 2
        if causal:
            s = s.masked_fill(~torch.ones(T, S, dtype=torch.bool).tril(), float("-inf"))
        return s.softmax(-1)
    return {"encoder self": rnd(len(SRC), len(SRC)),
            "decoder self": rnd(len(TGT), len(TGT), causal=True),
            "cross": rnd(len(TGT), len(SRC))}


def embedded(html: str) -> dict:
    "The JSON data that a view embeds"
    m = re.search(r'<script type="application/json" class="tnb-data">(.*?)</script>',
                  html, re.S)
    assert m, "no data script in the view"
    return json.loads(m.group(1))


# ------------------------------------------------------------------------- unit tests

def test_nothing_is_loaded_from_anywhere():
    "No URL at all; the only src is the data: URL of the static picture; no CSS import"
    html = attention_explorer(softmax_maps(), SRC, TGT, title="t")._repr_html_()
    assert not re.search(r"https?://", html), re.findall(r".{40}https?://.{9}", html)
    links = []
    class Links(HTMLParser):
        def handle_starttag(self, tag, attrs):
            links.extend(v for k, v in attrs if k in ("src", "href", "srcset", "data"))
    Links().feed(html)
    assert links and all(v.startswith("data:image/png;base64,") for v in links), links
    for word in ("@import", "url(", "fetch(", "XMLHttpRequest", "import(", "<link"):
        assert word not in html, word
    assert html.count("<script") == html.count("</script>") == 2  # data, then code


def test_embedded_weights_equal_the_tensors():
    maps = softmax_maps()
    data = embedded(attention_explorer(maps, SRC, TGT).html)
    assert data["decimals"] == 3
    assert [k["name"] for k in data["kinds"]] == list(maps)
    for k in data["kinds"]:
        w = torch.tensor(k["w"], dtype=torch.float64) / 10 ** data["decimals"]
        assert w.shape == maps[k["name"]].shape
        want = maps[k["name"]].double()
        torch.testing.assert_close(w, want, atol=0.5e-3 + 1e-9, rtol=0)
        assert k["max"] == torch.tensor(k["w"]).max().item()
    enc, dec, cross = data["kinds"]
    assert enc["rows"] == enc["cols"] == SRC and dec["rows"] == dec["cols"] == TGT
    assert cross["rows"] == TGT and cross["cols"] == SRC  # target queries, source keys


def test_written_labels_a_decoders_rows_by_the_piece_being_written():
    "With written=, the decoder's rows (its self-attention and cross's queries) are the pieces each position writes"
    written = TGT[1:] + ["<eos>"]
    ex = attention_explorer(softmax_maps(), SRC, TGT, kind="cross", written=written)
    enc, dec, cross = embedded(ex.html)["kinds"]
    assert dec["rows"] == cross["rows"] == written and dec["cols"] == TGT and cross["cols"] == SRC
    assert dec["rowsAre"] == cross["rowsAre"] == "the piece being written"
    assert enc["rows"] == SRC and enc["rowsAre"] == "source tokens"     # the encoder's rows stay as they are
    fig = ex._fallback_figure()  # the static picture names its rows the same way
    assert fig.axes[0].get_ylabel() == "row: the piece being written"
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == written
    with pytest.raises(ValueError, match="written has 3 tokens"):
        attention_explorer(softmax_maps(), SRC, TGT, written=written[:3])


def test_a_three_dimensional_map_is_one_layer_and_decimals_set_the_rounding():
    w = torch.softmax(torch.randn(2, 3, 3), -1)
    data = embedded(attention_explorer({"self": w}, "a b c".split(), decimals=2).html)
    assert len(data["kinds"][0]["w"]) == 1 and data["decimals"] == 2
    got = torch.tensor(data["kinds"][0]["w"][0]) / 100
    torch.testing.assert_close(got, w, atol=0.005 + 1e-9, rtol=0)


def test_tokens_and_title_are_escaped_and_come_back_unchanged():
    toks = ["</script>", "<b>&amp;", '"q"', "é"]
    html = attention_explorer(torch.full((1, 4, 4), 0.25), toks, title="<i>x</i>").html
    data = html.split('class="tnb-data">', 1)[1].split("</script>", 1)[0]
    assert "<" not in data and embedded(html)["kinds"][0]["rows"] == toks
    assert "<i>x</i>" not in html and "&lt;i&gt;x&lt;/i&gt;" in html


def test_the_html_is_deterministic_and_the_fallback_optional():
    maps = softmax_maps()
    a = attention_explorer(maps, SRC, TGT).html
    assert a == attention_explorer(maps, SRC, TGT).html
    assert a.count("<img ") == 1 and "data:image/png;base64," in a
    assert "<img" not in attention_explorer(maps, SRC, TGT, fallback=False).html


@pytest.mark.parametrize("call, exc, words", [
    (lambda m: attention_explorer(m, SRC[:-1], TGT), ValueError,
     "src_tokens has 10 tokens, but maps['encoder self'] of shape (2, 4, 11, 11)"),
    (lambda m: attention_explorer(m, SRC, TGT + ["x"]), ValueError,
     "tgt_tokens has 10 tokens, but maps['decoder self']"),
    (lambda m: attention_explorer(m, SRC), ValueError,
     "maps['decoder self'] needs tgt_tokens"),
    (lambda m: attention_explorer({"cross": m["cross"]}, SRC, TGT[:3]), ValueError,
     "tgt_tokens has 3 tokens, but maps['cross'] of shape (2, 4, 9, 11) has 9 queries"),
    (lambda m: attention_explorer({"x": m["cross"][0, 0]}, SRC), ValueError,
     "maps['x'] must have shape (L, H, T, S) or (H, T, S), got (9, 11)"),
    (lambda m: attention_explorer([m["cross"]], SRC), TypeError,
     "maps must be a non-empty dict of {name: tensor}, got list"),
    (lambda m: attention_explorer({}, SRC), TypeError, "got dict of length 0"),
    (lambda m: attention_explorer({"x": m["cross"].tolist()}, SRC), TypeError,
     "maps['x'] must be a torch.Tensor, got list"),
    (lambda m: attention_explorer({"x": m["encoder self"] * float("nan")}, SRC),
     ValueError, "maps['x'] holds NaN"),
    (lambda m: attention_explorer(m, SRC, TGT, kind="encoder"), ValueError,
     "kind must be one of ['encoder self', 'decoder self', 'cross'], got 'encoder'"),
    (lambda m: attention_explorer(m, SRC, TGT, layer=2), ValueError,
     "layer must be in [-2, 2), got 2"),
    (lambda m: attention_explorer(m, SRC, TGT, head=4), ValueError,
     'head must be "all" or in [-4, 4), got 4'),
    (lambda m: attention_explorer(m, SRC, TGT, scale="all"), ValueError,
     'scale must be "head" or "row", got \'all\''),
])
def test_bad_input_names_the_argument(call, exc, words):
    with pytest.raises(exc) as e:
        call(softmax_maps())
    assert words in str(e.value), str(e.value)


def test_the_assets_ship_inside_the_package():
    "explorer.js/.css are package data, read with importlib.resources, put in each view"
    pkg = resources.files("transformer_nb")
    js = (pkg / "explorer.js").read_text(encoding="utf-8")
    css = (pkg / "explorer.css").read_text(encoding="utf-8")
    assert "window.__tnbExplorer1 =" in js and ".tnb-explorer" in css
    html = attention_explorer(softmax_maps(), SRC, TGT).html
    assert html.count("window.__tnbExplorer1 =") == 1
    assert "if(!window.__tnbExplorer1)" in html  # defined once per page
    assert "tnb-explorer-css" in html and ".tnb-explorer .tnb-cell" in html


# ------------------------------------------------------------------------ the browser

@pytest.fixture(scope="module")
def maps():
    "Three kinds of maps for the first view, and a long one for the second"
    g = torch.Generator().manual_seed(1)
    long = torch.randn(2, 2, len(LONG), len(LONG), generator=g).mul(3).softmax(-1)
    return {**softmax_maps(), "long": long}


@pytest.fixture(scope="module")
def site(tmp_path_factory, maps):
    "A page with two views, and a page with the second view alone, served on localhost"
    d = tmp_path_factory.mktemp("explorer")
    three = {k: v for k, v in maps.items() if k != "long"}
    one = attention_explorer(three, SRC, TGT, title="A random model")
    two = attention_explorer({"encoder self": maps["long"]}, LONG,
                             title="A long sentence, two heads", head="all", layer=-1)
    page = ("<!doctype html><html><head><meta charset='utf-8'><meta name='viewport' "
            "content='width=device-width, initial-scale=1'><title>explorer</title>"
            "</head><body style='margin:0 auto;max-width:760px;padding:0 12px'>"
            "<h1>Two views</h1><p>Some prose before.</p>{}<p>Some prose between.</p>{}"
            "</body></html>")
    (d / "two.html").write_text(page.format(one.html, two.html), encoding="utf-8")
    (d / "alone.html").write_text(page.format("", two.html), encoding="utf-8")
    httpd, url = serve(d)
    yield url
    httpd.shutdown()


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright
    if not shutil.which(CHROMIUM):
        pytest.fail("chromium is not installed (apt-get install -y chromium)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


def open_page(browser, url, width, **ctx):
    "A page `width` px wide; it records errors and requests, and blocks those not local"
    context = browser.new_context(viewport={"width": width, "height": 900}, **ctx)
    pg = context.new_page()
    pg.errors, pg.requests, pg.outside = [], [], []
    pg.on("console", lambda m: pg.errors.append(m.text) if m.type == "error" else None)
    pg.on("pageerror", lambda e: pg.errors.append(str(e)))
    pg.on("request", lambda r: pg.requests.append(r.url))
    def guard(route):
        url = route.request.url
        local = urlparse(url).hostname in ("127.0.0.1", "localhost")
        if url.startswith("data:") or local:
            return route.continue_()
        pg.outside.append(url)
        return route.abort()
    pg.route("**/*", guard)
    pg.goto(url, wait_until="load")
    return pg


def screenshot(pg, name: str) -> None:
    "Save a full-page screenshot in artifacts/explorer/ for a person to look at, with TNB_SCREENSHOTS=1 (1-2 s each)"
    if os.environ.get("TNB_SCREENSHOTS") == "1":
        SHOTS.mkdir(parents=True, exist_ok=True)
        pg.screenshot(path=str(SHOTS / name), full_page=True)


def colours(view) -> list[str]:
    "The colours of a view's cells, in order"
    js = "els => els.map(e => e.style.background)"
    return view.locator(".tnb-cell").evaluate_all(js)


def shown(view, where=".tnb-readout .tnb-chips .tnb-num") -> list[float]:
    "The numbers the readout of a view shows"
    return [float(t) for t in view.locator(where).all_inner_texts()]


def rounded(w) -> list[float]:
    return [round(float(x), 3) for x in w]


def test_browser_choosing_and_pointing(browser, site, maps):
    pg = open_page(browser, f"{site}/two.html", 1280)
    assert pg.locator(".tnb-explorer[data-tnb-ready]").count() == 2
    assert pg.locator(".tnb-fallback").count() == 0  # the static pictures give way
    assert pg.locator("style#tnb-explorer-css").count() == 1  # one stylesheet a page
    one, two = pg.locator(".tnb-explorer").nth(0), pg.locator(".tnb-explorer").nth(1)
    assert one.locator(".tnb-cell").count() == len(SRC) ** 2
    assert one.locator(".tnb-panel").count() == 1
    assert two.locator(".tnb-panel").count() == 2  # started on all heads
    assert one.locator(".tnb-readout .tnb-hint").count() == 1
    # choosing another layer, another head, another kind changes what is shown
    start = colours(one)
    one.locator("select").nth(1).select_option("1")
    layer1 = colours(one)
    assert layer1 != start
    one.locator("select").nth(2).select_option("2")
    assert colours(one) != layer1
    one.locator("select").nth(0).select_option(label="cross")
    assert one.locator(".tnb-caption").inner_text().startswith("rows: queries (target tokens)")
    assert one.locator(".tnb-row").all_inner_texts() == TGT
    assert one.locator(".tnb-col").all_inner_texts() == SRC
    assert one.locator(".tnb-cell").count() == len(TGT) * len(SRC)
    # pointing at a query token shows its row of weights, which are the tensor's
    one.locator(".tnb-row[data-i='3']").hover()
    assert shown(one) == rounded(maps["cross"][1, 2, 3])
    assert one.locator(".tnb-cell.tnb-hl").count() == len(SRC)  # its row lights up
    assert one.locator(".tnb-row.tnb-hl").inner_text() == TGT[3]
    # pointing at a cell names the pair, shows its weight, lights its row and column
    one.locator(".tnb-cell[data-i='5'][data-j='7']").hover()
    assert shown(one, ".tnb-rcell .tnb-num") == rounded([maps["cross"][1, 2, 5, 7]])
    assert one.locator(".tnb-cell.tnb-hl").count() == len(SRC) + len(TGT) - 1
    # the keyboard: a key token takes the focus, the arrow walks on, the readout follows
    one.locator(".tnb-col[data-j='0']").focus()
    pg.keyboard.press("ArrowRight")
    assert pg.evaluate("document.activeElement.getAttribute('data-j')") == "1"
    assert shown(one) == rounded(maps["cross"][1, 2, :, 1])
    # all heads at once: a panel per head, and a table of numbers with a row per head
    one.locator("select").nth(2).select_option("all")
    assert one.locator(".tnb-panel").count() == 4
    one.locator(".tnb-panel[data-h='2'] .tnb-row[data-i='4']").hover()
    for h in range(4):
        where = f".tnb-table tr[data-h='{h}'] .tnb-num"
        assert shown(one, where) == rounded(maps["cross"][1, h, 4])
    # the other view did not move, and answers on its own
    assert two.locator(".tnb-readout .tnb-hint").count() == 1
    two.locator(".tnb-panel[data-h='1'] .tnb-cell[data-i='2'][data-j='6']").hover()
    expected = rounded([maps["long"][1, 1, 2, 6]])
    assert shown(two, ".tnb-rcell .tnb-num") == expected
    # legible: cells of at least 14 px, text of at least 11 px
    sizes = pg.evaluate("""() => Array.from(document.querySelectorAll('.tnb-cell'))
        .map(c => { const r = c.getBoundingClientRect();
                    return Math.min(r.width, r.height); })""")
    assert min(sizes) >= 14, min(sizes)
    fonts = pg.evaluate("""() => Array.from(document.querySelectorAll(
        '.tnb-tok, .tnb-explorer select, .tnb-num, .tnb-caption, .tnb-ptitle, ' +
        '.tnb-chip-t, .tnb-readout p'))
        .map(e => parseFloat(getComputedStyle(e).fontSize))""")
    assert min(fonts) >= 11, min(fonts)
    screenshot(pg, "explorer-1280.png")
    assert not pg.errors, pg.errors
    assert not pg.outside, pg.outside
    assert all(urlparse(u).hostname == "127.0.0.1" for u in pg.requests), pg.requests
    pg.context.close()


def test_browser_at_390_px_nothing_overflows_and_a_tap_works(browser, site, maps):
    pg = open_page(browser, f"{site}/two.html", 390, has_touch=True, is_mobile=True,
                   device_scale_factor=2)
    def inside(box): return box["x"] >= 0 and box["x"] + box["width"] <= 390
    assert pg.evaluate("document.documentElement.scrollWidth") <= 390
    views = pg.locator(".tnb-explorer")
    assert all(inside(views.nth(v).bounding_box()) for v in range(2))
    one = pg.locator(".tnb-explorer").nth(0)
    assert all(inside(one.locator("select").nth(k).bounding_box()) for k in range(3))
    one.locator(".tnb-row[data-i='7']").tap()
    assert shown(one) == rounded(maps["encoder self"][0, 0, 7])
    one.locator("select").nth(2).select_option("all")
    assert pg.evaluate("document.documentElement.scrollWidth") <= 390
    one.locator(".tnb-panel[data-h='3'] .tnb-cell[data-i='1'][data-j='2']").tap()
    expected = rounded([maps["encoder self"][0, 3, 1, 2]])
    assert shown(one, ".tnb-rcell .tnb-num") == expected
    assert pg.evaluate("document.documentElement.scrollWidth") <= 390
    # a long sentence scrolls inside its own box, and its last key can still be reached
    two = views.nth(1)
    box = two.locator(".tnb-scroll").first
    assert box.evaluate("e => e.scrollWidth > e.clientWidth + 100")
    last = len(LONG) - 1
    two.locator(f".tnb-panel[data-h='0'] .tnb-col[data-j='{last}']").tap()
    assert box.evaluate("e => e.scrollLeft") > 0
    where = ".tnb-table tr[data-h='0'] .tnb-num"
    assert shown(two, where) == rounded(maps["long"][1, 0, :, last])
    assert pg.evaluate("document.documentElement.scrollWidth") <= 390
    screenshot(pg, "explorer-390.png")
    assert not pg.errors, pg.errors
    assert not pg.outside, pg.outside
    pg.context.close()


def test_browser_a_view_alone_on_its_page_works(browser, site, maps):
    "The second view carries everything it needs: alone on a page, it draws and answers"
    pg = open_page(browser, f"{site}/alone.html", 1280)
    view = pg.locator(".tnb-explorer")
    assert view.count() == 1 and view.get_attribute("data-tnb-ready") == "1"
    view.locator(".tnb-panel[data-h='0'] .tnb-col[data-j='3']").hover()
    where = ".tnb-table tr[data-h='0'] .tnb-num"
    assert shown(view, where) == rounded(maps["long"][1, 0, :, 3])
    assert not pg.errors and not pg.outside
    pg.context.close()


# --------------------------------------- colour scales, keyboard, whitespace, the readout

TOP = "rgb(253, 231, 37)"  # viridis at 1: the brightest cell of a scale


def brightest(view, per: str) -> list[str]:
    """Per panel (per="head") or per row of each panel (per="row"): the colour of the cell
    with the largest weight, read from the weights the view embeds"""
    return view.evaluate("""(root, per) => {
        const data = JSON.parse(root.querySelector('script.tnb-data').textContent);
        const sel = root.querySelectorAll('select');
        const k = data.kinds[+sel[0].value], L = +sel[1].value, out = [];
        root.querySelectorAll('.tnb-panel').forEach(p => {
            const m = k.w[L][+p.dataset.h];
            const groups = per === 'row' ? m.map((r, i) => r.map((v, j) => [v, i, j]))
                : [m.flatMap((r, i) => r.map((v, j) => [v, i, j]))];
            groups.forEach(g => {
                const [v, i, j] = g.reduce((a, b) => b[0] > a[0] ? b : a);
                if (v > 0) out.push(p.querySelector(`.tnb-cell[data-i='${i}'][data-j='${j}']`)
                                    .style.background);
            });
        });
        return out;
    }""", per)


def test_browser_colour_per_head_by_default_per_row_on_request(browser, site, maps):
    """Each head on its own scale: the largest weight of every panel is the brightest
    colour, and the legend names that top; per row, the largest of every row is"""
    pg = open_page(browser, f"{site}/two.html", 1280)
    one = pg.locator(".tnb-explorer").first
    one.locator("select").nth(0).select_option(label="cross")
    one.locator("select").nth(2).select_option("all")
    assert one.locator(".tnb-app").get_attribute("data-scale") == "head"
    got = brightest(one, "head")
    assert got == [TOP] * 4, got
    for h in range(4):  # each panel's title says what its brightest colour stands for
        top = f"{maps['cross'][0, h].max().item():.3f}"
        assert one.locator(f".tnb-panel[data-h='{h}'] .tnb-ptitle").inner_text().endswith(top)
    one.locator("select").nth(2).select_option("1")
    top = f"{maps['cross'][0, 1].max().item():.3f}"
    assert one.locator(".tnb-legend").inner_text().replace("\n", " ").find(top) >= 0
    one.locator("select").nth(3).select_option("row")  # the colour select
    assert one.locator(".tnb-app").get_attribute("data-scale") == "row"
    got = brightest(one, "row")
    assert got == [TOP] * len(TGT), got
    assert "row" in one.locator(".tnb-legend").inner_text()
    # the readout's swatches follow the scale: the row's largest is the brightest
    one.locator(".tnb-row[data-i='2']").hover()
    j = int(maps["cross"][0, 1, 2].argmax())
    sw = one.locator(f".tnb-readout .tnb-chip[data-j='{j}'] .tnb-swatch")
    assert sw.evaluate("e => e.style.background") == TOP
    assert not pg.errors, pg.errors
    pg.context.close()


def test_browser_one_tab_stop_and_the_arrows_reach_every_cell(browser, site, maps):
    """The grids of a view are one Tab stop (roving tabindex); from it the arrow keys
    reach every token and cell, across the panels of every head"""
    pg = open_page(browser, f"{site}/two.html", 1280)
    one = pg.locator(".tnb-explorer").first
    one.locator("select").nth(2).select_option("all")
    assert one.locator(".tnb-panels [tabindex='0']").count() == 1
    # Tab from the last select enters the grids once; the next Tab leaves the view
    one.locator("select").last.focus()
    pg.keyboard.press("Tab")
    inside = "e => e.contains(document.activeElement)"
    assert one.locator(".tnb-panels").evaluate(inside)
    pg.keyboard.press("Tab")
    assert not one.locator(".tnb-panels").evaluate(inside)
    pg.keyboard.press("Shift+Tab")
    assert one.locator(".tnb-panels").evaluate(inside)
    # the arrows: to the last cell of the first head, then across into the next head
    T, S = len(SRC), len(SRC)
    pg.keyboard.press("End")
    for _ in range(T):
        pg.keyboard.press("ArrowDown")
    active = """() => { const a = document.activeElement;
        return [a.closest('.tnb-panel').dataset.h, a.dataset.i, a.dataset.j]; }"""
    assert pg.evaluate(active) == ["0", str(T - 1), str(S - 1)]
    assert shown(one, ".tnb-rcell .tnb-num") == rounded([maps["encoder self"][0, 0, T - 1, S - 1]])
    pg.keyboard.press("ArrowRight")  # past the edge: the next head's row token
    assert pg.evaluate(active) == ["1", str(T - 1), None]
    pg.keyboard.press("ArrowRight")
    assert pg.evaluate(active) == ["1", str(T - 1), "0"]
    pg.keyboard.press("PageDown")
    pg.keyboard.press("PageDown")
    assert pg.evaluate(active)[0] == "3"
    for _ in range(T):
        pg.keyboard.press("ArrowUp")  # up to the key tokens' row
    assert pg.evaluate(active) == ["3", None, "0"]
    assert one.locator(".tnb-panels [tabindex='0']").count() == 1
    # every cell of every head is a place the cursor can stand
    n = one.locator(".tnb-panels .tnb-cell[tabindex]").count()
    assert n == 4 * T * S
    assert not pg.errors, pg.errors
    pg.context.close()


def test_browser_whitespace_tokens_have_visible_labels(browser, tmp_path):
    "A space, a newline and an empty token are labelled ␣, ⏎ and ∅, and named for readers"
    toks = ["a", " ", "b", "\n", ""]
    view = attention_explorer(torch.full((1, 5, 5), 0.2), toks, title="spaces")
    (tmp_path / "s.html").write_text(f"<!doctype html><meta charset='utf-8'>{view.html}",
                                     encoding="utf-8")
    httpd, url = serve(tmp_path)
    try:
        pg = open_page(browser, f"{url}/s.html", 800)
        rows = pg.locator(".tnb-row").all_inner_texts()
        assert rows == ["a", "\u2423", "b", "\u23ce", "\u2205"], rows
        assert pg.locator(".tnb-col").all_inner_texts() == rows
        assert pg.locator(".tnb-row[data-i='1']").get_attribute("aria-label") == "query 1: space"
        pg.locator(".tnb-row[data-i='3']").hover()
        assert "\u23ce" in pg.locator(".tnb-rhead").inner_text()
        assert not pg.errors, pg.errors
        pg.context.close()
    finally:
        httpd.shutdown()


def test_browser_a_tapped_row_is_read_where_the_reader_looks(browser, site, maps):
    """At 390 px, every head at once: a tap on a row of the first head shows its numbers
    on the screen, without scrolling (the readout stays at the bottom of the screen)"""
    pg = open_page(browser, f"{site}/two.html", 390, has_touch=True, is_mobile=True)
    one = pg.locator(".tnb-explorer").first
    one.locator("select").nth(2).select_option("all")
    row = one.locator(".tnb-panel[data-h='0'] .tnb-row[data-i='1']")
    row.scroll_into_view_if_needed()
    row.tap()
    box, vh = one.locator(".tnb-readout").bounding_box(), 900
    assert box["y"] < vh and box["y"] + min(box["height"], 60) <= vh, box
    assert shown(one, ".tnb-table tr[data-h='0'] .tnb-num") == rounded(maps["encoder self"][0, 0, 1])
    assert not pg.errors, pg.errors
    pg.context.close()


def test_a_view_can_open_on_colours_per_row(browser, tmp_path):
    "scale='row' is embedded (per head, the default, is not) and the view opens on it"
    w = torch.softmax(torch.randn(1, 2, 4, 4, generator=torch.Generator().manual_seed(3)), -1)
    toks = list("abcd")
    assert "scale" not in attention_explorer(w, toks).data
    view = attention_explorer(w, toks, scale="row")
    assert view.data["scale"] == "row"
    (tmp_path / "r.html").write_text(f"<!doctype html><meta charset='utf-8'>{view.html}",
                                     encoding="utf-8")
    httpd, url = serve(tmp_path)
    try:
        pg = open_page(browser, f"{url}/r.html", 800)
        root = pg.locator(".tnb-explorer")
        assert root.locator(".tnb-app").get_attribute("data-scale") == "row"
        assert root.locator("select").nth(3).input_value() == "row"
        assert brightest(root, "row") == [TOP] * 4
        assert not pg.errors, pg.errors
        pg.context.close()
    finally:
        httpd.shutdown()


# ------------------------------------------------------------- heads coloured by a score

from transformer_nb.explorer import colour_heads  # noqa: E402

RED, BLUE, WHITE = "rgb(103, 0, 31)", "rgb(5, 48, 97)", "rgb(247, 246, 246)"  # RdBu_r: +1, -1, 0


def scored_page(tmp_path, maps):
    "A page with one view whose decoder self and cross heads carry made-up scores"
    three = {k: v for k, v in maps.items() if k != "long"}
    scores = {"cross": torch.tensor([[0.5, -2.0, 0.0, 1.0], [4.0, -0.25, 2.0, 0.1]]),
              "decoder self": torch.tensor([[0.0, 0.0, 0.0, 0.0], [-1.0, 0.0, 0.0, 3.0]])}
    view = colour_heads(attention_explorer(three, SRC, TGT, kind="cross", layer=1, head=0,
                                           title="scored"), scores, "attribution", "logits")
    page = ("<!doctype html><html><head><meta charset='utf-8'><meta name='viewport' "
            "content='width=device-width, initial-scale=1'></head><body style='margin:0 auto;"
            "max-width:760px;padding:0 12px'><h1>Scores</h1>{}</body></html>")
    (tmp_path / "scored.html").write_text(page.format(view.html), encoding="utf-8")



def test_scores_are_embedded_rounded_and_checked():
    maps = softmax_maps()
    view = attention_explorer(maps, SRC, TGT)
    s = torch.tensor([[0.123456, -1.0, 2.0, 0.0], [1.0, 1.0, 1.0, -3.333333]])
    data = colour_heads(view, {"cross": s}, "dla", "logits", decimals=3).data
    assert data["scores"] == {"label": "dla", "unit": "logits", "decimals": 3,
                              "kinds": {"cross": [[0.123, -1.0, 2.0, 0.0], [1.0, 1.0, 1.0, -3.333]]}}
    assert data["kinds"] == view.data["kinds"] and "scores" not in view.data
    for call, exc, words in [
        (lambda: colour_heads(maps, {"cross": s}), TypeError, "view must be an AttentionExplorer"),
        (lambda: colour_heads(view, {}), TypeError, "scores must be a non-empty dict"),
        (lambda: colour_heads(view, {"x": s}), ValueError, "'x' is not a map of this view"),
        (lambda: colour_heads(view, {"cross": s.tolist()}), TypeError, "must be a torch.Tensor, got list"),
        (lambda: colour_heads(view, {"cross": s[:1]}), ValueError, "must have shape (L, H) = (2, 4)"),
        (lambda: colour_heads(view, {"cross": s * float("nan")}), ValueError, "holds NaN"),
        (lambda: colour_heads(view, {"cross": s}, decimals=-1), ValueError, "decimals must be"),
    ]:
        with pytest.raises(exc) as e:
            call()
        assert words in str(e.value), str(e.value)


def test_browser_heads_coloured_by_a_score(browser, tmp_path, maps):
    """A strip of every head of the kind shown, each with a swatch on one diverging scale (the largest magnitude of
    all kinds at the ends) and its signed score; a click or the keyboard (one Tab stop, arrows, Enter) shows the head;
    a kind without scores says so; at 390 px and in the dark theme of the page it fits and stays a light card"""
    scored_page(tmp_path, maps)
    httpd, url = serve(tmp_path)
    try:
        pg = open_page(browser, f"{url}/scored.html", 1280)
        view = pg.locator(".tnb-explorer")
        btn = lambda l, h: view.locator(f".tnb-hbtn[data-l='{l}'][data-h='{h}']")
        swatch = lambda l, h: btn(l, h).locator(".tnb-swatch").evaluate("e => e.style.background")
        assert view.locator(".tnb-hbtn").count() == 8  # cross: 2 layers of 4 heads
        assert btn(1, 0).locator(".tnb-num").inner_text() == "+4.00"
        assert btn(0, 1).locator(".tnb-num").inner_text() == "\u22122.00"
        assert swatch(1, 0) == RED and swatch(0, 2) == WHITE  # 4.0 is the top of the scale
        assert "attribution" in btn(0, 1).get_attribute("aria-label")
        assert btn(1, 0).get_attribute("aria-pressed") == "true"  # the head shown
        # a click shows that head: the selects follow, the panel is the head's map
        btn(0, 3).click()
        sel = view.locator("select")
        assert (sel.nth(1).input_value(), sel.nth(2).input_value()) == ("0", "3")
        assert btn(0, 3).get_attribute("aria-pressed") == "true"
        assert btn(1, 0).get_attribute("aria-pressed") == "false"
        view.locator(".tnb-row[data-i='2']").hover()
        assert shown(view) == rounded(maps["cross"][0, 3, 2])
        # the keyboard: one Tab stop, the arrows move it, Enter shows the head
        assert view.locator(".tnb-hbtn[tabindex='0']").count() == 1
        sel.last.focus()
        pg.keyboard.press("Tab")
        active = "() => [document.activeElement.dataset.l, document.activeElement.dataset.h]"
        assert pg.evaluate(active) == ["0", "3"]
        pg.keyboard.press("ArrowDown")
        pg.keyboard.press("Home")
        assert pg.evaluate(active) == ["1", "0"]
        pg.keyboard.press("Enter")
        assert (sel.nth(1).input_value(), sel.nth(2).input_value()) == ("1", "0")
        assert pg.evaluate(active) == ["1", "0"]  # the focus stays on the strip
        pg.keyboard.press("Tab")  # on to the grids
        assert view.locator(".tnb-panels").evaluate("e => e.contains(document.activeElement)")
        # every head at once: each panel's title carries its head's score
        sel.nth(2).select_option("all")
        assert view.locator(".tnb-hbtn[aria-pressed='true']").count() == 4
        titles = view.locator(".tnb-ptitle .tnb-pscore .tnb-num").all_inner_texts()
        assert titles == ["+4.00", "\u22120.25", "+2.00", "+0.10"]
        # another kind: its own scores on the same scale; a kind without any says so
        sel.nth(0).select_option(label="decoder self")
        assert btn(1, 3).locator(".tnb-num").inner_text() == "+3.00"
        assert swatch(1, 3) != RED and swatch(1, 0) != BLUE  # 3 and -1 of 4
        sel.nth(0).select_option(label="encoder self")
        assert view.locator(".tnb-hbtn").count() == 0
        assert "none for encoder self" in view.locator(".tnb-heads").inner_text()
        assert not pg.errors and not pg.outside, (pg.errors, pg.outside)
        pg.context.close()
        # a phone, dark theme: nothing wider than the screen, the view a light card with dark text
        pg = open_page(browser, f"{url}/scored.html", 390, has_touch=True, is_mobile=True,
                       color_scheme="dark")
        view = pg.locator(".tnb-explorer")
        assert pg.evaluate("document.documentElement.scrollWidth") <= 390
        box = view.locator(".tnb-hgrid").bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= 390, box
        view.locator(".tnb-hbtn[data-l='0'][data-h='1']").tap()
        assert view.locator("select").nth(2).input_value() == "1"
        looks = view.locator(".tnb-hbtn").first.evaluate(
            "e => [getComputedStyle(e).backgroundColor, getComputedStyle(e).color]")
        assert looks == ["rgb(255, 255, 255)", "rgb(31, 35, 40)"], looks
        font = view.locator(".tnb-hbtn .tnb-num").first.evaluate("e => parseFloat(getComputedStyle(e).fontSize)")
        assert font >= 11
        screenshot(pg, "explorer-scores-390-dark.png")
        assert not pg.errors and not pg.outside, (pg.errors, pg.outside)
        pg.context.close()
    finally:
        httpd.shutdown()


def test_the_papers_name_for_cross_attention_gets_source_keys():
    "'encoder-decoder attention' contains 'decoder': it is cross-attention all the same"
    from transformer_nb.explorer import _token_args
    for name in ("cross", "encoder-decoder attention", "Memory attention", "source-target"):
        assert _token_args(name) == ("tgt_tokens", "src_tokens"), name
    assert _token_args("decoder self") == ("tgt_tokens", "tgt_tokens")
    assert _token_args("encoder self") == ("src_tokens", "src_tokens")
