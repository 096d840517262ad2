"""Contrast of the site's text, measured in the browser as a reader's eyes meet it (computed colours, alpha laid over
the background it sits on): links in the prose at 4.5:1 or more in both themes (WCAG AA for body text), and in the
dark theme headings a colour of their own, apart from the body text's, at 4.5:1 or more as well."""
import shutil

import pytest

from conftest import serve

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
PAGES = ["index.html", "attention.html", "gpt.html"]

MEASURE = """() => {
  const rgba = s => { const v = s.match(/[\\d.]+/g).map(Number); return v.length === 3 ? [...v, 1] : v; };
  const over = (c, b) => [0, 1, 2].map(i => c[i] * c[3] + b[i] * (1 - c[3]));
  const lum = c => { const a = c.map(v => { v /= 255; return v <= 0.03928 ? v / 12.92 :
                                             Math.pow((v + 0.055) / 1.055, 2.4); });
                     return 0.2126 * a[0] + 0.7152 * a[1] + 0.0722 * a[2]; };
  const ratio = (x, y) => { const [l1, l2] = [lum(x), lum(y)].sort((a, b) => b - a);
                            return (l1 + 0.05) / (l2 + 0.05); };
  const background = el => {
    const layers = [];
    for (; el; el = el.parentElement) {
      const c = rgba(getComputedStyle(el).backgroundColor);
      if (c[3] > 0) { layers.push(c); if (c[3] === 1) break; }
    }
    return layers.reverse().reduce((b, c) => over(c, b), [255, 255, 255]);
  };
  const seen = (el, prop) => { const b = background(el);
                               return [over(rgba(getComputedStyle(el)[prop]), b), b]; };
  const links = [...document.querySelectorAll("main p a[href], main li a[href], main td a[href]")]
    .filter(a => a.offsetParent !== null && a.textContent.trim())
    .map(a => { const [c, b] = seen(a, "color"); return [a.textContent.trim().slice(0, 40), ratio(c, b)]; });
  const prose = document.querySelector("main p");
  const body = prose ? seen(prose, "color")[0].map(Math.round).join(",") : null;
  const headings = [...document.querySelectorAll("main h1, main h2, main h3")]
    .filter(h => h.offsetParent !== null)
    .map(h => { const [c, b] = seen(h, "color");
                return [h.textContent.trim().slice(0, 40), c.map(Math.round).join(","), ratio(c, b)]; });
  return {links, body, headings};
}"""


@pytest.fixture(scope="module")
def measured(docs):
    from playwright.sync_api import sync_playwright
    if not shutil.which(CHROMIUM):
        pytest.skip("chromium is not installed (make test installs Debian's chromium)")
    httpd, url = serve(docs)
    out = {}
    try:
        with sync_playwright() as p:
            b = p.chromium.launch(executable_path=CHROMIUM, args=["--headless=new", "--no-sandbox"])
            for scheme in ("light", "dark"):
                ctx = b.new_context(color_scheme=scheme, viewport={"width": 1280, "height": 900})
                pg = ctx.new_page()
                for page in PAGES:
                    pg.goto(f"{url}/{page}")
                    # the site marks the dark theme on <html> once the theme's background is known
                    pg.wait_for_function(
                        "d => document.documentElement.classList.contains('quarto-dark') === d",
                        arg=scheme == "dark")
                    out[scheme, page] = pg.evaluate(MEASURE)
                ctx.close()
            b.close()
    finally:
        httpd.shutdown()
    return out


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("page", PAGES)
def test_links_read_at_four_and_a_half_to_one(measured, scheme, page):
    links = measured[scheme, page]["links"]
    assert links, f"no link in the prose of {page}"
    low = [(text, round(r, 2)) for text, r in links if r < 4.5]
    assert not low, f"{page} ({scheme}): links below 4.5:1: {low[:5]}"


@pytest.mark.parametrize("page", PAGES)
def test_dark_headings_stand_apart_from_the_prose(measured, page):
    m = measured["dark", page]
    assert m["headings"] and m["body"]
    same = [text for text, colour, _ in m["headings"] if colour == m["body"]]
    assert not same, f"{page}: headings in the body text's colour {m['body']}: {same[:5]}"
    low = [(text, round(r, 2)) for text, _, r in m["headings"] if r < 4.5]
    assert not low, f"{page}: headings below 4.5:1: {low}"
