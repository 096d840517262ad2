/* transformer_nb's own behaviour of the site (tools/build_site.py copies it into site_libs/tnb-site.js and every page
   loads it after smalldocs.js). No dependency, no network request.

   1. Scroll cues: an element that scrolls sideways (display maths, code, tables, figures, the explorer's grids) gets
      the class tnb-more-right while more of it lies to the right, tnb-more-left while more lies to the left;
      styles.css fades that edge, so a reader sees that the line goes on.
   2. Figures whose panels the builder found (data-panels on img.tnb-figure: x,y,w,h,kind in CSS px, kind t for a
      title, p for a panel) are re-flowed panel by panel when even the figure's min-width (the narrowest it stays
      legible at; down to it, the figure shrinks to its column) is wider than its column: the panels wrap
      (on a phone one under the other), each shown whole, instead of the figure scrolling past the screen's edge
      (a panel alone wider than the column scrolls in a box of its own).
   3. Diagrams shown smaller than their natural size are links to the full-size picture (the builder writes the
      links; nothing to do here). */
(() => {
  "use strict";
  const SCROLLERS = "main .katex-display, main pre, main .table-scroll, main .figure-scroll, main .tnb-scroll, " +
                    "main .tnb-twrap, main .figure-crop-box";

  // ---- 1. scroll cues
  const cue = (e) => {
    const more = e.scrollWidth - e.clientWidth;
    e.classList.toggle("tnb-scrolls", more > 1);
    e.classList.toggle("tnb-more-left", more > 1 && e.scrollLeft > 1);
    e.classList.toggle("tnb-more-right", more > 1 && e.scrollLeft < more - 1);
  };
  // the boxes the page's styles let scroll sideways: those of SCROLLERS (the explorer draws new ones), and any other
  // found once the page has loaded
  const found = new Set();
  const scan = () => document.querySelectorAll("main *").forEach((e) => {
    if (["auto", "scroll"].includes(getComputedStyle(e).overflowX)) found.add(e);
  });
  const cueAll = () => {
    document.querySelectorAll(SCROLLERS).forEach(cue);
    found.forEach((e) => { if (e.isConnected) cue(e); else found.delete(e); });
  };
  document.addEventListener("scroll", (ev) => {
    const t = ev.target;
    if (t && t.matches && (found.has(t) || t.matches(SCROLLERS))) cue(t);
  }, true);

  // ---- 2. panels that re-flow
  const flows = [];
  const buildFlow = (img) => {
    const box = img.closest(".figure-scroll");
    if (!box || box.nextElementSibling && box.nextElementSibling.classList.contains("figure-flow")) return;
    const W = +img.getAttribute("width"), H = +img.getAttribute("height");
    const panels = img.dataset.panels.split(";").map((p) => {
      const [x, y, w, h, kind] = p.split(",");
      return {x: +x, y: +y, w: +w, h: +h, kind};
    });
    const flow = document.createElement("div");
    flow.className = "figure-flow";
    flow.setAttribute("role", "img");
    flow.setAttribute("aria-label", img.alt + " (its panels one after another)");
    panels.forEach((p) => {
      const crop = document.createElement("div");
      crop.className = "figure-crop figure-crop-" + p.kind;
      crop.style.width = p.w + "px";
      crop.style.height = p.h + "px";
      const part = document.createElement("img");
      part.src = img.src;
      part.alt = "";
      part.width = W;
      part.height = H;
      part.style.marginLeft = -p.x + "px";
      part.style.marginTop = -p.y + "px";
      crop.appendChild(part);
      const holder = document.createElement("div");  // scrolls where one panel alone is wider than the column
      holder.className = "figure-crop-box";
      holder.appendChild(crop);
      flow.appendChild(holder);
      if (p.kind === "t") flow.appendChild(Object.assign(document.createElement("div"), {className: "figure-break"}));
    });
    box.after(flow);
    flows.push({img, box, flow});
  };
  const layOut = () => flows.forEach(({img, box, flow}) => {
    const col = box.parentElement.clientWidth;
    // only a figure that cannot shrink to the column without losing its legibility (min-width)
    const reflow = +(img.dataset.minWidth || img.getAttribute("width")) > col + 1;
    box.classList.toggle("figure-reflowed", reflow);
    flow.classList.toggle("figure-flow-on", reflow);
  });

  const init = () => {
    document.querySelectorAll("main img.tnb-figure[data-panels]").forEach(buildFlow);
    scan();
    layOut();
    cueAll();
  };
  init();
  window.addEventListener("load", () => { scan(); layOut(); cueAll(); });
  let queued = false;
  const refresh = () => {
    if (queued) return;
    queued = true;
    requestAnimationFrame(() => { queued = false; layOut(); cueAll(); });
  };
  window.addEventListener("resize", refresh);
  const main = document.querySelector("main");
  // KaTeX typesets after this script, the explorer redraws its grids: check again whenever main changes
  if (main && window.MutationObserver) new MutationObserver(refresh).observe(main, {childList: true, subtree: true});
  if (main && window.ResizeObserver) new ResizeObserver(refresh).observe(main);
  window.tnbSite = {refresh: () => { layOut(); cueAll(); }};
})();
