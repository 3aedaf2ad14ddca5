/* Draws the dedup dashboard's charts from the figures the server computed (json_script "kb-dashboard-data").
   No figure is computed here: the page's numbers and the charts come from the same tested functions. */
(function () {
  "use strict";

  const COLORS = {
    turns: "#8aa4bf",
    hits: "#2f7d4f",
    misses: "#c9ced6",
    relaxed: "#d08a2c",
    passages: "#6a4fa3",
    rate: "#1f5f99",
    falseRate: "#b3261e",
    tokens: "#3d8fb8",
    seconds: "#2f7d4f",
    threshold: "#b3261e",
  };

  function textColor() {
    return getComputedStyle(document.body).getPropertyValue("--body-fg").trim() || "#333";
  }

  // The threshold's line, at its value on the chart's axis: the server starts the chart at or below the
  // threshold's bin, so the line falls inside (kept a pixel in from the edges for a threshold of 1). Its label is
  // written left of the line, or right of it where the left has no room (a threshold at the chart's left edge).
  const thresholdLine = {
    id: "kbThreshold",
    afterDatasetsDraw(chart, _args, options) {
      if (options.value == null) return;
      const scale = chart.scales.x;
      const { left, right, top, bottom } = chart.chartArea;
      const step = scale.getPixelForValue(1) - scale.getPixelForValue(0);
      const at = scale.getPixelForValue(0) - step / 2 + ((options.value - options.start) / options.width) * step;
      const x = Math.min(Math.max(at, left + 1), right - 1);
      const ctx = chart.ctx;
      ctx.save();
      ctx.strokeStyle = COLORS.threshold;
      ctx.lineWidth = 2;
      ctx.setLineDash([6, 4]);
      ctx.beginPath();
      ctx.moveTo(x, top);
      ctx.lineTo(x, bottom);
      ctx.stroke();
      ctx.setLineDash([]);
      ctx.fillStyle = COLORS.threshold;
      ctx.font = "600 12px sans-serif";
      const label = "threshold " + (options.label || options.value.toFixed(2));
      const roomOnLeft = x - 6 - ctx.measureText(label).width >= left;
      ctx.textAlign = roomOnLeft ? "right" : "left";
      ctx.fillText(label, roomOnLeft ? x - 6 : x + 6, top + 14);
      ctx.restore();
    },
  };

  function baseOptions() {
    return {
      responsive: true,
      maintainAspectRatio: false,
      animation: false,
      interaction: { mode: "index", intersect: false },
      plugins: { legend: { position: "bottom", labels: { color: textColor(), boxWidth: 14 } } },
    };
  }

  function axis(title, position, extra) {
    return Object.assign(
      {
        position: position,
        beginAtZero: true,
        title: { display: true, text: title, color: textColor() },
        ticks: { color: textColor(), precision: 0 },
        grid: { drawOnChartArea: position === "left" },
      },
      extra || {}
    );
  }

  function draw() {
    const source = document.getElementById("kb-dashboard-data");
    if (!source || typeof Chart === "undefined") return;
    const data = JSON.parse(source.textContent);
    const days = data.days;
    const xTicks = { ticks: { color: textColor(), maxRotation: 0, autoSkip: true, maxTicksLimit: 10 } };

    new Chart(document.getElementById("kb-chart-days"), {
      data: {
        labels: days.labels,
        datasets: [
          { type: "line", label: "Hit rate %", data: days.hit_rate, borderColor: COLORS.rate, backgroundColor: COLORS.rate, yAxisID: "pct", pointRadius: 2, spanGaps: true },
          { type: "bar", label: "Turns", data: days.turns, backgroundColor: COLORS.turns, yAxisID: "y" },
          { type: "bar", label: "Cache hits", data: days.hits, backgroundColor: COLORS.hits, yAxisID: "y" },
        ],
      },
      options: Object.assign(baseOptions(), {
        scales: { x: xTicks, y: axis("turns", "left"), pct: axis("hit rate %", "right", { max: 100 }) },
      }),
    });

    new Chart(document.getElementById("kb-chart-exclusion"), {
      data: {
        labels: days.labels,
        datasets: [
          { type: "bar", label: "Repeated passages avoided", data: days.passages_avoided, backgroundColor: COLORS.passages, yAxisID: "y" },
          { type: "bar", label: "Relaxed exclusions", data: days.relaxed, backgroundColor: COLORS.relaxed, yAxisID: "y" },
        ],
      },
      options: Object.assign(baseOptions(), { scales: { x: xTicks, y: axis("count", "left") } }),
    });

    new Chart(document.getElementById("kb-chart-reviews"), {
      data: {
        labels: days.labels,
        datasets: [
          { type: "line", label: "False-hit rate %", data: days.false_hit_rate, borderColor: COLORS.falseRate, backgroundColor: COLORS.falseRate, yAxisID: "pct", pointRadius: 3, showLine: false },
          { type: "bar", label: "Reviewed hits", data: days.reviewed_hits, backgroundColor: COLORS.turns, yAxisID: "y" },
          { type: "bar", label: "False hits", data: days.false_hits, backgroundColor: COLORS.falseRate, yAxisID: "y" },
        ],
      },
      options: Object.assign(baseOptions(), {
        scales: { x: xTicks, y: axis("reviewed hits", "left"), pct: axis("false-hit rate %", "right", { max: 100 }) },
      }),
    });

    new Chart(document.getElementById("kb-chart-savings"), {
      data: {
        labels: days.labels,
        datasets: [
          { type: "bar", label: "Tokens saved", data: days.tokens_saved, backgroundColor: COLORS.tokens, yAxisID: "y" },
          { type: "line", label: "Seconds saved", data: days.seconds_saved, borderColor: COLORS.seconds, backgroundColor: COLORS.seconds, yAxisID: "s", pointRadius: 2 },
        ],
      },
      options: Object.assign(baseOptions(), {
        scales: { x: xTicks, y: axis("tokens", "left"), s: axis("seconds", "right") },
      }),
    });

    // Leading empty bins are left out (down to 0.5 at least, never past the threshold's bin): `first` is computed
    // by the server (`histogram_first_shown`).
    const hist = data.histogram;
    const start = hist.first;
    new Chart(document.getElementById("kb-chart-similarity"), {
      type: "bar",
      data: {
        labels: hist.labels.slice(start),
        datasets: [
          { label: "Misses (answered afresh, bypassed)", data: hist.misses.slice(start), backgroundColor: COLORS.misses, stack: "s" },
          { label: "Hits (stored answer served)", data: hist.hits.slice(start), backgroundColor: COLORS.hits, stack: "s" },
        ],
      },
      options: Object.assign(baseOptions(), {
        barPercentage: 1.0,
        categoryPercentage: 0.95,
        scales: {
          x: { stacked: true, title: { display: true, text: "nearest-match similarity (bin start)", color: textColor() }, ticks: { color: textColor() } },
          y: axis("turns", "left", { stacked: true }),
        },
        plugins: Object.assign(baseOptions().plugins, {
          kbThreshold: { value: hist.threshold, label: hist.threshold_label, start: hist.lows[start], width: hist.width },
        }),
      }),
      plugins: [thresholdLine],
    });
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", draw);
  } else {
    draw();
  }
})();
