/* The attention explorer of transformer_nb.explorer.attention_explorer.
   No dependency and no network request. transformer_nb writes this file into every
   view, inside `if (!window.__tnbExplorer1) {var css = "..."; ...}`, so that it runs
   once per page however many views the page holds; `css` is the text of explorer.css.
   A view is a <div class="tnb-explorer"> that holds its data as JSON in
   <script type="application/json" class="tnb-data">:
     {"decimals": 3, "start": {"kind", "layer", "head"}, "scale": "head",
      "kinds": [{"name", "rows", "cols", "rowsAre", "colsAre", "max", "w"}]}
   where w[layer][head][query][key] is a weight in units of 10^-decimals.
   Colours: each head's map on its own scale, 0 to its largest weight ("per head", the
   default), or each row on its own ("per row"); the legend says which, with the top.
   Keyboard: the grids of a view are one Tab stop (roving tabindex); the arrow keys move
   between tokens and cells (past a panel's edge into the next head's), Home and End to
   the first and last key, Page Up and Page Down to the previous and next head.
   Heads coloured by a score (optional, `colour_heads`): "scores": {"label", "unit",
   "decimals", "kinds": {name: s[layer][head]}} draws a strip of every head of the kind
   shown, each with its score on one diverging scale (blue below zero, red above, white
   at zero; the same scale for every kind), and the score beside each panel's title. The
   strip is one Tab stop: the arrow keys move between its heads, Enter or Space (or a
   click) shows that head. */
window.__tnbExplorer1 = (function () {
  "use strict";
  var VIRIDIS = ["440154", "482878", "3e4989", "31688e", "26828e", "1f9e89", "35b779",
                 "6ece58", "b5de2b", "fde725"];
  var STOPS = VIRIDIS.map(function (h) {
    return [0, 2, 4].map(function (k) { return parseInt(h.substr(k, 2), 16); });
  });
  var LQ = "\u201c", RQ = "\u201d";
  // whitespace tokens get a visible label: open box for a space, return for a newline
  var SHOWN = {" ": "\u2423", "\n": "\u23ce", "\t": "\u21e5", "\r": "\u240d",
               "\u00a0": "\u2423"};
  var SPOKEN = {" ": "space", "\n": "newline", "\t": "tab", "\r": "return",
                "\u00a0": "space"};

  function shown(t) {  // a token as the view labels it
    if (t === "") return "\u2205";
    return t.replace(/[ \n\t\r\u00a0]/g, function (c) { return SHOWN[c]; });
  }
  function spoken(t) {  // and as a screen reader says it
    if (t === "") return "empty token";
    if (!/^[ \n\t\r\u00a0]+$/.test(t)) return t;
    return t.split("").map(function (c) { return SPOKEN[c]; }).join(" ");
  }

  function colour(t) {  // viridis, t in [0, 1]
    t = Math.max(0, Math.min(1, t || 0)) * (STOPS.length - 1);
    var i = Math.min(Math.floor(t), STOPS.length - 2), f = t - i;
    var a = STOPS[i], b = STOPS[i + 1];
    return "rgb(" + [0, 1, 2].map(function (k) {
      return Math.round(a[k] + f * (b[k] - a[k]));
    }).join(",") + ")";
  }

  // heads coloured by a score: RdBu_r, the diverging map of the book's signed heatmaps
  var RDBU = ["053061", "2065ab", "4393c3", "90c4dd", "d1e5f0", "f7f6f6", "fddbc7",
              "f3a481", "d6604d", "b1182b", "67001f"].map(function (h) {
    return [0, 2, 4].map(function (k) { return parseInt(h.substr(k, 2), 16); });
  });
  function signed(t) {  // t in [-1, 1]: blue below zero, white at zero, red above
    t = (Math.max(-1, Math.min(1, t || 0)) + 1) / 2 * (RDBU.length - 1);
    var i = Math.min(Math.floor(t), RDBU.length - 2), f = t - i;
    var a = RDBU[i], b = RDBU[i + 1];
    return "rgb(" + [0, 1, 2].map(function (k) {
      return Math.round(a[k] + f * (b[k] - a[k]));
    }).join(",") + ")";
  }

  function el(tag, cls, text, attrs) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text != null) e.textContent = text;
    for (var k in attrs || {}) e.setAttribute(k, attrs[k]);
    return e;
  }

  function each(nodes, f) { Array.prototype.forEach.call(nodes, f); }

  function injectCss() {
    if (document.getElementById("tnb-explorer-css")) return;
    var s = el("style", null, css, {id: "tnb-explorer-css"});
    (document.head || document.documentElement).appendChild(s);
  }

  function select(label, options, value, onChange) {
    var lab = el("label", "tnb-ctl"), sel = el("select");
    lab.appendChild(el("span", null, label));
    options.forEach(function (o) {
      var opt = el("option", null, o[1], {value: String(o[0])});
      if (String(o[0]) === String(value)) opt.selected = true;
      sel.appendChild(opt);
    });
    sel.disabled = options.length < 2;
    sel.addEventListener("change", function () { onChange(sel.value); });
    lab.appendChild(sel);
    return lab;
  }

  function mount(root) {
    if (root.getAttribute("data-tnb-ready")) return;
    var src = root.querySelector("script.tnb-data");
    if (!src) return;
    var data = JSON.parse(src.textContent);
    root.setAttribute("data-tnb-ready", "1");
    injectCss();
    var fallback = root.querySelector(".tnb-fallback");
    if (fallback) fallback.parentNode.removeChild(fallback);
    var scale = Math.pow(10, data.decimals), st = data.start || {};
    var state = {kind: st.kind || 0, layer: st.layer || 0,
                 head: st.head == null ? 0 : st.head, focus: null,
                 scale: data.scale === "row" ? "row" : "head",
                 cursor: {h: null, i: 0, j: -1}};  // the one cell or token Tab reaches
    var app = el("div", "tnb-app"), controls = el("div", "tnb-controls");
    var caption = el("div", "tnb-caption"), panels = el("div", "tnb-panels");
    var readout = el("div", "tnb-readout", null, {"aria-live": "polite"});
    var strip = el("div", "tnb-heads");  // heads coloured by a score, if data.scores
    [controls, strip, caption, panels, readout].forEach(function (e) {
      app.appendChild(e);
    });
    root.appendChild(app);

    function kind() { return data.kinds[state.kind]; }
    function fmt(v) { return (v / scale).toFixed(data.decimals); }
    function most(a) { return a.reduce(function (m, v) { return v > m ? v : m; }, 0); }
    function peak(h) {  // the largest weight of head h in the layer shown
      return most(kind().w[state.layer][h].map(most));
    }
    function top(h, i) {  // what the brightest colour stands for, for row i of head h
      return state.scale === "row" ? most(kind().w[state.layer][h][i]) : peak(h);
    }
    function tone(v, h, i) { var t = top(h, i); return colour(t > 0 ? v / t : 0); }
    function heads() {
      var H = kind().w[state.layer].length, hs = [];
      if (state.head !== "all") return [+state.head];
      for (var h = 0; h < H; h++) hs.push(h);
      return hs;
    }

    function drawControls() {
      controls.textContent = "";
      var k = kind(), kinds = [], layers = [], hs = [], n;
      data.kinds.forEach(function (c, i) { kinds.push([i, c.name]); });
      for (n = 0; n < k.w.length; n++) layers.push([n, "layer " + n]);
      for (n = 0; n < k.w[0].length; n++) hs.push([n, "head " + n]);
      if (hs.length > 1) hs.push(["all", "all heads"]);
      controls.appendChild(select("attention", kinds, state.kind, function (v) {
        state.kind = +v;
        var k2 = kind();
        state.layer = Math.min(state.layer, k2.w.length - 1);
        var H = k2.w[0].length;
        if (state.head !== "all") state.head = Math.min(+state.head, H - 1);
        if (state.head === "all" && H < 2) state.head = 0;
        state.focus = null;
        drawControls();
        draw();
      }));
      controls.appendChild(select("layer", layers, state.layer, function (v) {
        state.layer = +v; draw();
      }));
      controls.appendChild(select("head", hs, state.head, function (v) {
        state.head = v === "all" ? "all" : +v; draw();
      }));
      controls.appendChild(select("colour", [["head", "per head"], ["row", "per row"]],
                                  state.scale, function (v) {
        state.scale = v; draw();
      }));
    }

    function drawPanel(h) {
      var k = kind(), m = k.w[state.layer][h], T = k.rows.length, S = k.cols.length;
      var panel = el("div", "tnb-panel", null, {"data-h": h});
      panel.appendChild(el("div", "tnb-ptitle", "head " + h + (state.scale === "head"
        ? " \u00b7 top " + fmt(peak(h)) : "")));
      scoreTitle(panel.firstChild, h);
      var scroll = el("div", "tnb-scroll");
      var grid = el("div", "tnb-grid", null, {role: "group",
                    "aria-label": k.name + ", layer " + state.layer + ", head " + h +
                    ": arrow keys move between tokens and cells"});
      grid.style.gridTemplateColumns = "max-content repeat(" + S + ", var(--tnb-cell))";
      grid.appendChild(el("div", "tnb-corner"));
      k.cols.forEach(function (t, j) {
        var b = el("button", "tnb-tok tnb-col", null, {type: "button", "data-j": j,
                   title: spoken(t), "aria-label": "key " + j + ": " + spoken(t),
                   tabindex: "-1"});
        b.appendChild(el("span", null, shown(t)));
        grid.appendChild(b);
      });
      for (var i = 0; i < T; i++) {
        grid.appendChild(el("button", "tnb-tok tnb-row", shown(k.rows[i]), {
          type: "button", "data-i": i, title: spoken(k.rows[i]), tabindex: "-1",
          "aria-label": "query " + i + ": " + spoken(k.rows[i])}));
        for (var j = 0; j < S; j++) {
          var c = el("div", "tnb-cell", null, {"data-i": i, "data-j": j, tabindex: "-1",
            role: "button", "aria-label": spoken(k.rows[i]) + " \u2192 " +
            spoken(k.cols[j]) + ": " + fmt(m[i][j])});
          c.style.background = tone(m[i][j], h, i);
          grid.appendChild(c);
        }
      }
      scroll.appendChild(grid);
      panel.appendChild(scroll);
      return panel;
    }

    function draw() {
      var k = kind();
      panels.textContent = "";
      panels.className = "tnb-panels" + (state.head === "all" ? " tnb-all" : "");
      heads().forEach(function (h) { panels.appendChild(drawPanel(h)); });
      caption.textContent = "";
      // a decoder's rows named by the piece written say so first, as its figures do
      var rows = /written/.test(k.rowsAre) ? "row: " + k.rowsAre
        : "rows: queries (" + k.rowsAre + ")";
      caption.appendChild(el("span", null, rows + " \u00b7 columns: keys (" +
                                           k.colsAre + ")"));
      var legend = el("span", "tnb-legend"), ramp = el("span", "tnb-ramp");
      ramp.style.background = "linear-gradient(to right," +
        [0, 0.25, 0.5, 0.75, 1].map(colour).join(",") + ")";
      var hs = heads(), upto = state.scale === "row" ? "each row's largest weight"
        : hs.length > 1 ? "each head's largest (beside its name)"
        : fmt(peak(hs[0])) + ", this head's largest";
      legend.appendChild(el("span", null, "colour: 0"));
      legend.appendChild(ramp);
      legend.appendChild(el("span", "tnb-top", upto));
      caption.appendChild(legend);
      app.setAttribute("data-scale", state.scale);
      drawScores();
      var f = state.focus;
      if (f && (f.i >= k.rows.length || f.j >= k.cols.length)) state.focus = null;
      rove();
      highlight();
    }

    // ---- the keyboard: one Tab stop for all the grids, the arrows move the cursor
    function at(c) {  // the element at cursor c: a row token, a key token or a cell
      var p = panels.querySelector(".tnb-panel[data-h='" + c.h + "']");
      if (!p) return null;
      if (c.j < 0) return p.querySelector(".tnb-row[data-i='" + c.i + "']");
      if (c.i < 0) return p.querySelector(".tnb-col[data-j='" + c.j + "']");
      return p.querySelector(".tnb-cell[data-i='" + c.i + "'][data-j='" + c.j + "']");
    }
    function rove() {  // clamp the cursor to what is drawn; it alone has tabindex 0
      var k = kind(), c = state.cursor, hs = heads();
      if (hs.indexOf(c.h) < 0) c.h = hs[0];
      c.i = Math.max(-1, Math.min(c.i, k.rows.length - 1));
      c.j = Math.max(-1, Math.min(c.j, k.cols.length - 1));
      if (c.i < 0 && c.j < 0) c.i = 0;
      each(panels.querySelectorAll("[tabindex='0']"), function (e) {
        e.setAttribute("tabindex", "-1");
      });
      var e = at(c);
      if (e) e.setAttribute("tabindex", "0");
      return e;
    }
    function move(e) {
      var k = kind(), c = state.cursor, hs = heads(), n = hs.indexOf(c.h);
      var T = k.rows.length, S = k.cols.length, i = c.i, j = c.j, h = c.h;
      if (e.key === "ArrowDown") i = Math.min(i + 1, T - 1);
      else if (e.key === "ArrowUp") i = Math.max(i - 1, j < 0 ? 0 : -1);
      else if (e.key === "ArrowRight") {
        if (j + 1 < S) j += 1;
        else if (n + 1 < hs.length) { h = hs[n + 1]; j = i < 0 ? 0 : -1; }
      } else if (e.key === "ArrowLeft") {
        if (j - 1 >= (i < 0 ? 0 : -1)) j -= 1;
        else if (n > 0) { h = hs[n - 1]; j = S - 1; }
      } else if (e.key === "Home") j = 0;
      else if (e.key === "End") j = S - 1;
      else if (e.key === "PageDown" && n + 1 < hs.length) h = hs[n + 1];
      else if (e.key === "PageUp" && n > 0) h = hs[n - 1];
      else return false;
      state.cursor = {h: h, i: i, j: j};
      var t = rove();
      if (t) t.focus();
      return true;
    }

    function highlight() {
      var f = state.focus;
      each(panels.querySelectorAll(".tnb-grid"), function (g) {
        g.classList.toggle("tnb-focus", !!f);
      });
      each(panels.querySelectorAll(".tnb-tok, .tnb-cell"), function (e) {
        var i = e.getAttribute("data-i"), j = e.getAttribute("data-j");
        i = i === null ? null : +i;
        j = j === null ? null : +j;
        var on = !!f && ((i !== null && i === f.i) || (j !== null && j === f.j));
        e.classList.toggle("tnb-hl", on);
        if (e.classList.contains("tnb-cell"))
          e.classList.toggle("tnb-cur", !!f && i === f.i && j === f.j);
      });
      drawReadout();
    }

    function chip(label, v, attrs, hue) {
      var c = el("span", "tnb-chip", null, attrs);
      var swatch = el("span", "tnb-swatch");
      swatch.style.background = hue;
      c.appendChild(swatch);
      c.appendChild(el("span", "tnb-chip-t", label));
      c.appendChild(el("span", "tnb-num", fmt(v)));
      return c;
    }

    function drawReadout() {
      var k = kind(), f = state.focus, hs = heads(), L = state.layer;
      readout.textContent = "";
      if (!f) {
        readout.appendChild(el("p", "tnb-hint", "Point at a token or a cell (hover, " +
                               "Tab to it, or tap) to read its weights here."));
        return;
      }
      var byRow = f.i != null;
      if (f.i != null && f.j != null) {  // a cell: the pair, its weight, then its row
        var h0 = f.h != null && hs.indexOf(f.h) >= 0 ? f.h : hs[0];
        var p = el("p", "tnb-rcell", null,
                   {"data-h": h0, "data-i": f.i, "data-j": f.j});
        p.appendChild(document.createTextNode(LQ + shown(k.rows[f.i]) + RQ + " \u2192 " +
          LQ + shown(k.cols[f.j]) + RQ + (hs.length > 1 ? " in head " + h0 : "") + ": "));
        p.appendChild(el("strong", "tnb-num", fmt(k.w[L][h0][f.i][f.j])));
        readout.appendChild(p);
      }
      readout.appendChild(el("p", "tnb-rhead", byRow
        ? "query " + LQ + shown(k.rows[f.i]) + RQ + " (row " + f.i + ") puts these " +
          "weights on the keys:"
        : "the weight each query puts on key " + LQ + shown(k.cols[f.j]) + RQ +
          " (column " + f.j + "):"));
      var labels = byRow ? k.cols : k.rows;
      function val(h, n) { var m = k.w[L][h]; return byRow ? m[f.i][n] : m[n][f.j]; }
      function where(n) { return byRow ? {"data-j": n} : {"data-i": n}; }
      function hue(h, n) { return tone(val(h, n), h, byRow ? f.i : n); }
      if (hs.length === 1) {  // one head: a chip per token, that wraps
        var list = el("div", "tnb-chips", null, {"data-h": hs[0]});
        labels.forEach(function (t, n) {
          var c = chip(shown(t), val(hs[0], n), where(n), hue(hs[0], n));
          if (byRow && f.j === n) c.classList.add("tnb-cur");
          list.appendChild(c);
        });
        readout.appendChild(list);
        return;
      }
      var wrap = el("div", "tnb-twrap"), tab = el("table", "tnb-table"), tr = el("tr");
      tr.appendChild(el("th", null, "head"));
      labels.forEach(function (t) { tr.appendChild(el("th", null, shown(t))); });
      tab.appendChild(tr);
      hs.forEach(function (h) {  // every head: a table, one row per head
        var r = el("tr", null, null, {"data-h": h});
        r.appendChild(el("th", null, String(h)));
        labels.forEach(function (t, n) {
          var v = val(h, n), td = el("td", "tnb-num", fmt(v), where(n));
          td.style.boxShadow = "inset 0 -3px 0 " + hue(h, n);
          r.appendChild(td);
        });
        tab.appendChild(r);
      });
      wrap.appendChild(tab);
      readout.appendChild(wrap);
    }

    // ---- heads coloured by a score (data.scores, from colour_heads)
    var sc = data.scores, scur = {l: null, h: null};  // the strip's one Tab stop
    function scores() { return sc ? sc.kinds[kind().name] || null : null; }
    var stop = 0;  // the scale: the largest magnitude of every kind's scores
    if (sc) Object.keys(sc.kinds).forEach(function (n) {
      sc.kinds[n].forEach(function (r) {
        r.forEach(function (v) { stop = Math.max(stop, Math.abs(v)); });
      });
    });
    function sfmt(v) {  // a signed score: +1.23, \u22120.45
      var t = Math.abs(v).toFixed(sc.decimals);
      return (+t === 0 ? "" : v < 0 ? "\u2212" : "+") + t;
    }
    function shue(v) { return signed(stop > 0 ? v / stop : 0); }
    function scoreTitle(title, h) {  // a panel's title: its head's score
      var s = scores();
      if (!s) return;
      var v = s[state.layer][h], b = el("span", "tnb-pscore", null,
        {title: sc.label + ": " + sfmt(v) + " " + sc.unit});
      var sw = el("span", "tnb-swatch");
      sw.style.background = shue(v);
      b.appendChild(sw);
      b.appendChild(el("span", "tnb-num", sfmt(v)));
      title.appendChild(b);
    }
    function sbutton(l, h) {
      return strip.querySelector(".tnb-hbtn[data-l='" + l + "'][data-h='" + h + "']");
    }
    function drawScores() {
      strip.textContent = "";
      if (!sc) return;
      var s = scores(), k = kind();
      var cap = el("div", "tnb-hcap");
      strip.appendChild(cap);
      if (!s) {
        cap.appendChild(el("span", null, "heads coloured by " + sc.label + ": none for " +
                           k.name));
        return;
      }
      cap.appendChild(el("span", null, "heads coloured by " + sc.label + " (" + sc.unit +
                         "):"));
      var legend = el("span", "tnb-legend"), ramp = el("span", "tnb-ramp");
      ramp.style.background = "linear-gradient(to right," +
        [-1, -0.5, 0, 0.5, 1].map(signed).join(",") + ")";
      legend.appendChild(el("span", "tnb-num", sfmt(-stop)));
      legend.appendChild(ramp);
      legend.appendChild(el("span", "tnb-num", sfmt(stop)));
      cap.appendChild(legend);
      var L = s.length, H = s[0].length;
      if (scur.l === null || scur.l >= L || scur.h >= H) {
        scur = {l: state.layer, h: state.head === "all" ? 0 : +state.head};
      }
      var grid = el("div", "tnb-hgrid", null, {role: "group", "aria-label": "heads of " +
        k.name + " by " + sc.label + ": arrow keys move, Enter shows the head"});
      grid.style.gridTemplateColumns = "max-content repeat(" + H + ", max-content)";
      grid.appendChild(el("span"));
      for (var n = 0; n < H; n++) grid.appendChild(el("span", "tnb-hhead", "head " + n));
      for (var l = 0; l < L; l++) {
        grid.appendChild(el("span", "tnb-hlayer", "layer " + l));
        for (var h = 0; h < H; h++) {
          var v = s[l][h], on = l === state.layer &&
            (state.head === "all" || +state.head === h);
          var b = el("button", "tnb-hbtn" + (on ? " tnb-on" : ""), null, {type: "button",
            "data-l": l, "data-h": h, "aria-pressed": on ? "true" : "false",
            tabindex: l === scur.l && h === scur.h ? "0" : "-1",
            "aria-label": "layer " + l + ", head " + h + ": " + sc.label + " " +
                          sfmt(v) + " " + sc.unit});
          var sw = el("span", "tnb-swatch");
          sw.style.background = shue(v);
          b.appendChild(sw);
          b.appendChild(el("span", "tnb-num", sfmt(v)));
          grid.appendChild(b);
        }
      }
      strip.appendChild(grid);
    }
    strip.addEventListener("click", function (e) {  // a head of the strip: show it
      var b = e.target && e.target.closest ? e.target.closest(".tnb-hbtn") : null;
      if (!b) return;
      var l = +b.getAttribute("data-l"), h = +b.getAttribute("data-h");
      scur = {l: l, h: h};
      state.layer = l;
      state.head = h;
      state.focus = null;
      drawControls();
      draw();
      var again = sbutton(l, h);
      if (again) again.focus();
    });
    strip.addEventListener("keydown", function (e) {  // arrows move the Tab stop
      var s = scores();
      if (!s || !e.target.closest || !e.target.closest(".tnb-hbtn")) return;
      var l = scur.l, h = scur.h, L = s.length, H = s[0].length;
      if (e.key === "ArrowRight") h = Math.min(h + 1, H - 1);
      else if (e.key === "ArrowLeft") h = Math.max(h - 1, 0);
      else if (e.key === "ArrowDown") l = Math.min(l + 1, L - 1);
      else if (e.key === "ArrowUp") l = Math.max(l - 1, 0);
      else if (e.key === "Home") h = 0;
      else if (e.key === "End") h = H - 1;
      else return;
      e.preventDefault();
      var from = sbutton(scur.l, scur.h), to = sbutton(l, h);
      scur = {l: l, h: h};
      if (from) from.setAttribute("tabindex", "-1");
      if (to) { to.setAttribute("tabindex", "0"); to.focus(); }
    });

    function target(e) {
      var t = e.target;
      return t && t.closest ? t.closest(".tnb-tok, .tnb-cell") : null;
    }
    function point(t) {
      if (!t) return;
      var i = t.getAttribute("data-i"), j = t.getAttribute("data-j");
      var panel = t.closest(".tnb-panel"), g = state.focus;
      var f = {i: i === null ? null : +i, j: j === null ? null : +j,
               h: panel ? +panel.getAttribute("data-h") : null};
      if (g && g.i === f.i && g.j === f.j && g.h === f.h) return;
      state.focus = f;
      if (f.h != null) {  // the Tab stop follows the reader's last choice
        state.cursor = {h: f.h, i: f.i == null ? -1 : f.i, j: f.j == null ? -1 : f.j};
        rove();
      }
      highlight();
    }
    ["mouseover", "focusin", "click"].forEach(function (ev) {
      panels.addEventListener(ev, function (e) { point(target(e)); });
    });
    panels.addEventListener("keydown", function (e) {
      if (target(e) && move(e)) e.preventDefault();
    });
    drawControls();
    draw();
  }

  function mountAll() {
    each(document.querySelectorAll(".tnb-explorer:not([data-tnb-ready])"), mount);
  }

  return {
    mount: mount,
    mountAll: mountAll,
    // each view's own script: mount that view, then any other
    boot: function (script) {
      var root = script && script.closest ? script.closest(".tnb-explorer") : null;
      if (root) mount(root);
      mountAll();
    }
  };
})();
