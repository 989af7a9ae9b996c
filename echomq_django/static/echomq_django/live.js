// EchoMQ dashboard: refresh the page's live part in place every couple of
// seconds, with a pause toggle and an "updated N s ago" mark. The server
// answers ?fragment=1 with the live part only (header X-EchoMQ-Live: 1); any
// other answer (a login page after the session ended, an error) leaves the
// page as it is and marks the stamp stale; a 503 marked X-EchoMQ-Unavailable
// says the EchoMQ server is not answering. The page shown while it is not
// (data-unavailable) loads itself again at the first other answer.
(function () {
  "use strict";

  function start() {
    var root = document.getElementById("emq-live");
    var toggle = document.getElementById("emq-live-toggle");
    var stamp = document.getElementById("emq-live-stamp");
    if (!root || !toggle || !stamp) {
      return;
    }
    var every = parseInt(root.getAttribute("data-refresh-ms"), 10) || 2000;
    var paused = false;
    var busy = false;
    var last = Date.now();
    var standIn = root.hasAttribute("data-unavailable");
    var failed = standIn;
    var unreachable = standIn;

    function fragmentUrl() {
      var url = new URL(window.location.href);
      url.searchParams.set("fragment", "1");
      return url.toString();
    }

    function showAge() {
      var seconds = Math.max(0, Math.round((Date.now() - last) / 1000));
      var text = "updated " + seconds + " s ago";
      if (paused) {
        text += " (paused)";
      } else if (unreachable) {
        text += " (the EchoMQ server is not answering)";
      } else if (failed) {
        text += " (last refresh failed)";
      }
      stamp.textContent = text;
      stamp.classList.toggle("emq-stale", failed);
    }

    function typing() {
      // Do not swap the form someone is typing in.
      var el = document.activeElement;
      return el && root.contains(el) && (el.tagName === "INPUT" || el.tagName === "TEXTAREA");
    }

    function refresh() {
      if (paused || busy || document.hidden || typing()) {
        return;
      }
      busy = true;
      fetch(fragmentUrl(), {
        credentials: "same-origin",
        headers: { "X-Requested-With": "XMLHttpRequest" },
        cache: "no-store",
        redirect: "manual"
      }).catch(function (error) {
        unreachable = false;  // this site did not answer: not the EchoMQ server
        throw error;
      }).then(function (response) {
        unreachable = response.status === 503 &&
          response.headers.get("X-EchoMQ-Unavailable") === "1";
        if (standIn && (response.type === "opaqueredirect" || response.status < 500)) {
          // The server answers again: load the whole page, whatever it is
          // now (the page, a redirect's target, a 404 for a job gone). A
          // 5xx (a proxy's, a fault of ours) leaves the stand-in asking.
          window.location.reload();
          return null;
        }
        if (!response.ok || response.headers.get("X-EchoMQ-Live") !== "1") {
          throw new Error("status " + response.status);
        }
        return response.text();
      }).then(function (html) {
        if (html !== null && !paused) {
          // Unfolded tracebacks stay unfolded across the swap.
          var open = Array.prototype.map.call(
            root.querySelectorAll("details[id][open]"), function (el) { return el.id; });
          root.innerHTML = html;
          open.forEach(function (id) {
            var el = document.getElementById(id);
            if (el) {
              el.open = true;
            }
          });
          last = Date.now();
          failed = false;
          root.dispatchEvent(new CustomEvent("emq:refreshed", { bubbles: true }));
        }
      }).catch(function () {
        failed = true;
      }).then(function () {
        busy = false;
        showAge();
      });
    }

    toggle.addEventListener("click", function () {
      paused = !paused;
      toggle.setAttribute("aria-pressed", paused ? "true" : "false");
      toggle.textContent = paused ? "Resume live updates" : "Pause live updates";
      root.classList.toggle("emq-frozen", paused);
      showAge();
      if (!paused) {
        refresh();
      }
    });

    window.setInterval(refresh, every);
    window.setInterval(showAge, 1000);
    showAge();
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
