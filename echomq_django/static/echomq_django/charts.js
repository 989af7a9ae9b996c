// EchoMQ dashboard: the value under the pointer on the last hour's charts.
// Each minute of a chart is a transparent rect (class emq-hit) carrying its
// text in data-tip; hovering it shows that text in the chart's tooltip and
// marks the minute. The listeners sit on the document, so charts swapped in
// by the live refresh (live.js) work at once; after a refresh the minute
// under a still pointer is shown again.
(function () {
  "use strict";
  var pointer = null;   // the last pointer position over a chart: {x, y}

  function hide(plot) {
    var tip = plot.querySelector(".emq-tip");
    if (tip) {
      tip.hidden = true;
    }
    plot.querySelectorAll(".emq-hit.emq-hover").forEach(function (el) {
      el.classList.remove("emq-hover");
    });
  }

  function show(hit, clientX) {
    var plot = hit.closest(".emq-plot");
    var tip = plot && plot.querySelector(".emq-tip");
    if (!tip) {
      return;
    }
    plot.querySelectorAll(".emq-hit.emq-hover").forEach(function (el) {
      if (el !== hit) {
        el.classList.remove("emq-hover");
      }
    });
    hit.classList.add("emq-hover");
    tip.textContent = hit.getAttribute("data-tip");
    tip.setAttribute("data-minute", hit.getAttribute("data-minute"));
    tip.hidden = false;
    var box = plot.getBoundingClientRect();
    var x = clientX - box.left;
    // Keep the tooltip inside the chart: right of the pointer, or left of
    // it near the right edge.
    var left = x + 12;
    if (left + tip.offsetWidth > box.width) {
      left = Math.max(0, x - 12 - tip.offsetWidth);
    }
    tip.style.left = left + "px";
  }

  document.addEventListener("mouseover", function (event) {
    var hit = event.target.closest && event.target.closest(".emq-hit");
    if (hit) {
      pointer = { x: event.clientX, y: event.clientY };
      show(hit, event.clientX);
    }
  });
  document.addEventListener("mousemove", function (event) {
    var hit = event.target.closest && event.target.closest(".emq-hit");
    if (hit) {
      pointer = { x: event.clientX, y: event.clientY };
      show(hit, event.clientX);
    }
  });
  document.addEventListener("mouseout", function (event) {
    var plot = event.target.closest && event.target.closest(".emq-plot");
    if (plot && !(event.relatedTarget && plot.contains(event.relatedTarget))) {
      pointer = null;
      hide(plot);
    }
  });
  document.addEventListener("emq:refreshed", function () {
    if (!pointer) {
      return;
    }
    var el = document.elementFromPoint(pointer.x, pointer.y);
    var hit = el && el.closest && el.closest(".emq-hit");
    if (hit) {
      show(hit, pointer.x);
    }
  });
})();
