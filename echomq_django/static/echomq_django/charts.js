// EchoMQ dashboard: the value under the pointer on the last hour's charts.
// Each minute of a chart is a transparent rect (class emq-hit) carrying its
// text in data-tip; hovering it shows that text in the chart's tooltip and
// marks the minute. The listeners sit on the document, so charts swapped in
// by the live refresh (live.js) work at once; after a refresh the minute
// that was hovered is shown again on the new chart.
(function () {
  "use strict";

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

  // What is hovered, by name (the chart's section, the chart, the minute),
  // not by element: the live refresh replaces the elements.
  var hovered = null;

  function remember(hit, clientX) {
    var section = hit.closest(".emq-charts");
    var plot = hit.closest(".emq-plot");
    hovered = {
      section: section ? section.id : "",
      chart: plot ? plot.getAttribute("data-chart") : "",
      minute: hit.getAttribute("data-minute"),
      x: clientX
    };
  }

  function onHover(event) {
    var hit = event.target.closest && event.target.closest(".emq-hit");
    if (hit) {
      remember(hit, event.clientX);
      show(hit, event.clientX);
    }
  }

  document.addEventListener("mouseover", onHover);
  document.addEventListener("mousemove", onHover);
  document.addEventListener("mouseout", function (event) {
    // A chart swapped out by the refresh sends nothing that counts.
    if (!event.target.isConnected) {
      return;
    }
    var plot = event.target.closest && event.target.closest(".emq-plot");
    if (plot && !(event.relatedTarget && plot.contains(event.relatedTarget))) {
      hovered = null;
      hide(plot);
    }
  });
  document.addEventListener("emq:refreshed", function () {
    if (!hovered || !hovered.section) {
      return;
    }
    var section = document.getElementById(hovered.section);
    var hit = section && section.querySelector(
      '[data-chart="' + hovered.chart + '"] .emq-hit[data-minute="' + hovered.minute + '"]');
    if (hit) {
      show(hit, hovered.x);
    }
  });
})();
