/* The MCP App bridge: JSON-RPC over postMessage with the host (MCP Apps). The view asks
   ui/initialize, says ui/notifications/initialized, then draws every tool result the host sends
   (ui/notifications/tool-result): a diagnose result (DiagnosisView) or a get_heatmap result
   (HeatmapView). Text goes in with textContent only. */
"use strict";
(function () {
  var DETAIL = "straggler-lens/heatmap-detail";
  var nextId = 1, pending = {};

  function post(msg) { window.parent.postMessage(msg, "*"); }
  function request(method, params) {
    var id = nextId++;
    post({ jsonrpc: "2.0", id: id, method: method, params: params });
    return new Promise(function (resolve) { pending[id] = resolve; });
  }
  function notify(method, params) { post({ jsonrpc: "2.0", method: method, params: params || {} }); }
  function text(id, value) { var e = document.getElementById(id); if (e) e.textContent = value; }

  function item(tag, value, cls) {
    var e = document.createElement(tag);
    e.textContent = value;
    if (cls) e.className = cls;
    return e;
  }

  function showCauses(causes) {
    var box = document.getElementById("causes");
    box.textContent = "";
    if (!causes || !causes.length) { box.appendChild(item("p", "No known straggler signature matched.", "muted")); return; }
    causes.forEach(function (c, i) {
      var div = item("div", "", "cause");
      div.appendChild(item("h3", (i + 1) + ". " + c.id));
      div.appendChild(item("p", c.summary));
      var gain = (c.marginal_gain === undefined || c.marginal_gain === null) ? "unknown" : "×" + LensView.fmt(c.marginal_gain);
      div.appendChild(item("p", "confidence " + Number(c.confidence).toFixed(2) + " · marginal gain " + gain, "muted"));
      var ev = Object.keys(c.evidence || {}).map(function (k) { return k + " = " + c.evidence[k]; }).join("; ");
      if (ev) div.appendChild(item("p", ev, "evidence"));
      box.appendChild(div);
    });
  }

  function showRemedies(remedies) {
    var ul = document.getElementById("remedies");
    ul.textContent = "";
    (remedies || []).forEach(function (r) {
      ul.appendChild(item("li", r.cause_id + ": " + r.action + " → predicted speedup ×" + LensView.fmt(r.predicted_speedup)));
    });
  }

  function series(stepSlowdown) {
    return Object.keys(stepSlowdown || {}).map(function (k) { return [Number(k), stepSlowdown[k]]; })
      .sort(function (a, b) { return a[0] - b[0]; });
  }

  function render(result) {
    var sc = result && (result.structuredContent || result.structured_content);
    if (!sc || !sc.heatmap) return;
    var meta = result._meta || {};
    var view = { heatmap: sc.heatmap, detail: meta[DETAIL] || null, step_series: [] };
    if (sc.report) {
      text("summary", sc.summary);
      var fid = sc.fidelity ? (sc.fidelity.verdict || sc.fidelity) : "unknown";
      text("slowdown", "job slowdown S = " + LensView.fmt(sc.slowdown) + " (mean step time over the ideal step time) · fidelity " + fid);
      view.step_series = series(sc.report.step_slowdown);
      showCauses(sc.causes);
      showRemedies(sc.remedies);
    } else {
      text("summary", "Heatmap of trace " + sc.trace_id + "; hottest cell PP " + sc.hottest.pp + ", DP " + sc.hottest.dp + " = " + LensView.fmt(sc.hottest.value));
    }
    window.lensView = LensView.mount(document.getElementById("heatmap-panel"), view);
    document.body.setAttribute("data-rendered", "true");
    notify("ui/notifications/size-changed", { height: document.documentElement.scrollHeight });
  }

  window.addEventListener("message", function (ev) {
    if (ev.source !== window.parent) return;
    var msg = ev.data || {};
    if (msg.jsonrpc !== "2.0") return;
    if (msg.id !== undefined && pending[msg.id] && msg.method === undefined) {
      var done = pending[msg.id]; delete pending[msg.id]; done(msg.result);
      return;
    }
    if (msg.method === "ui/notifications/tool-result") render(msg.params);
  });

  request("ui/initialize", {
    protocolVersion: "2026-01-26",
    appInfo: { name: "straggler-lens-diagnosis", version: "1" },
    appCapabilities: {},
  }).then(function () { notify("ui/notifications/initialized"); });
})();
