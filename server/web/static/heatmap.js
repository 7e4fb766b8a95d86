/* Straggler Lens: the interactive heatmap and the per-step chart (shared by the pages and the
   MCP App). No dependencies. Everything is built with DOM calls and textContent, never innerHTML,
   so values from a trace can never become markup. */
"use strict";

var LensView = (function () {
  var SVG = "http://www.w3.org/2000/svg";
  // matplotlib's "Reds" colour map at five stops (the PNG uses the same map)
  var STOPS = [[255, 245, 240], [252, 187, 161], [251, 106, 74], [203, 24, 29], [103, 0, 13]];

  function colour(v, lo, hi) {
    var t = hi > lo ? (v - lo) / (hi - lo) : 0;
    t = Math.max(0, Math.min(1, t)) * (STOPS.length - 1);
    var i = Math.min(STOPS.length - 2, Math.floor(t));
    var f = t - i, a = STOPS[i], b = STOPS[i + 1];
    var rgb = [0, 1, 2].map(function (k) { return Math.round(a[k] + (b[k] - a[k]) * f); });
    return "rgb(" + rgb.join(",") + ")";
  }

  function el(tag, attrs, text) {
    var e = document.createElementNS(SVG, tag);
    Object.keys(attrs || {}).forEach(function (k) { e.setAttribute(k, String(attrs[k])); });
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function part(root, role) { return root.querySelector("[data-role=" + role + "]"); }

  function fmt(v) { return (v === null || v === undefined) ? "unknown" : Number(v).toFixed(3); }

  // Label every k-th index so that labels of `chars` characters never overlap in `cell` pixels.
  function stride(cell, chars, charPx) {
    var need = chars * charPx + 4;
    return Math.max(1, Math.ceil(need / Math.max(cell, 0.001)));
  }

  function mount(root, view) {
    var hm = view.heatmap, detail = view.detail || null;
    var state = { step: null, scale: hm.scale || "fixed", worker: null };
    var mapBox = part(root, "map"), tip = part(root, "tip"), note = part(root, "note");
    var stepSel = part(root, "step"), scaleSel = part(root, "scale"), worker = part(root, "worker");
    var title = part(root, "title");

    function current() {
      if (state.step === null) {
        var ad = detail ? detail.adaptive : [hm.vmin, hm.vmax];
        return {
          values: hm.values, title: hm.title,
          range: state.scale === "adaptive" ? ad : [1.0, 1.5],
          note: state.scale === "adaptive" ? (detail ? detail.note_adaptive : null)
                                           : (detail ? detail.note_fixed : hm.scale_note),
        };
      }
      var s = detail.steps[state.step];
      return {
        values: s.values,
        title: "step " + s.step + ": how much each worker slows this step (the smaller of its DP " +
               "rank's and its stage's effect; 1.00 = no effect); this step's slowdown = " + fmt(s.slowdown),
        range: state.scale === "adaptive" ? s.adaptive : [1.0, 1.5],
        note: state.scale === "adaptive" ? s.note_adaptive : s.note_fixed,
      };
    }

    function cellText(r, c, v) {
      var parts = ["PP " + hm.pp_labels[r], "DP " + hm.dp_labels[c]];
      if (detail && detail.ranks[r][c]) parts.push("rank " + detail.ranks[r][c]);
      if (detail && detail.hosts[r][c]) parts.push("host " + detail.hosts[r][c]);
      parts.push((state.step === null ? "S_w = " : "step value = ") + fmt(v));
      return parts.join(" · ");
    }

    function draw() {
      var cur = current();
      var rows = cur.values.length, cols = rows ? cur.values[0].length : 0;
      var width = Math.max(320, Math.min(1100, mapBox.clientWidth || 900));
      var left = 56, top = 8, bottom = 46;
      var cw = (width - left - 8) / Math.max(1, cols);
      var ch = Math.max(14, Math.min(40, 320 / Math.max(1, rows)));
      var height = top + rows * ch + bottom;
      var svg = el("svg", { width: width, height: height, viewBox: "0 0 " + width + " " + height,
                            role: "img", "aria-label": cur.title, "class": "hm-svg" });
      var xs = stride(cw, Math.max.apply(null, hm.dp_labels.map(function (l) { return l.length; })), 7);
      if (cols >= 64) xs = Math.max(xs, 2);
      var ys = stride(ch, 1, 14);
      for (var r = 0; r < rows; r++) {
        for (var c = 0; c < cols; c++) {
          var v = cur.values[r][c];
          var rect = el("rect", { x: left + c * cw, y: top + r * ch, width: Math.max(cw - 1, 0.5),
                                  height: ch - 1, fill: colour(v, cur.range[0], cur.range[1]),
                                  "data-r": r, "data-c": c, "data-v": v, "class": "hm-cell" });
          if (state.worker && state.worker[0] === r && state.worker[1] === c) rect.setAttribute("class", "hm-cell hm-picked");
          svg.appendChild(rect);
          if (cw >= 34 && ch >= 16) {
            var lum = (v - cur.range[0]) / Math.max(1e-9, cur.range[1] - cur.range[0]);
            svg.appendChild(el("text", { x: left + c * cw + cw / 2, y: top + r * ch + ch / 2 + 4,
                                         "text-anchor": "middle", "class": lum > 0.5 ? "hm-val hm-val-dark" : "hm-val" },
                               Number(v).toFixed(2)));
          }
        }
      }
      for (var i = 0; i < cols; i += xs) {
        svg.appendChild(el("text", { x: left + i * cw + cw / 2, y: top + rows * ch + 14,
                                     "text-anchor": "middle", "class": "hm-tick" }, hm.dp_labels[i]));
      }
      for (var j = 0; j < rows; j += ys) {
        svg.appendChild(el("text", { x: left - 6, y: top + j * ch + ch / 2 + 4, "text-anchor": "end",
                                     "class": "hm-tick" }, hm.pp_labels[j]));
      }
      svg.appendChild(el("text", { x: left + (width - left) / 2, y: height - 8, "text-anchor": "middle",
                                   "class": "hm-axis" }, "DP rank"));
      var yl = el("text", { x: 12, y: top + rows * ch / 2, "text-anchor": "middle", "class": "hm-axis",
                            transform: "rotate(-90 12 " + (top + rows * ch / 2) + ")" }, "PP rank");
      svg.appendChild(yl);
      mapBox.textContent = "";
      mapBox.appendChild(svg);
      if (title) title.textContent = cur.title;
      if (note) {
        var lines = [];
        if (hm.note) lines.push(hm.note);
        lines.push("colour scale " + cur.range[0].toFixed(2) + "–" + cur.range[1].toFixed(2) +
                   (state.scale === "fixed" ? " (the study's fixed scale)" : " (adaptive)"));
        if (cur.note) lines.push(cur.note);
        note.textContent = lines.join(" · ");
        note.classList.toggle("clipped", !!cur.note);
      }
      if (view.onDraw) view.onDraw(state);
    }

    function showWorker(r, c) {
      state.worker = [r, c];
      if (!worker) return;
      worker.textContent = "";
      var h = document.createElement("h3");
      h.textContent = "Worker PP " + hm.pp_labels[r] + ", DP " + hm.dp_labels[c] + ": S_w = " + fmt(hm.values[r][c]);
      worker.appendChild(h);
      if (!detail || !detail.steps.length) {
        var p = document.createElement("p");
        p.textContent = "no per-step values in this view";
        worker.appendChild(p);
        return;
      }
      var series = detail.steps.map(function (s) { return [s.step, s.values[r][c]]; });
      worker.appendChild(barChart(series, "per-step value of this worker", null));
      var list = document.createElement("ol");
      list.className = "worker-steps";
      series.forEach(function (kv) {
        var li = document.createElement("li");
        li.textContent = "step " + kv[0] + ": " + fmt(kv[1]);
        list.appendChild(li);
      });
      worker.appendChild(list);
    }

    mapBox.addEventListener("mousemove", function (ev) {
      var t = ev.target;
      if (!t || !t.getAttribute || t.getAttribute("data-r") === null) { tip.hidden = true; return; }
      var r = +t.getAttribute("data-r"), c = +t.getAttribute("data-c"), v = +t.getAttribute("data-v");
      tip.textContent = cellText(r, c, v);
      tip.hidden = false;
      var box = root.getBoundingClientRect();
      tip.style.left = (ev.clientX - box.left + 12) + "px";
      tip.style.top = (ev.clientY - box.top + 12) + "px";
    });
    mapBox.addEventListener("mouseleave", function () { tip.hidden = true; });
    mapBox.addEventListener("click", function (ev) {
      var t = ev.target;
      if (!t || !t.getAttribute || t.getAttribute("data-r") === null) return;
      showWorker(+t.getAttribute("data-r"), +t.getAttribute("data-c"));
      draw();
    });
    if (stepSel) {
      stepSel.textContent = "";
      var o = document.createElement("option");
      o.value = ""; o.textContent = "whole job (S_w)";
      stepSel.appendChild(o);
      (detail ? detail.steps : []).forEach(function (s, i) {
        var opt = document.createElement("option");
        opt.value = String(i);
        opt.textContent = "step " + s.step + " (slowdown " + fmt(s.slowdown) + ")";
        stepSel.appendChild(opt);
      });
      stepSel.disabled = !(detail && detail.steps.length);
      stepSel.addEventListener("change", function () {
        state.step = stepSel.value === "" ? null : +stepSel.value;
        draw();
      });
    }
    if (scaleSel) {
      scaleSel.value = state.scale;
      scaleSel.addEventListener("change", function () { state.scale = scaleSel.value; draw(); });
    }
    var chart = part(root, "chart");
    if (chart && view.step_series && view.step_series.length) {
      chart.textContent = "";
      chart.appendChild(barChart(view.step_series, "step slowdown (step time over its ideal)", 1.1));
    }
    draw();
    window.addEventListener("resize", draw);
    return { draw: draw, state: state, showWorker: showWorker };
  }

  // A bar per step from 1.0 up to its value; a dashed line at `threshold` when given.
  function barChart(series, label, threshold) {
    var width = 640, height = 150, left = 44, bottom = 24, top = 8;
    var hi = Math.max(threshold || 1.05, Math.max.apply(null, series.map(function (kv) { return kv[1] || 1; })));
    hi = Math.ceil(hi * 20) / 20;
    var lo = Math.min(1.0, Math.min.apply(null, series.map(function (kv) { return kv[1] || 1; })));
    var svg = el("svg", { width: "100%", viewBox: "0 0 " + width + " " + height, role: "img",
                          "aria-label": label, "class": "chart-svg", preserveAspectRatio: "none" });
    var n = series.length, bw = (width - left - 4) / Math.max(1, n);
    function y(v) { return top + (height - top - bottom) * (1 - (v - lo) / Math.max(1e-9, hi - lo)); }
    series.forEach(function (kv, i) {
      var v = kv[1] === null ? lo : kv[1];
      var rect = el("rect", { x: left + i * bw, y: Math.min(y(v), y(lo)), width: Math.max(bw - 1, 0.5),
                              height: Math.abs(y(lo) - y(v)), "class": v >= (threshold || Infinity) ? "bar bar-hot" : "bar" });
      var t = el("title", {}, "step " + kv[0] + ": " + fmt(kv[1]));
      rect.appendChild(t);
      svg.appendChild(rect);
    });
    [lo, hi].forEach(function (v) {
      svg.appendChild(el("text", { x: left - 4, y: y(v) + 4, "text-anchor": "end", "class": "hm-tick" }, v.toFixed(2)));
    });
    if (threshold) {
      svg.appendChild(el("line", { x1: left, x2: width, y1: y(threshold), y2: y(threshold), "class": "threshold" }));
    }
    var k = stride(bw, String(series[n - 1][0]).length, 7);
    for (var i = 0; i < n; i += k) {
      svg.appendChild(el("text", { x: left + i * bw + bw / 2, y: height - 8, "text-anchor": "middle",
                                   "class": "hm-tick" }, String(series[i][0])));
    }
    return svg;
  }

  return { mount: mount, colour: colour, barChart: barChart, fmt: fmt };
})();
