/* The trace page: read the embedded view data (JSON, not script) and mount the heatmap. */
"use strict";
(function () {
  var node = document.getElementById("lens-data");
  var root = document.getElementById("heatmap-panel");
  if (!node || !root) return;
  var view = JSON.parse(node.textContent);
  window.lensView = LensView.mount(root, view);
})();
