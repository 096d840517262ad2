"""At which screen does each chapter show its first result? Opens every chapter page of the built site (_docs/) at
1280 x 900 in headless Chromium and prints, per page, the screen (900 px each, counted from 1) where the first
result appears -- the first cell output that is a figure or printed text, not an API card -- out of the page's
screens, the screen of its first figure, and the most API cards in a row before it. usage: .venv/bin/python tools/first_result.py [--json FILE]"""
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from conftest import chapter_pages, serve  # noqa: E402

WIDTH, HEIGHT = 1280, 900
# The cell outputs in the page's order: an API card (nbdev's show_doc: a heading with an id) or a result
FIND = """() => {
  const main = document.querySelector('main') || document.body;
  const outs = Array.from(main.querySelectorAll('.cell-output')).filter(e => !e.parentElement.closest('.cell-output'));
  const top = e => e.getBoundingClientRect().top + window.scrollY;
  let run = 0, most = 0, first = null;
  for (const e of outs) {
    if (e.closest('details')) continue;                                 // folded
    if (e.querySelector('h3[id], h4[id]')) { run += 1; most = Math.max(most, run); continue; }  // an API card
    const figure = e.querySelector('img, svg, .tnb-explorer') !== null;
    if (!figure && !(e.innerText || '').trim()) continue;
    if (first === null) first = {y: top(e), kind: figure ? 'figure' : 'text', most};
    if (figure) return Object.assign(first, {figure: top(e)});
  }
  return first || {y: null, kind: null, most, figure: null};
}"""


def main():
    from playwright.sync_api import sync_playwright
    httpd, url = serve(ROOT / "_docs")
    rows = {}
    try:
        with sync_playwright() as p:
            b = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--headless=new", "--no-sandbox"])
            ctx = b.new_context(viewport={"width": WIDTH, "height": HEIGHT})
            pg = ctx.new_page()
            for name in chapter_pages() + ["fast.html", "benchmark.html", "cli.html"]:
                pg.goto(f"{url}/{name}", wait_until="load")
                pg.wait_for_timeout(200)
                r = pg.evaluate(FIND)
                h = pg.evaluate("document.documentElement.scrollHeight")
                screens = -(-h // HEIGHT)
                at = None if r["y"] is None else int(r["y"] // HEIGHT) + 1
                fig = None if r.get("figure") is None else int(r["figure"] // HEIGHT) + 1
                rows[name] = dict(screen=at, of=screens, kind=r["kind"], cards_before=r["most"], figure=fig)
                print(f"{name:18s} first result on screen {at} of {screens} ({r['kind']}), first figure on "
                      f"{fig}; most API cards in a row before the first result: {r['most']}")
            b.close()
    finally:
        httpd.shutdown()
    if "--json" in sys.argv:
        Path(sys.argv[sys.argv.index("--json") + 1]).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
