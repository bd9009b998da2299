// tune report: draws the experiment's data (the JSON in #tune-data) with uPlot and a canvas.
// Everything from trials (names, configs, metric names, errors) is put on the page as text
// (textContent, option labels, canvas text), never as HTML.
(function () {
  "use strict";
  var D = JSON.parse(document.getElementById("tune-data").textContent);
  var MAX_POINTS = 2000; // drawn per trial; the data and the table keep every value
  var MAX_MARKS = 5000;  // markers drawn for every trial up to this many, else the best's only
  var BEST = "#f07800";
  var trials = D.trials;
  // The curves: little-endian columns in base64 (x as float64 unless it is x0, x0+1, ...; each
  // metric as float32, NaN a gap), viewed in place as typed arrays.
  var bytes = (function (s) {
    if (Uint8Array.fromBase64) return Uint8Array.fromBase64(s);
    var bin = atob(s), a = new Uint8Array(bin.length);
    for (var i = 0; i < bin.length; i++) a[i] = bin.charCodeAt(i);
    return a;
  })(document.getElementById("tune-series").textContent);
  var littleEndian = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;
  function column(Type, off, n) {
    if (littleEndian) return new Type(bytes.buffer, bytes.byteOffset + off, n);
    var dv = new DataView(bytes.buffer, bytes.byteOffset + off), out = new Type(n);
    for (var i = 0; i < n; i++) out[i] = Type === Float64Array ? dv.getFloat64(i * 8, true) : dv.getFloat32(i * 4, true);
    return out;
  }
  trials.forEach(function (t) {
    t.x = t.xo !== undefined ? column(Float64Array, t.xo, t.n) : null;  // null: x0, x0+1, ...
    Object.keys(t.y).forEach(function (m) { t.y[m] = column(Float32Array, t.y[m], t.n); });
  });
  function xOf(t, j) { return t.x ? t.x[j] : t.x0 + j; }
  // The value drawn at x: that of the last row at or before x with a value (null if none).
  function valueAt(t, ys, x) {
    var j = t.x ? t.n - 1 : Math.min(t.n - 1, Math.floor(x - t.x0));
    while (j >= 0 && (xOf(t, j) > x || ys[j] !== ys[j])) j--;
    return j >= 0 ? ys[j] : null;
  }
  var bestIdx = D.best ? D.best.trial : -1;

  function el(tag, text, cls) {
    var e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }
  function fmt(v) {
    if (v === null || v === undefined) return "";
    if (typeof v === "number") return String(v);
    return typeof v === "string" ? v : JSON.stringify(v);
  }
  function dur(s) {
    s = Math.round(s || 0);
    var h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), r = s % 60;
    return (h ? h + "h " : "") + (h || m ? m + "m " : "") + r + "s";
  }
  function kv(pairs) {
    var box = el("div", null, "kv");
    pairs.forEach(function (p) { box.appendChild(el("div", p[0], "k")); box.appendChild(el("div", fmt(p[1]))); });
    return box;
  }

  // ---- Header and summary ----
  function summary() {
    document.getElementById("title").textContent = "Experiment " + D.name;
    document.getElementById("sub").textContent = D.dir + " \u2014 " + D.phase;
    var box = document.getElementById("summary");
    var c1 = el("div", null, "card");
    c1.appendChild(el("h2", "Best trial"));
    if (D.best) {
      var t = trials[D.best.trial];
      var pairs = [["trial", t.name], [D.metric + " (" + D.mode + ")", D.best.value],
                   ["checkpoint", D.best.checkpoint || "none retained"]];
      Object.keys(t.config).forEach(function (k) { pairs.push(["config/" + k, t.config[k]]); });
      c1.appendChild(kv(pairs));
    } else {
      c1.appendChild(el("div", D.metric ? "no trial has reported " + D.metric + " yet" :
                                "no metric set in the experiment", "muted"));
    }
    var c2 = el("div", null, "card");
    c2.appendChild(el("h2", "Trials"));
    var pairs2 = [["total", trials.length + " of " + D.total_trials]];
    Object.keys(D.counts).forEach(function (k) { pairs2.push([k, D.counts[k]]); });
    pairs2.push(["wall time", dur(D.elapsed_s)]);
    if (D.start_time) pairs2.push(["started", new Date(D.start_time * 1000).toISOString()]);
    c2.appendChild(kv(pairs2));
    box.appendChild(c1);
    box.appendChild(c2);
  }

  // ---- Learning curves ----
  var plot = null, drawnOrder = [];
  function metricChoices() {
    var sel = document.getElementById("metric");
    var names = D.metrics.slice();
    names.forEach(function (m) { var o = el("option", m); o.value = m; sel.appendChild(o); });
    if (D.metric && names.indexOf(D.metric) >= 0) sel.value = D.metric;
    sel.addEventListener("change", curves);
    document.getElementById("logscale").addEventListener("change", curves);
  }
  // Aligned data for uPlot: the union of every trial's x, decimated when it holds more than
  // MAX_POINTS values (drawing only). When every x is a run the union is a range: no set needed.
  function unionOf(list) {
    var runs = list.every(function (t) { return !t.x; });
    if (runs) {
      var lo = Infinity, hi = -Infinity;
      list.forEach(function (t) { if (t.n) { lo = Math.min(lo, t.x0); hi = Math.max(hi, t.x0 + t.n - 1); } });
      var len = hi >= lo ? hi - lo + 1 : 0;
      return { len: len, at: function (i) { return lo + i; }, index: function (x) { return x - lo; } };
    }
    var xs = new Set();
    list.forEach(function (t) { for (var j = 0; j < t.n; j++) xs.add(xOf(t, j)); });
    var all = Array.from(xs).sort(function (a, b) { return a - b; }), idx = new Map();
    all.forEach(function (x, i) { idx.set(x, i); });
    return { len: all.length, at: function (i) { return all[i]; }, index: function (x) { return idx.get(x); } };
  }
  function aligned(metric, log) {
    var order = [];
    trials.forEach(function (t, i) { if (t.y[metric] && i !== bestIdx) order.push(i); });
    if (bestIdx >= 0 && trials[bestIdx].y[metric]) order.push(bestIdx);
    var u = unionOf(order.map(function (i) { return trials[i]; }));
    var step = Math.max(1, Math.ceil(u.len / MAX_POINTS)), last = u.len - 1;
    var keep = [];
    for (var i = 0; i < u.len; i += step) keep.push(u.at(i));
    if (u.len && last % step !== 0) keep.push(u.at(last));
    var data = [keep];
    order.forEach(function (ti) {
      var t = trials[ti], col = new Array(keep.length).fill(null), ys = t.y[metric];
      for (var j = 0; j < t.n; j++) {
        var k = u.index(xOf(t, j)), v = ys[j];
        if (k === undefined || v !== v || (log && v <= 0)) continue;
        if (k % step === 0) col[k / step] = v;
        else if (k === last) col[keep.length - 1] = v;
      }
      data.push(col);
    });
    document.getElementById("downsampled").textContent = step > 1 ?
      "drawn with every " + step + "th point of " + u.len + " (the table keeps exact values)" : "";
    return { data: data, order: order };
  }
  // Each mark's glyph: checkpoints, the scheduler's decisions, and how a trial ended.
  var GLYPHS = {
    ckpt: function (c, x, y) { c.strokeStyle = "#1f6fd1"; c.lineWidth = 1; c.beginPath(); c.arc(x, y, 3.5, 0, 2 * Math.PI); c.stroke(); },
    stopped: function (c, x, y) { c.fillStyle = "#c0392b"; c.beginPath(); c.moveTo(x - 5, y - 5); c.lineTo(x + 5, y - 5); c.lineTo(x, y + 3); c.closePath(); c.fill(); },
    max_t: function (c, x, y) { c.fillStyle = "#2a9d4b"; c.beginPath(); c.moveTo(x - 3, y - 5); c.lineTo(x + 5, y); c.lineTo(x - 3, y + 5); c.closePath(); c.fill(); },
    paused: function (c, x, y) { c.fillStyle = "#8a5cd1"; c.fillRect(x - 4, y - 4, 3, 8); c.fillRect(x + 1, y - 4, 3, 8); },
    exploited: function (c, x, y) { c.fillStyle = "#0f8b8d"; c.beginPath(); c.moveTo(x, y - 5); c.lineTo(x + 5, y); c.lineTo(x, y + 5); c.lineTo(x - 5, y); c.closePath(); c.fill(); },
    TERMINATED: function (c, x, y) { c.fillStyle = "#2a9d4b"; c.fillRect(x - 3, y - 3, 6, 6); },
    ERROR: function (c, x, y) { c.strokeStyle = "#d1281f"; c.lineWidth = 2; c.beginPath(); c.moveTo(x - 4, y - 4); c.lineTo(x + 4, y + 4); c.moveTo(x + 4, y - 4); c.lineTo(x - 4, y + 4); c.stroke(); }
  };
  // The marks of trial t: [x, kind] for each checkpoint, decision, and its end (TERMINATED or
  // ERROR, at its last row).
  function marksOf(t) {
    var out = [];  // drawn in this order: the decisions on top
    if ((t.status === "TERMINATED" || t.status === "ERROR") && t.n) out.push([xOf(t, t.n - 1), t.status]);
    t.ckpts.forEach(function (ci) { out.push([ci, "ckpt"]); });
    t.marks.forEach(function (m) { out.push([m[0], m[1]]); });
    return out;
  }
  function markers(u) {
    var metric = document.getElementById("metric").value, ctx = u.ctx, counts = {};
    var total = 0;
    drawnOrder.forEach(function (ti) { total += trials[ti].ckpts.length + trials[ti].marks.length + 1; });
    var all = total <= MAX_MARKS;
    var lo = u.scales.x.min, hi = u.scales.x.max, log = document.getElementById("logscale").checked;
    ctx.save();
    drawnOrder.forEach(function (ti) {
      if (!all && ti !== bestIdx) return;
      var t = trials[ti], ys = t.y[metric];
      marksOf(t).forEach(function (m) {
        var y = valueAt(t, ys, m[0]);
        if (y === null || m[0] < lo || m[0] > hi || (log && y <= 0) || !GLYPHS[m[1]]) return;
        GLYPHS[m[1]](ctx, u.valToPos(m[0], "x", true), u.valToPos(y, "y", true));
        counts[m[1]] = (counts[m[1]] || 0) + 1;
      });
    });
    ctx.restore();
    // What was drawn, for tests and tools: data-marks="ckpt:4 stopped:2 ...".
    document.getElementById("curves").setAttribute("data-marks", Object.keys(counts).sort().map(function (k) {
      return k + ":" + counts[k]; }).join(" "));
    document.getElementById("marks-note").textContent = all ? "" :
      "markers drawn for the best trial only (" + total + " in all)";
  }
  // The hover line: the trial's name and what the scheduler decided about it.
  function describe(t) {
    var parts = t.marks.map(function (m) { return m[2]; });
    if (t.ckpts.length) parts.push("checkpoints at " + t.ckpts.join(", "));
    return t.name + (parts.length ? " \u2014 " + parts.join("; ") : "");
  }
  function curves() {
    var box = document.getElementById("curves");
    var metric = document.getElementById("metric").value;
    var log = document.getElementById("logscale").checked;
    if (plot) { plot.destroy(); plot = null; }
    box.textContent = "";
    if (!metric) { box.appendChild(el("div", "no numeric result reported yet", "muted")); return; }
    var a = aligned(metric, log);
    drawnOrder = a.order;
    var n = a.order.length, width = 1.2, alpha = n > 200 ? 0.25 : n > 30 ? 0.5 : 0.8;
    var series = [{ label: D.time_attr }];
    a.order.forEach(function (i) {
      var best = i === bestIdx;
      series.push({ label: trials[i].name, stroke: best ? BEST : "rgba(60,110,170," + alpha + ")",
                    width: best ? 3 : width, spanGaps: true, points: { show: false } });
    });
    var opts = {
      width: Math.max(300, box.clientWidth || 900), height: 360,
      legend: { show: false },
      cursor: { focus: { prox: 16 }, drag: { x: true, y: false } },
      focus: { alpha: 0.3 },
      scales: { x: { time: false }, y: { distr: log ? 3 : 1 } },
      axes: [{ label: D.time_attr }, { label: metric, size: 70 }],
      series: series,
      hooks: {
        draw: [markers],
        setSeries: [function (u, si) {
          document.getElementById("hover").textContent = si ? describe(trials[a.order[si - 1]]) : "";
        }]
      }
    };
    plot = new uPlot(opts, a.data, box);
  }

  // ---- Parallel coordinates ----
  function axisOf(name, values) {
    var present = values.filter(function (v) { return v !== null && v !== undefined; });
    var numeric = present.length > 0 && present.every(function (v) { return typeof v === "number"; });
    if (numeric) {
      var lo = Math.min.apply(null, present), hi = Math.max.apply(null, present);
      var log = lo > 0 && hi / lo >= 100;
      var f = function (v) { return log ? Math.log(v) : v; };
      return { name: name, label: function (v) { return String(+v.toPrecision(4)); }, lo: lo, hi: hi,
               pos: function (v) { return hi === lo ? 0.5 : (f(v) - f(lo)) / (f(hi) - f(lo)); } };
    }
    var cats = Array.from(new Set(present.map(fmt))).sort();
    return { name: name, cats: cats,
             pos: function (v) { return cats.length < 2 ? 0.5 : cats.indexOf(fmt(v)) / (cats.length - 1); } };
  }
  function parcoords() {
    var cv = document.getElementById("parcoords");
    var metric = document.getElementById("metric").value || D.metric;
    var W = cv.clientWidth || 900, H = 320, dpr = window.devicePixelRatio || 1;
    cv.width = W * dpr; cv.height = H * dpr; cv.style.height = H + "px";
    var ctx = cv.getContext("2d");
    ctx.scale(dpr, dpr);
    ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, W, H);
    var params = D.params.slice(0, 16);
    var finals = trials.map(function (t) { var v = metric ? t.last[metric] : undefined; return v === undefined ? null : v; });
    var axes = params.map(function (p) { return axisOf(p, trials.map(function (t) { return t.config[p]; })); });
    axes.push(axisOf(metric ? metric + " (last)" : "metric", finals));
    if (axes.length < 2 && params.length === 0) {
      ctx.fillStyle = "#68707c"; ctx.fillText("no hyperparameters vary", 20, 30); return;
    }
    var top = 40, bottom = H - 24, left = 60, right = W - 60;
    var xAt = function (i) { return axes.length === 1 ? (left + right) / 2 : left + (right - left) * i / (axes.length - 1); };
    var m = axes[axes.length - 1];
    var color = function (v) {
      if (v === null || m.cats || m.hi === m.lo) return "rgba(150,150,150,0.5)";
      var q = m.pos(v); if (D.mode === "max") q = 1 - q; // q = 0: best end
      return "hsla(" + Math.round(220 - 220 * q) + ",70%,45%,0.55)";
    };
    var line = function (t, ti) {
      ctx.beginPath();
      var started = false;
      axes.forEach(function (ax, i) {
        var v = i === axes.length - 1 ? finals[ti] : t.config[ax.name];
        if (v === null || v === undefined) { started = false; return; }
        var y = bottom - (bottom - top) * ax.pos(v);
        if (started) ctx.lineTo(xAt(i), y); else ctx.moveTo(xAt(i), y);
        started = true;
      });
      ctx.stroke();
    };
    ctx.lineWidth = 1;
    trials.forEach(function (t, ti) { if (ti !== bestIdx) { ctx.strokeStyle = color(finals[ti]); line(t, ti); } });
    if (bestIdx >= 0) { ctx.strokeStyle = BEST; ctx.lineWidth = 3; line(trials[bestIdx], bestIdx); }
    ctx.lineWidth = 1; ctx.strokeStyle = "#333"; ctx.fillStyle = "#1d232b"; ctx.font = "12px sans-serif";
    ctx.textAlign = "center";
    axes.forEach(function (ax, i) {
      var x = xAt(i);
      ctx.beginPath(); ctx.moveTo(x, top); ctx.lineTo(x, bottom); ctx.stroke();
      ctx.fillText(ax.name.length > 24 ? ax.name.slice(0, 11) + "\u2026" + ax.name.slice(-12) : ax.name, x, 14);
      var ends = ax.cats ? [ax.cats[0], ax.cats[ax.cats.length - 1]] : ax.lo === undefined ? [] : [ax.label(ax.lo), ax.label(ax.hi)];
      if (ends.length) { ctx.fillText(String(ends[0]).slice(0, 16), x, bottom + 14); ctx.fillText(String(ends[1]).slice(0, 16), x, top - 6); }
    });
  }

  // ---- Trial table ----
  var sortCol = null, sortDir = 1;
  function columns() {
    var cols = [
      { name: "trial", get: function (t) { return t.name; } },
      { name: "status", get: function (t) { return t.status; }, cls: function (t) { return "status s-" + t.status; } },
      { name: "host", get: function (t) { return t.host; } },
      { name: "iter", get: function (t) { return t.iter; } }];
    if (D.metric) {
      cols.push({ name: D.metric + " last", get: function (t) { var v = t.last[D.metric]; return v === undefined ? null : v; } });
      cols.push({ name: D.metric + " best", get: function (t) { return t.best; } });
    }
    D.params.forEach(function (p) { cols.push({ name: "config/" + p, get: function (t) { var v = t.config[p]; return v === undefined ? null : v; } }); });
    cols.push({ name: "checkpoints", get: function (t) { return t.ckpts.length; } });
    cols.push({ name: "time (s)", get: function (t) { return t.time_total_s; } });
    cols.push({ name: "error", get: function (t) { return t.error || null; } });
    return cols;
  }
  function table() {
    var cols = columns(), thead = document.querySelector("#trials thead"), tbody = document.querySelector("#trials tbody");
    var hr = el("tr");
    cols.forEach(function (c, ci) {
      var th = el("th", c.name);
      th.addEventListener("click", function () {
        sortDir = sortCol === ci ? -sortDir : 1; sortCol = ci; fill();
      });
      hr.appendChild(th);
    });
    thead.appendChild(hr);
    var rows = trials.map(function (t, ti) {
      var tr = el("tr");
      if (ti === bestIdx) tr.className = "best";
      var vals = cols.map(function (c) { return c.get(t); });
      vals.forEach(function (v, ci) {
        var td = el("td", fmt(v), typeof v === "number" ? "num" : "");
        if (cols[ci].cls) td.className = cols[ci].cls(t);
        tr.appendChild(td);
      });
      return { tr: tr, vals: vals, text: vals.map(fmt).join("\u0001").toLowerCase() };
    });
    var filter = document.getElementById("filter");
    function fill() {
      var q = filter.value.trim().toLowerCase(), list = rows.slice();
      if (sortCol !== null) {
        list.sort(function (a, b) {
          var x = a.vals[sortCol], y = b.vals[sortCol];
          if (x === null || x === undefined) return y === null || y === undefined ? 0 : 1;
          if (y === null || y === undefined) return -1;
          if (typeof x === "number" && typeof y === "number") return (x - y) * sortDir;
          return String(x).localeCompare(String(y), undefined, { numeric: true }) * sortDir;
        });
      }
      Array.prototype.forEach.call(thead.querySelectorAll("th"), function (th, i) {
        th.className = i === sortCol ? (sortDir > 0 ? "sorted-asc" : "sorted-desc") : "";
      });
      tbody.textContent = "";
      var shown = 0;
      list.forEach(function (r) { if (!q || r.text.indexOf(q) >= 0) { tbody.appendChild(r.tr); shown++; } });
      document.getElementById("shown").textContent = shown + " of " + rows.length + " trials";
    }
    filter.addEventListener("input", fill);
    fill();
  }

  // Each stage's time, for the benchmark (bench/report_bench.py reads body[data-stage-ms]).
  var stages = [["parse", null], ["summary", summary], ["choices", metricChoices], ["curves", curves],
                ["parcoords", parcoords], ["table", table]];
  var t0 = performance.now(), spent = ["parse:" + Math.round(t0)];
  stages.slice(1).forEach(function (s) {
    s[1]();
    var t1 = performance.now();
    spent.push(s[0] + ":" + Math.round(t1 - t0));
    t0 = t1;
  });
  document.body.setAttribute("data-stage-ms", spent.join(" "));
  document.getElementById("metric").addEventListener("change", parcoords);
  document.body.setAttribute("data-render-ms", String(Math.round(performance.now())));
  document.body.setAttribute("data-rendered", "1");
})();
