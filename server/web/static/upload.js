/* The upload form: several files, drag and drop, progress through XHR, the REST errors shown. */
"use strict";
(function () {
  var form = document.getElementById("upload-form");
  if (!form) return;
  var input = form.querySelector("input[type=file]");
  var drop = document.getElementById("drop-zone");
  var list = document.getElementById("upload-files");
  var bar = document.getElementById("upload-progress");
  var msg = document.getElementById("upload-message");
  var max = Number(form.getAttribute("data-max-bytes")) || Infinity;
  var picked = [];

  function show(files) {
    picked = Array.prototype.slice.call(files);
    list.textContent = "";
    picked.forEach(function (f) {
      var li = document.createElement("li");
      li.textContent = f.name + " (" + (f.size / 1024).toFixed(1) + " KiB)";
      list.appendChild(li);
    });
  }
  function say(text, bad) {
    msg.textContent = text;
    msg.classList.toggle("error", !!bad);
  }

  input.addEventListener("change", function () { show(input.files); });
  ["dragenter", "dragover"].forEach(function (t) {
    drop.addEventListener(t, function (ev) { ev.preventDefault(); drop.classList.add("over"); });
  });
  ["dragleave", "drop"].forEach(function (t) {
    drop.addEventListener(t, function (ev) { ev.preventDefault(); drop.classList.remove("over"); });
  });
  drop.addEventListener("drop", function (ev) { if (ev.dataTransfer) show(ev.dataTransfer.files); });
  drop.addEventListener("click", function () { input.click(); });
  drop.addEventListener("keydown", function (ev) { if (ev.key === "Enter" || ev.key === " ") input.click(); });

  form.addEventListener("submit", function (ev) {
    ev.preventDefault();
    if (!picked.length) { say("choose one or more trace files first", true); return; }
    var total = picked.reduce(function (a, f) { return a + f.size; }, 0);
    if (total > max) {
      say("these files hold " + (total / 1048576).toFixed(1) + " MiB; this server accepts at most " +
          (max / 1048576).toFixed(0) + " MiB per upload", true);
      return;
    }
    var data = new FormData();
    picked.forEach(function (f) { data.append("files", f, f.name); });
    ["format", "dp", "pp", "tp", "cp"].forEach(function (k) {
      var field = form.elements[k];
      if (field && field.value) data.append(k, field.value);
    });
    var xhr = new XMLHttpRequest();
    xhr.open("POST", form.getAttribute("action"));
    xhr.upload.addEventListener("progress", function (e) {
      if (e.lengthComputable) { bar.max = e.total; bar.value = e.loaded; }
    });
    xhr.addEventListener("load", function () {
      var body = null;
      try { body = JSON.parse(xhr.responseText); } catch (e) { body = null; }
      if (xhr.status === 200 || xhr.status === 201) {
        say((xhr.status === 201 ? "stored as " : "already stored as ") + body.trace_id + "; diagnosing…", false);
        window.location.assign("/traces/" + encodeURIComponent(body.trace_id));
      } else {
        var m = body && body.error ? body.error.message : ("upload failed (HTTP " + xhr.status + ")");
        say(m, true);
      }
    });
    xhr.addEventListener("error", function () { say("the upload was interrupted; is the server running?", true); });
    bar.hidden = false; bar.value = 0;
    say("uploading " + picked.length + " file(s)…", false);
    xhr.send(data);
  });
})();
