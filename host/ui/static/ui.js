// a2e-host memory browser: a little of our own script. Every read-only view works without it;
// with it, the Live page follows new writes and the Health charts refresh themselves.
"use strict";
(function () {
  function utcClock(date) {
    // the time of day in UTC, as every time the host's pages show ("08:50:12 UTC")
    return date.toISOString().slice(11, 19) + " UTC";
  }

  function follow(list) {
    // Live: ask for the changes after the cursor, put them on top
    var ns = list.getAttribute("data-ns");
    var after = list.getAttribute("data-after");
    var every = Number(list.getAttribute("data-every")) || 2000;
    if (!after) { return; }  // the store keeps no change log
    var status = document.getElementById("live-checked");
    function poll() {
      var url = "/ui/live.json?ns=" + encodeURIComponent(ns) + "&after=" + encodeURIComponent(after);
      fetch(url, { credentials: "same-origin", headers: { "Accept": "application/json" } })
        .then(function (r) { if (!r.ok) { throw new Error("HTTP " + r.status); } return r.json(); })
        .then(function (data) {
          if (data.html) {
            var box = document.createElement("div");
            box.innerHTML = data.html;  // rendered and escaped by the host, like the page
            var kids = Array.prototype.slice.call(box.children);
            for (var i = 0; i < kids.length; i++) {
              kids[i].classList.add("fresh");
              list.insertBefore(kids[i], list.firstChild);
            }
            var empty = document.getElementById("live-empty");
            if (empty) { empty.remove(); }
          }
          after = data.after || after;
          if (status) { status.textContent = "Last checked " + utcClock(new Date()) + "."; }
        })
        .catch(function (err) {
          if (status) { status.textContent = "Paused (" + err.message + "): retrying."; }
        })
        .then(function () { setTimeout(poll, every); });
    }
    setTimeout(poll, every);
  }

  function refresh(box) {
    // Health: fetch this page again and swap its charts in
    var every = Number(box.getAttribute("data-every")) || 5000;
    function again() {
      fetch(window.location.pathname + window.location.search, { credentials: "same-origin" })
        .then(function (r) { if (!r.ok) { throw new Error("HTTP " + r.status); } return r.text(); })
        .then(function (text) {
          var doc = new DOMParser().parseFromString(text, "text/html");
          var fresh = doc.getElementById(box.id);
          if (fresh) { box.innerHTML = fresh.innerHTML; }
        })
        .catch(function () {})
        .then(function () { setTimeout(again, every); });
    }
    setTimeout(again, every);
  }

  document.addEventListener("DOMContentLoaded", function () {
    var list = document.getElementById("live-list");
    if (list) { follow(list); }
    var charts = document.getElementById("charts");
    if (charts) { refresh(charts); }
  });
})();
