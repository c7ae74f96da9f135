// The live view of a dblog worker: polls /api/v1/status and /api/v1/feed and draws
// the log stream, the watermark windows, the dump's progress and the lag, as they happen.
// Plain JavaScript, no dependencies. A token in the URL fragment (#token=...) is sent as
// "Authorization: Bearer ..." on every fetch; the fragment never leaves the browser.
"use strict";
(function () {
  var STATUS_EVERY_MS = 1000;
  var FEED_EVERY_MS = 500;
  var MAX_LINES = 600;
  var MAX_WINDOWS = 10;
  var CHART_SPAN_S = 300;

  var token = new URLSearchParams(location.hash.slice(1)).get("token");
  var headers = token ? { Authorization: "Bearer " + token } : {};
  var after = 0;
  var paused = false;
  var held = [];
  var windows = [];
  var lastDump = null;
  var feedFailures = 0;

  function $(id) { return document.getElementById(id); }

  function AuthError(message) { this.message = message; }

  function get(path) {
    return fetch(path, { headers: headers, cache: "no-store" }).then(function (response) {
      if (response.status === 401 || response.status === 403) {
        return response.json().catch(function () { return {}; }).then(function (body) {
          throw new AuthError(body.error || "the worker wants a token");
        });
      }
      if (!response.ok) {
        return response.json().catch(function () { return {}; }).then(function (body) {
          throw new Error(body.error || ("HTTP " + response.status));
        });
      }
      return response.json();
    });
  }

  // -- formatting ------------------------------------------------------------------------

  function int(n) { return n == null ? "–" : Number(n).toLocaleString("en-US"); }

  function seconds(s) {
    if (s == null) return "–";
    if (s < 1) return Math.round(s * 1000) + " ms";
    if (s < 60) return s.toFixed(s < 10 ? 2 : 1) + " s";
    var m = Math.floor(s / 60);
    if (m < 60) return m + "m " + String(Math.round(s % 60)).padStart(2, "0") + "s";
    return Math.floor(m / 60) + "h " + String(m % 60).padStart(2, "0") + "m";
  }

  function bytes(n) {
    if (n == null) return "–";
    var units = ["B", "KiB", "MiB", "GiB", "TiB"];
    var i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return (i ? n.toFixed(1) : String(n)) + " " + units[i];
  }

  function clock(ts) {
    var d = new Date(ts * 1000);
    return String(d.getHours()).padStart(2, "0") + ":" + String(d.getMinutes()).padStart(2, "0")
      + ":" + String(d.getSeconds()).padStart(2, "0") + "."
      + String(d.getMilliseconds()).padStart(3, "0");
  }

  function windowName(id) { return "#" + String(id).split(".").pop(); }

  function span(cls, text) {
    var el = document.createElement("span");
    if (cls) el.className = cls;
    el.textContent = text;
    return el;
  }

  function setText(id, text) { var el = $(id); if (el.textContent !== text) el.textContent = text; }

  // -- the stream --------------------------------------------------------------------------

  function parts(entry) {
    var p = [];
    switch (entry.type) {
      case "log": {
        p.push(["tag", "LOG"]);
        Object.keys(entry.tables).forEach(function (t) {
          p.push(["t", " " + t], ["", " +" + int(entry.tables[t])]);
        });
        (entry.samples || []).slice(-2).forEach(function (s) {
          p.push(["k", "  · " + s.op + " " + s.table + " " + s.key + " @" + s.position]);
        });
        break;
      }
      case "window_opened":
        p.push(["tag", "LW"], ["", " window " + windowName(entry.window) + " "], ["t", entry.table],
               ["", "  chunk of " + int(entry.selected) + " rows selected"],
               ["k", "  " + entry.dump_id + "  " + entry.low]);
        break;
      case "window_closed":
        p.push(["tag", "HW"], ["", " window " + windowName(entry.window) + " "], ["t", entry.table],
               ["", "  selected " + int(entry.selected) + "  "],
               [entry.dropped ? "drop" : "", "dropped " + int(entry.dropped)],
               ["", "  "], ["emit", "emitted " + int(entry.emitted)],
               ["k", "  @" + entry.position + (entry.open_s != null ? "  after " + seconds(entry.open_s) : "")]);
        break;
      case "durable":
        p.push(["tag", "SAVE"], ["", " " + int(entry.events) + " events durable"],
               ["k", (entry.checkpoint ? "  checkpoint " + entry.checkpoint : "")
                     + (entry.lag_s != null ? "  lag " + seconds(entry.lag_s) : "")]);
        break;
      case "dump": {
        p.push(["tag", "DUMP"], ["", " " + entry.request_id + " " + entry.state
                                     + (entry.priority ? " (" + entry.priority + ")" : "")]);
        if (entry.state === "started" || entry.state === "resumed") {
          p.push(["k", "  " + (entry.kind || "") + ": " + (entry.tables || []).join(", ")]);
        } else if (entry.progress) {
          p.push(["k", "  " + entry.progress.map(function (t) {
            return t.table + " " + (t.ratio == null ? "?" : (t.ratio * 100).toFixed(1) + "%")
              + " (" + int(t.rows) + " rows, " + int(t.dropped) + " dropped)";
          }).join(", ")]);
        }
        if (entry.error) p.push(["drop", "  " + entry.error]);
        break;
      }
      case "session":
        p.push(["tag", "CONN"], ["", " session " + (entry.run_id || "") + " " + entry.state]);
        if (entry.checkpoint) p.push(["k", "  from " + entry.checkpoint]);
        if (entry.error) p.push(["drop", "  " + entry.error]);
        break;
      case "lease":
        p.push(["tag", "LEAD"], ["", entry.role === "leader"
          ? " this worker leads (lease token " + entry.token + ")"
          : " this worker is " + entry.role + (entry.role === "standby" ? ": another leads" : "")]);
        break;
      case "error":
        p.push(["tag", "ERR"], ["", " " + entry.kind + ": " + entry.message
                                    + (entry.request_id ? " (dump " + entry.request_id + ")" : "")]);
        break;
      default:
        p.push(["tag", entry.type.slice(0, 4).toUpperCase()], ["k", " " + JSON.stringify(entry)]);
    }
    return p;
  }

  var LINE_CLASS = { window_opened: "window-opened", window_closed: "window-closed" };

  function appendLines(entries) {
    var stream = $("stream");
    var atBottom = stream.scrollTop + stream.clientHeight >= stream.scrollHeight - 24;
    var fragment = document.createDocumentFragment();
    entries.forEach(function (entry) {
      var line = document.createElement("div");
      line.className = "line " + (LINE_CLASS[entry.type] || entry.type);
      line.dataset.seq = entry.seq;
      line.dataset.type = entry.type;
      line.appendChild(span("ts", clock(entry.ts) + " "));
      parts(entry).forEach(function (part) { line.appendChild(span(part[0], part[1])); });
      fragment.appendChild(line);
    });
    stream.appendChild(fragment);
    while (stream.childElementCount > MAX_LINES) stream.removeChild(stream.firstElementChild);
    if (atBottom) stream.scrollTop = stream.scrollHeight;
  }

  // -- windows and dumps from the feed --------------------------------------------------------

  function track(entry) {
    if (entry.type === "window_opened") {
      windows.push({ id: entry.window, table: entry.table, selected: entry.selected, open: true });
      if (windows.length > MAX_WINDOWS) windows.shift();
    } else if (entry.type === "window_closed") {
      var w = windows.find(function (x) { return x.id === entry.window; });
      if (!w) { w = { id: entry.window, table: entry.table }; windows.push(w); }
      w.open = false; w.selected = entry.selected; w.dropped = entry.dropped;
      w.emitted = entry.emitted; w.open_s = entry.open_s;
      if (windows.length > MAX_WINDOWS) windows.shift();
    } else if (entry.type === "dump" && entry.progress && entry.state !== "progress"
               && entry.state !== "started" && entry.state !== "resumed") {
      lastDump = { request_id: entry.request_id, state: entry.state, tables: entry.progress,
                   eta_s: null, error: entry.error };
    } else if (entry.type === "session" && entry.state !== "connected") {
      windows.forEach(function (x) { if (x.open) { x.open = false; x.lost = true; } });
    }
  }

  function drawWindows() {
    var body = $("windows");
    var rows = document.createDocumentFragment();
    windows.slice().reverse().forEach(function (w) {
      var tr = document.createElement("tr");
      tr.className = w.open ? "open" : "closed";
      tr.dataset.window = w.id;
      [[windowName(w.id), ""], [w.table, ""], [int(w.selected), "num"],
       [w.open ? "…" : (w.lost ? "lost" : int(w.dropped)), "num" + (w.dropped ? " drop" : "")],
       [w.open ? "…" : (w.lost ? "–" : int(w.emitted)), "num"],
       [w.open ? "open" : (w.open_s == null ? "–" : seconds(w.open_s)), "num"]].forEach(function (cell) {
        var td = document.createElement("td");
        td.textContent = cell[0];
        td.className = cell[1];
        tr.appendChild(td);
      });
      rows.appendChild(tr);
    });
    body.replaceChildren(rows);
  }

  function dumpHead(view) {
    return view.request_id + " · " + view.state
      + (view.priority ? " · " + view.priority : "")
      + (view.kind ? " · " + view.kind : "")
      + (view.eta_s != null ? " · ETA " + seconds(view.eta_s) : "")
      + (view.waiting ? " · waiting: " + view.waiting : "")
      + (view.throttle ? " · throttle: " + view.throttle.text : "");
  }

  function dumpTable(t) {
    var item = document.createElement("div");
    item.className = "dump-table";
    item.dataset.table = t.table;
    var name = document.createElement("div");
    name.className = "name";
    name.appendChild(span("", t.table));
    var pct = t.done ? "done" : (t.ratio == null ? (t.started ? "estimating…" : "waiting")
                                                 : (t.ratio * 100).toFixed(1) + " %");
    name.appendChild(span("pct", pct));
    var bar = document.createElement("div");
    bar.className = "bar" + (t.done ? " done" : "") + (t.ratio == null && !t.done ? " unknown" : "");
    bar.dataset.ratio = t.done ? "1" : (t.ratio == null ? "" : String(t.ratio));
    bar.setAttribute("role", "progressbar");
    bar.setAttribute("aria-valuemin", "0");
    bar.setAttribute("aria-valuemax", "100");
    if (t.ratio != null) bar.setAttribute("aria-valuenow", String(Math.round(t.ratio * 100)));
    var fill = document.createElement("div");
    fill.className = "fill";
    fill.style.width = ((t.done ? 1 : (t.ratio || 0)) * 100).toFixed(2) + "%";
    bar.appendChild(fill);
    var stats = document.createElement("div");
    stats.className = "stats";
    stats.textContent = int(t.rows) + " rows emitted · " + int(t.dropped) + " dropped · "
      + int(t.chunks) + " chunks" + (t.missing ? " · " + int(t.missing) + " keys missing" : "")
      + (t.done ? "" : " · ETA " + (t.eta_s == null ? "estimating…" : seconds(t.eta_s)));
    item.appendChild(name);
    item.appendChild(bar);
    item.appendChild(stats);
    return item;
  }

  // The dumps the worker runs, in queue order (priority, then age); the last one that
  // ended while none runs. One dump: its line is the panel's head; several: one line each.
  function drawDumps(dumps) {
    var views = dumps && dumps.length ? dumps : (lastDump ? [lastDump] : []);
    var box = $("dump");
    if (!views.length) {
      setText("dump-head", "no dump running");
      box.replaceChildren();
      return;
    }
    setText("dump-head", views.length === 1 ? dumpHead(views[0])
                                           : views.length + " dumps, by priority");
    var fragment = document.createDocumentFragment();
    views.forEach(function (view) {
      var block = document.createElement("div");
      block.className = "dump";
      block.dataset.request = view.request_id;
      if (view.priority) block.dataset.priority = view.priority;
      if (views.length > 1) block.appendChild(span("dump-line", dumpHead(view)));
      view.tables.forEach(function (t) { block.appendChild(dumpTable(t)); });
      fragment.appendChild(block);
    });
    box.replaceChildren(fragment);
  }

  // -- charts -------------------------------------------------------------------------------

  function niceCeiling(v) {
    if (!(v > 0)) return 1;
    var p = Math.pow(10, Math.floor(Math.log10(v)));
    var steps = [1, 2, 2.5, 5, 10];
    for (var i = 0; i < steps.length; i++) if (steps[i] * p >= v) return steps[i] * p;
    return 10 * p;
  }

  function svg(name, attrs) {
    var el = document.createElementNS("http://www.w3.org/2000/svg", name);
    Object.keys(attrs).forEach(function (k) { el.setAttribute(k, attrs[k]); });
    return el;
  }

  function drawChart(id, points, format) {
    var chart = $(id);
    var W = 300, H = 140, L = 46, R = 6, T = 8, B = 18;
    var now = Date.now() / 1000;
    var oldest = points.length ? points[0][0] : now;
    var span = Math.min(CHART_SPAN_S, Math.max(60, Math.ceil((now - oldest) / 60) * 60));
    var start = now - span;
    var shown = points.filter(function (p) { return p[0] >= start; });
    var top = niceCeiling(Math.max.apply(null, shown.map(function (p) { return p[1]; }).concat([0])) * 1.1);
    var x = function (t) { return L + (t - start) / span * (W - L - R); };
    var y = function (v) { return T + (1 - v / top) * (H - T - B); };
    var nodes = [];
    for (var i = 0; i <= 4; i++) {
      var v = top * i / 4;
      nodes.push(svg("line", { x1: L, x2: W - R, y1: y(v), y2: y(v), "class": "grid" }));
      var label = svg("text", { x: L - 6, y: y(v) + 3, "text-anchor": "end", "class": "axis" });
      label.textContent = format(v);
      nodes.push(label);
    }
    [1, 0.5, 0].forEach(function (share) {
      var ago = span * share;
      var label = svg("text", { x: x(now - ago), y: H - 4, "text-anchor": share === 1 ? "start" : (share ? "middle" : "end"), "class": "axis" });
      label.textContent = ago ? "-" + (ago >= 60 ? ago / 60 + "m" : ago + "s") : "now";
      nodes.push(label);
    });
    if (shown.length) {
      var line = shown.map(function (p) { return x(p[0]).toFixed(1) + "," + y(p[1]).toFixed(1); });
      nodes.push(svg("polygon", { points: x(shown[0][0]).toFixed(1) + "," + y(0) + " " + line.join(" ")
                                        + " " + x(shown[shown.length - 1][0]).toFixed(1) + "," + y(0),
                                  "class": "area" }));
      nodes.push(svg("polyline", { points: line.join(" "), "class": "series" }));
    }
    chart.replaceChildren.apply(chart, nodes);
    chart.dataset.points = String(shown.length);
  }

  // -- status ---------------------------------------------------------------------------------

  function connection(state, text, title) {
    var pill = $("connection");
    pill.className = "pill " + { ok: "pill-ok", wait: "pill-wait", bad: "pill-bad" }[state];
    pill.dataset.state = text;
    pill.textContent = text;
    pill.title = title || "";
  }

  function showStatus(s) {
    setText("source", s.source);
    document.title = "dblog live · " + s.source;
    if (s.connected) connection("ok", "streaming", "a session streams the log");
    else connection("wait", "not streaming", s.last_error || "connecting");
    setText("run", s.run_id ? "session " + s.run_id : "");
    setText("uptime", "up " + seconds(s.uptime_s));
    setText("version", "v" + (s.version || "?"));
    setText("events-rate", int(Math.round(s.events_per_s)));
    setText("lag", seconds(s.lag_s));
    setText("lag-bytes", bytes(s.lag_bytes));
    setText("checkpoint", s.checkpoint || "–");
    setText("checkpoint-age", s.checkpoint_age_s == null ? "" : "saved " + seconds(s.checkpoint_age_s) + " ago");
    setText("position", s.position || "–");
    if (s.window) {
      setText("window", s.window.table);
      setText("window-sub", s.window.low + (s.open_windows > 1 ? " (+" + (s.open_windows - 1) + " queued)" : ""));
    } else {
      var last = windows.length ? windows[windows.length - 1] : null;
      setText("window", "none open");
      setText("window-sub", last ? "last " + windowName(last.id) + " " + last.table : "");
    }
    setText("reconnects", int(s.reconnects));
    setText("last-error", s.last_error ? (s.last_error_at && s.now
      ? seconds(s.now - s.last_error_at) + " ago: " : "") + s.last_error : "");
    drawDumps(s.dumps || (s.dump ? [s.dump] : []));
    var offset = s.now ? Date.now() / 1000 - s.now : 0;  // the worker's clock to this one
    var history = (s.lag_history || []).map(function (p) { return [p[0] + offset, p[1]]; });
    var rates = (s.rate_history || []).map(function (p) { return [p[0] + offset, p[1]]; });
    drawChart("lag-chart", history, seconds);
    setText("lag-now", s.lag_s == null ? "no durable write yet" : "last write " + seconds(s.lag_s));
    drawChart("rate-chart", rates, function (v) { return v >= 1000 ? (v / 1000).toFixed(v >= 10000 ? 0 : 1) + "k" : String(Math.round(v)); });
    setText("rate-now", int(Math.round(s.events_per_s)) + " events/s");
  }

  function pollStatus() {
    get("/api/v1/status").then(function (s) {
      showStatus(s);
      setText("notice", "");
    }, function (error) {
      if (error instanceof AuthError) {
        connection("bad", "needs token", error.message);
        setText("notice", "This worker needs its token: open this page as /#token=<token>. ");
      } else {
        connection("bad", "unreachable", String(error.message || error));
        setText("notice", "The worker does not answer; retrying. ");
      }
    }).then(function () { setTimeout(pollStatus, STATUS_EVERY_MS); });
  }

  function pollFeed() {
    get("/api/v1/feed?after=" + after).then(function (page) {
      feedFailures = 0;
      var entries = page.events || [];
      if (page.next < after) {  // a restarted worker numbers its feed anew
        windows = [];
      }
      after = page.next;
      entries.forEach(track);
      if (entries.length) {
        if (paused) held = held.concat(entries).slice(-MAX_LINES);
        else appendLines(entries);
        drawWindows();
      }
      setTimeout(pollFeed, entries.length >= 500 ? 0 : FEED_EVERY_MS);
    }, function () {
      feedFailures += 1;
      setTimeout(pollFeed, Math.min(5000, FEED_EVERY_MS * Math.pow(2, feedFailures)));
    });
  }

  // -- controls ---------------------------------------------------------------------------

  document.querySelectorAll("[data-filter]").forEach(function (box) {
    box.addEventListener("change", function () {
      $("stream").classList.toggle("hidden-" + box.dataset.filter, !box.checked);
    });
  });
  $("pause").addEventListener("click", function () {
    paused = !paused;
    this.textContent = paused ? "resume" : "pause";
    if (!paused && held.length) { appendLines(held); held = []; }
  });
  pollStatus();
  pollFeed();
})();
