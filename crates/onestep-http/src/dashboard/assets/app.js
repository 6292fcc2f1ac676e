// onestep dashboard: refreshes the page body every few seconds (without a full reload, so
// scroll position and focus stay), asks before an action, and pauses while a form field is in
// use or when the user presses "Pause refresh". Without JavaScript the pages are plain pages.
(function () {
  "use strict";
  var body = document.body;
  var every = parseInt(body.getAttribute("data-refresh-ms"), 10) || 3000;
  var paused = false;
  var toggle = document.getElementById("refresh-toggle");

  function busy() {
    var active = document.activeElement;
    return active && /^(INPUT|SELECT|TEXTAREA)$/.test(active.tagName);
  }

  function refresh() {
    if (paused || busy() || document.hidden) {
      return;
    }
    fetch(window.location.href, {
      headers: { "X-Onestep-Fragment": "1" },
      credentials: "same-origin",
      redirect: "manual"
    })
      .then(function (response) {
        if (response.ok) {
          return response.text();
        }
        return null;
      })
      .then(function (html) {
        var main = document.getElementById("content");
        if (html !== null && main && !busy()) {
          main.innerHTML = html;
          body.setAttribute("data-refreshed-at", String(Date.now()));
        }
      })
      .catch(function () {
        // The server is away for a moment; the next tick tries again.
      });
  }

  if (toggle) {
    toggle.addEventListener("click", function () {
      paused = !paused;
      toggle.textContent = paused ? "Resume refresh" : "Pause refresh";
    });
  }

  document.addEventListener("submit", function (event) {
    var form = event.target;
    var question = form.getAttribute("data-confirm");
    if (question && !window.confirm(question)) {
      event.preventDefault();
    }
  });

  window.setInterval(refresh, every);
})();
