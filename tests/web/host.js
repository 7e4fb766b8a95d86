"use strict";
(function () {
  // Loaded in <head>, before the iframe exists: look the elements up when a message arrives.
  window.addEventListener("message", function (ev) {
    var frame = document.getElementById("app");
    var status = document.getElementById("host-status");
    if (!frame || ev.source !== frame.contentWindow) return;
    var msg = ev.data || {};
    if (msg.method === "ui/initialize") {
      frame.contentWindow.postMessage({ jsonrpc: "2.0", id: msg.id, result: {
        protocolVersion: "2026-01-26", hostInfo: { name: "test-host", version: "1" },
        hostCapabilities: {}, hostContext: { theme: "light" } } }, "*");
      status.textContent = "initialize answered";
    } else if (msg.method === "ui/notifications/initialized") {
      fetch("result.json").then(function (r) { return r.json(); }).then(function (result) {
        frame.contentWindow.postMessage({ jsonrpc: "2.0", method: "ui/notifications/tool-result", params: result }, "*");
        status.textContent = "result posted";
      });
    } else if (msg.method === "ui/notifications/size-changed") {
      status.textContent = "rendered " + msg.params.height;
    }
  });
})();
