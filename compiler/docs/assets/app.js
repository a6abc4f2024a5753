/* mvflow docs: a single-page app over window.MVFLOW_DOCS (data.js), hash-routed.
 *
 * Every piece of user text (names, descriptions, SQL) reaches the page through
 * textContent / createTextNode / setAttribute only; innerHTML is never used.
 * Routes: #/ (graph), #/graph/<node>, #/model/<name>, #/source/<id>,
 *         #/column/<node>/<column>, #/test/<name>, #/tests, #/state.
 */
(function () {
  "use strict";

  var D = window.MVFLOW_DOCS;
  D.tests = D.tests || {};
  D.results = D.results || { available: false };
  var SVGNS = "http://www.w3.org/2000/svg";
  var KIND_ORDER = ["source", "seed", "ephemeral", "view", "table", "incremental", "mv", "fact"];
  var KIND_LABEL = { source: "source", seed: "seed", ephemeral: "ephemeral", view: "view", table: "table",
                     incremental: "incremental", mv: "materialized view", fact: "fact" };
  var STATUS_RANK = { error: 4, fail: 3, warn: 2, skipped: 1, pass: 0 };
  var TRANSFORM_TIP = {
    copy: "copied as is",
    expression: "computed from it",
    aggregate: "aggregated from it",
  };

  /* ---------------------------------------------------------------- DOM helpers */

  function h(tag, props) {
    var node = document.createElement(tag);
    setProps(node, props);
    appendKids(node, Array.prototype.slice.call(arguments, 2));
    return node;
  }

  function s(tag, props) {
    var node = document.createElementNS(SVGNS, tag);
    setProps(node, props);
    appendKids(node, Array.prototype.slice.call(arguments, 2));
    return node;
  }

  function setProps(node, props) {
    if (!props) return;
    Object.keys(props).forEach(function (key) {
      var value = props[key];
      if (value === null || value === undefined || value === false) return;
      if (key === "text") node.textContent = String(value);
      else if (key.slice(0, 2) === "on") node.addEventListener(key.slice(2), value);
      else node.setAttribute(key === "className" ? "class" : key, value === true ? "" : String(value));
    });
  }

  function appendKids(node, kids) {
    kids.forEach(function (kid) {
      if (kid === null || kid === undefined || kid === false) return;
      if (Array.isArray(kid)) return appendKids(node, kid);
      node.appendChild(typeof kid === "object" ? kid : document.createTextNode(String(kid)));
    });
  }

  function clear(node) {
    while (node.firstChild) node.removeChild(node.firstChild);
    return node;
  }

  function sorted(list, key) {
    return list.slice().sort(function (a, b) {
      var x = key ? key(a) : a, y = key ? key(b) : b;
      return x < y ? -1 : x > y ? 1 : 0;
    });
  }

  function humanSeconds(seconds) {
    if (seconds === null || seconds === undefined) return "—";
    var s = Number(seconds);
    if (s < 120) return (Math.round(s * 10) / 10) + " s";
    if (s < 7200) return Math.round(s / 60) + " min";
    if (s < 172800) return (Math.round(s / 360) / 10) + " h";
    return (Math.round(s / 8640) / 10) + " d";
  }

  function show(value) {
    if (value === null || value === undefined || value === "") return "—";
    if (Array.isArray(value)) return value.length ? value.map(show).join(", ") : "—";
    if (typeof value === "object") return JSON.stringify(value);
    return String(value);
  }

  /* ---------------------------------------------------------------- names and links */

  function href() {
    return "#/" + Array.prototype.slice.call(arguments).map(encodeURIComponent).join("/");
  }

  function nodeType(node) { return node.slice(0, node.indexOf(".")); }
  function nodeName(node) { return node.slice(node.indexOf(".") + 1); }

  function nodeHref(node) {
    var type = nodeType(node), name = nodeName(node);
    if (type === "model" && D.models[name]) return href("model", name);
    if (type === "source" && D.sources[name]) return href("source", name);
    return null;
  }

  function kindOf(node) {
    var info = D.nodes[node];
    return info ? info.kind : "table-undeclared";
  }

  function nodeLink(node, label) {
    var target = nodeHref(node);
    var text = label || nodeName(node);
    var dot = h("span", { className: "dot kind-" + kindOf(node), "aria-hidden": "true" });
    if (!target) return h("span", { className: "ref undeclared", title: "not declared in lineage/*.yml" }, dot, text);
    return h("a", { className: "ref", href: target }, dot, text);
  }

  function columnLink(ref, withNode) {
    var label = withNode === false ? ref.column : nodeName(ref.node) + "." + ref.column;
    var link = nodeHref(ref.node)
      ? h("a", { className: "col-ref", href: href("column", ref.node, ref.column) }, label)
      : h("span", { className: "col-ref undeclared" }, label);
    if (!ref.transform) return link;
    return h("span", { className: "edge" }, link, transformBadge(ref.transform));
  }

  function transformBadge(transform) {
    return h("span", { className: "transform t-" + transform, title: TRANSFORM_TIP[transform] || transform }, transform);
  }

  function kindBadge(kind) {
    return h("span", { className: "badge kind-" + kind }, KIND_LABEL[kind] || kind);
  }

  /* ---------------------------------------------------------------- column lineage index */

  var SEP = "\u0001";
  var UP = {}, DOWN = {};
  Object.keys(D.models).forEach(function (name) {
    var columns = (D.models[name].lineage || {}).columns || {};
    Object.keys(columns).forEach(function (column) {
      var key = "model." + name + SEP + column;
      UP[key] = columns[column];
      columns[column].forEach(function (edge) {
        var parent = edge.node + SEP + edge.column;
        (DOWN[parent] = DOWN[parent] || []).push({ node: "model." + name, column: column, transform: edge.transform });
      });
    });
  });
  Object.keys(DOWN).forEach(function (key) {
    DOWN[key] = sorted(DOWN[key], function (e) { return e.node + SEP + e.column; });
  });

  function parentsOf(ref) { return UP[ref.node + SEP + ref.column] || []; }
  function childrenOf(ref) { return DOWN[ref.node + SEP + ref.column] || []; }

  /* Output columns in query order (JSON objects come sorted by key). */
  function modelColumns(m) {
    var traced = (m.lineage || {}).columns || {};
    var names = m.columns.map(function (c) { return c.name; }).filter(function (c) { return traced[c]; });
    return names.length ? names : Object.keys(traced);
  }

  function columnsOf(node) {
    var name = nodeName(node);
    if (nodeType(node) === "model" && D.models[name]) return modelColumns(D.models[name]);
    if (nodeType(node) === "source" && D.sources[name]) {
      return D.sources[name].columns.map(function (c) { return c.name; });
    }
    return [];
  }

  function columnType(node, column) {
    var name = nodeName(node);
    if (nodeType(node) === "model" && D.models[name]) return ((D.models[name].lineage || {}).types || {})[column] || null;
    if (nodeType(node) === "source" && D.sources[name]) {
      var found = D.sources[name].columns.filter(function (c) { return c.name === column; })[0];
      return found ? found.type : null;
    }
    return null;
  }

  function columnDoc(node, column) {
    var name = nodeName(node);
    if (nodeType(node) === "model" && D.models[name]) {
      var doc = D.models[name].columns.filter(function (c) { return c.name === column; })[0];
      return doc ? doc.description : "";
    }
    if (nodeType(node) === "source" && D.sources[name]) {
      var col = D.sources[name].columns.filter(function (c) { return c.name === column; })[0];
      return col ? col.description : "";
    }
    return "";
  }

  /* A nested list of a column's lineage; a column already shown is not expanded twice. */
  function lineageTree(ref, step) {
    var seen = {};
    var count = 0;
    function branch(from) {
      var edges = step(from);
      if (!edges.length) return null;
      var list = h("ul", { className: "tree" });
      edges.forEach(function (edge) {
        var key = edge.node + SEP + edge.column;
        var again = seen[key];
        seen[key] = true;
        count += 1;
        var item = h("li", null, columnLink(edge));
        if (again && step(edge).length) item.appendChild(h("span", { className: "muted" }, " (shown above)"));
        else if (!again) {
          var sub = branch(edge);
          if (sub) item.appendChild(sub);
        }
        list.appendChild(item);
      });
      return list;
    }
    var tree = branch(ref);
    return { tree: tree, count: count, seen: seen };
  }

  /* ---------------------------------------------------------------- SQL highlighting */

  var KEYWORDS = {};
  ("select from where join left right full outer inner cross semi anti on and or not as group by order having limit " +
   "union all distinct case when then else end is null in exists between like rlike ilike with insert into overwrite " +
   "table create replace view drop if database schema using partitioned delete update merge matched values set true " +
   "false asc desc over partition rows range preceding following current row interval lateral identifier tblproperties " +
   "nulls first last qualify except intersect unbounded filter within alter add column columns truncate cache uncache " +
   "refresh describe show temporary temp global options location comment").split(" ").forEach(function (k) { KEYWORDS[k] = true; });
  var TYPES = {};
  ("bigint int integer smallint tinyint double float decimal numeric string varchar char boolean timestamp date binary " +
   "array map struct long short byte real timestamp_ntz").split(" ").forEach(function (k) { TYPES[k] = true; });
  var TOKEN = /(--[^\n]*|\/\*[\s\S]*?(?:\*\/|$))|('(?:[^'\\]|\\.|'')*'?|"(?:[^"\\]|\\.)*"?)|(`[^`]*`?)|(\b\d+(?:\.\d+)?(?:[eE][+-]?\d+)?[LlDd]?\b)|(:[A-Za-z_][A-Za-z0-9_]*)|([A-Za-z_][A-Za-z0-9_]*)(?=(\s*\()?)|(\s+)|([\s\S])/g;

  var JINJA = /(\{\{[\s\S]*?(?:\}\}|$)|\{%[\s\S]*?(?:%\}|$)|\{#[\s\S]*?(?:#\}|$))/;

  /* lang: "sql" (default), "jinja" (SQL with Jinja tags marked) or "text" (as is). */
  function highlight(text, lang) {
    if (lang === "text") return h("code", null, text);
    if (lang !== "jinja") return highlightSql(h("code"), text);
    var code = h("code");
    text.split(JINJA).forEach(function (part, i) {
      if (i % 2) code.appendChild(h("span", { className: "j" }, part));
      else if (part) highlightSql(code, part);
    });
    return code;
  }

  function highlightSql(code, sql) {
    var match;
    TOKEN.lastIndex = 0;
    while ((match = TOKEN.exec(sql)) !== null) {
      var text = match[0], cls = null;
      if (match[1]) cls = "c";
      else if (match[2]) cls = "s";
      else if (match[3]) cls = "q";
      else if (match[4]) cls = "n";
      else if (match[5]) cls = "p";
      else if (match[6]) {
        var lower = text.toLowerCase();
        if (KEYWORDS[lower]) cls = "k";
        else if (TYPES[lower]) cls = "t";
        else if (match[7]) cls = "f";
      } else if (match[9] && /[(),;=<>+\-*\/%|]/.test(text)) cls = "o";
      code.appendChild(cls ? h("span", { className: cls }, text) : document.createTextNode(text));
    }
    return code;
  }

  function sqlBlock(title, sql, path, open, lang) {
    var text = String(sql).replace(/\s+$/, "") + "\n";
    var lines = text.split("\n").length - 1;
    var numbers = [];
    for (var i = 1; i <= lines; i++) numbers.push(i);
    var copy = h("button", { className: "copy", type: "button", title: "Copy to clipboard" }, "Copy");
    copy.addEventListener("click", function (event) {
      event.preventDefault();
      var done = function () { copy.textContent = "Copied"; setTimeout(function () { copy.textContent = "Copy"; }, 1200); };
      if (navigator.clipboard) navigator.clipboard.writeText(text).then(done, function () {});
    });
    return h("details", { className: "sql-block", open: open !== false },
      h("summary", null, h("span", { className: "sql-title" }, title),
        path ? h("span", { className: "sql-path" }, path) : null, copy),
      h("div", { className: "sql-body" },
        h("pre", { className: "gutter", "aria-hidden": "true" }, numbers.join("\n")),
        h("pre", { className: "sql" }, highlight(text, lang))));
  }

  /* Derived statements another stage of mvflow may record (``derived`` in the manifest):
   * strings become SQL blocks, objects and lists are walked, anything else is shown as is. */
  function derivedBlocks(value, title, out) {
    if (value === null || value === undefined) return out;
    if (typeof value === "string") {
      out.push(/\b(select|insert|delete|merge|create|with|update)\b/i.test(value) ? sqlBlock(title, value, null, false)
        : h("p", { className: "kv" }, h("strong", null, title + ": "), value));
    } else if (Array.isArray(value)) {
      value.forEach(function (item, i) {
        var label = item && typeof item === "object" && (item.name || item.title || item.input || item.topic);
        derivedBlocks(item, title + " › " + (label ? String(label) : String(i + 1)), out);
      });
    } else if (typeof value === "object") {
      var sqlKey = ["sql", "query", "statement"].filter(function (k) { return typeof value[k] === "string"; })[0];
      if (sqlKey) {
        var facts = Object.keys(value).sort().filter(function (k) { return k !== sqlKey && typeof value[k] !== "object"; });
        if (facts.length) {
          out.push(h("p", { className: "kv" }, h("strong", null, title + ": "),
            facts.map(function (k) { return k + " = " + show(value[k]); }).join(" · ")));
        }
        out.push(sqlBlock(title, value[sqlKey], null, false));
        Object.keys(value).sort().forEach(function (k) {
          if (k !== sqlKey && value[k] && typeof value[k] === "object") derivedBlocks(value[k], title + " › " + k, out);
        });
      } else {
        Object.keys(value).sort().forEach(function (k) { derivedBlocks(value[k], title ? title + " › " + k : k, out); });
      }
    } else {
      out.push(h("p", { className: "kv" }, h("strong", null, title + ": "), show(value)));
    }
    return out;
  }

  /* ---------------------------------------------------------------- the DAG graph */

  var NODE_W = 188, NODE_H = 34, COL_W = 270, ROW_H = 50;

  function truncate(text, max) {
    return text.length > max ? text.slice(0, max - 1) + "…" : text;
  }

  function graphView(focus) {
    var wrap = h("div", { className: "graph-wrap" });
    var svg = s("svg", { className: "graph", role: "img", "aria-label": "Dependency graph of sources and models" });
    var view = s("g", { className: "viewport" });
    var edgeLayer = s("g", { className: "edges" });
    var nodeLayer = s("g", { className: "nodes" });
    view.appendChild(edgeLayer);
    view.appendChild(nodeLayer);
    svg.appendChild(view);

    var pos = {}, incident = {}, maxX = 0, maxY = 0;
    Object.keys(D.nodes).forEach(function (id) {
      var n = D.nodes[id];
      pos[id] = { x: n.layer * COL_W, y: n.row * ROW_H };
      maxX = Math.max(maxX, pos[id].x + NODE_W);
      maxY = Math.max(maxY, pos[id].y + NODE_H);
      incident[id] = [];
    });
    D.edges.forEach(function (edge) {
      var a = pos[edge[0]], b = pos[edge[1]];
      if (!a || !b) return;
      var x1 = a.x + NODE_W, y1 = a.y + NODE_H / 2, x2 = b.x, y2 = b.y + NODE_H / 2;
      var dx = Math.max(40, (x2 - x1) / 2);
      var path = s("path", {
        d: "M" + x1 + "," + y1 + " C" + (x1 + dx) + "," + y1 + " " + (x2 - dx) + "," + y2 + " " + x2 + "," + y2,
        className: "edge-line", "data-from": edge[0], "data-to": edge[1],
      });
      edgeLayer.appendChild(path);
      incident[edge[0]].push({ path: path, other: edge[1] });
      incident[edge[1]].push({ path: path, other: edge[0] });
    });
    Object.keys(D.nodes).forEach(function (id) {
      var n = D.nodes[id], p = pos[id];
      var owner = n.type === "source" ? D.sources[n.name] : D.models[n.name];
      var worst = worstStatus((owner && owner.tests) || []);
      var group = s("g", { className: "node kind-" + n.kind, transform: "translate(" + p.x + "," + p.y + ")", "data-id": id, tabindex: "0" },
        s("title", null, n.name + " (" + (KIND_LABEL[n.kind] || n.kind) + ")" + (worst ? " — tests: " + worst : "")),
        s("rect", { width: NODE_W, height: NODE_H, rx: 7 }),
        s("rect", { className: "stripe", width: 6, height: NODE_H, rx: 3 }),
        s("text", { x: 16, y: NODE_H / 2 + 4.5 }, truncate(n.name, worst ? 22 : 25)),
        worst ? s("circle", { className: "test-dot s-" + worst, cx: NODE_W - 12, cy: NODE_H / 2, r: 4.5 }) : null);
      group.addEventListener("mouseenter", function () { hover(id, true); });
      group.addEventListener("mouseleave", function () { hover(id, false); if (focus) hover(focus, true); });
      group.addEventListener("keydown", function (event) { if (event.key === "Enter") location.hash = nodeHref(id) || "#/"; });
      nodeLayer.appendChild(group);
    });

    function hover(id, on) {
      svg.classList.toggle("dimmed", on);
      var own = nodeLayer.querySelector('[data-id="' + cssEscape(id) + '"]');
      if (own) own.classList.toggle("lit", on);
      incident[id].forEach(function (link) {
        link.path.classList.toggle("lit", on);
        var other = nodeLayer.querySelector('[data-id="' + cssEscape(link.other) + '"]');
        if (other) other.classList.toggle("lit", on);
      });
    }

    // Zoom and pan: the viewport group carries translate(tx, ty) scale(k).
    var state = { k: 1, tx: 0, ty: 0 };
    function apply() { view.setAttribute("transform", "translate(" + state.tx + "," + state.ty + ") scale(" + state.k + ")"); }
    function zoomAt(factor, cx, cy) {
      var k = Math.min(3, Math.max(0.05, state.k * factor));
      state.tx = cx - (cx - state.tx) * (k / state.k);
      state.ty = cy - (cy - state.ty) * (k / state.k);
      state.k = k;
      apply();
    }
    function fit() {
      var w = svg.clientWidth || 800, hgt = svg.clientHeight || 500;
      var k = Math.min(1.2, (w - 48) / Math.max(maxX, 1), (hgt - 48) / Math.max(maxY, 1));
      k = Math.max(k, 0.05);
      state.k = k;
      state.tx = (w - maxX * k) / 2;
      state.ty = (hgt - maxY * k) / 2;
      apply();
    }
    function center(id) {
      var p = pos[id];
      if (!p) return fit();
      var w = svg.clientWidth || 800, hgt = svg.clientHeight || 500;
      state.k = 1;
      state.tx = w / 2 - (p.x + NODE_W / 2);
      state.ty = hgt / 2 - (p.y + NODE_H / 2);
      apply();
      var own = nodeLayer.querySelector('[data-id="' + cssEscape(id) + '"]');
      if (own) own.classList.add("focus");
      hover(id, true);
    }
    svg.addEventListener("wheel", function (event) {
      event.preventDefault();
      var box = svg.getBoundingClientRect();
      zoomAt(Math.exp(-event.deltaY * 0.0015), event.clientX - box.left, event.clientY - box.top);
    }, { passive: false });
    var drag = null, moved = false;
    svg.addEventListener("pointerdown", function (event) {
      if (event.button !== 0) return;
      drag = { x: event.clientX, y: event.clientY, tx: state.tx, ty: state.ty };
      moved = false;
    });
    window.addEventListener("pointermove", function (event) {
      if (!drag) return;
      var dx = event.clientX - drag.x, dy = event.clientY - drag.y;
      if (!moved && Math.abs(dx) + Math.abs(dy) < 4) return;
      moved = true;
      svg.classList.add("panning");
      state.tx = drag.tx + dx;
      state.ty = drag.ty + dy;
      apply();
    });
    window.addEventListener("pointerup", function () { drag = null; svg.classList.remove("panning"); });
    svg.addEventListener("click", function (event) {
      if (moved) return;
      var group = event.target.closest ? event.target.closest("g.node") : null;
      if (group) location.hash = nodeHref(group.getAttribute("data-id")) || "#/";
    });

    var controls = h("div", { className: "graph-controls" },
      h("button", { type: "button", title: "Zoom in", onclick: function () { zoomAt(1.25, svg.clientWidth / 2, svg.clientHeight / 2); } }, "+"),
      h("button", { type: "button", title: "Zoom out", onclick: function () { zoomAt(0.8, svg.clientWidth / 2, svg.clientHeight / 2); } }, "−"),
      h("button", { type: "button", title: "Fit the whole graph", onclick: fit }, "Fit"));
    wrap.appendChild(svg);
    wrap.appendChild(controls);
    wrap.appendChild(legend());
    requestAnimationFrame(function () { if (focus) center(focus); else fit(); });
    return wrap;
  }

  function cssEscape(text) {
    return window.CSS && CSS.escape ? CSS.escape(text) : String(text).replace(/["\\]/g, "\\$&");
  }

  function legend() {
    var counts = {};
    Object.keys(D.nodes).forEach(function (id) { var k = D.nodes[id].kind; counts[k] = (counts[k] || 0) + 1; });
    return h("div", { className: "legend" }, KIND_ORDER.filter(function (k) { return counts[k]; }).map(function (k) {
      return h("span", { className: "legend-item" }, h("span", { className: "dot kind-" + k }), (KIND_LABEL[k] || k) + " " + counts[k]);
    }));
  }

  /* ---------------------------------------------------------------- pages */

  function section(title, body, extra) {
    return h("section", { className: "card" }, h("h2", null, title, extra || null), body);
  }

  function facts(rows) {
    return h("dl", { className: "facts" }, rows.filter(function (r) { return r; }).map(function (r) {
      return [h("dt", null, r[0]), h("dd", null, r[1])];
    }));
  }

  function description(text) {
    return text ? h("p", { className: "description" }, text) : h("p", { className: "description muted" }, "No description.");
  }

  function table(headers, rows, className) {
    return h("div", { className: "table-wrap" }, h("table", { className: className || "" },
      h("thead", null, h("tr", null, headers.map(function (x) { return h("th", null, x); }))),
      h("tbody", null, rows)));
  }

  function chips(items) {
    return items.length ? h("span", { className: "chips" }, items) : h("span", { className: "muted" }, "—");
  }

  function overviewPage(focus) {
    var seeds = Object.keys(D.models).filter(function (m) { return D.models[m].kind.name === "seed"; }).length;
    var models = Object.keys(D.models).length - seeds, sources = Object.keys(D.sources).length, tests = Object.keys(D.tests).length;
    var plural = function (n, word) { return n + " " + word + (n === 1 ? "" : "s"); };
    var head = h("div", { className: "overview-head" },
      h("div", null,
        h("h1", null, (D.project.name || "project") + (D.project.version ? " " : ""),
          D.project.version ? h("span", { className: "version" }, "v" + D.project.version) : null),
        h("p", { className: "muted" }, plural(models, "model") + " · " + (seeds ? plural(seeds, "seed") + " · " : "") +
          plural(sources, "source") + " · " + (tests ? plural(tests, "data test") + " · " : "") + "target " + show(D.target) +
          " · scroll to zoom, drag to pan, click a node to open it")),
      D.warnings.length ? h("details", { className: "warnings" }, h("summary", null, D.warnings.length + " compile warnings"),
        h("ul", null, D.warnings.map(function (w) { return h("li", null, w); }))) : null);
    // dbt's convention: a docs block named __overview__ is the front page's text
    var overview = D.project.overview ? h("p", { className: "description overview-text" }, D.project.overview) : null;
    return h("div", { className: "page page-graph" }, head, overview, graphView(focus));
  }

  function modelPage(name) {
    var m = D.models[name];
    if (!m) return notFound("model " + name);
    var node = "model." + name;
    var lin = m.lineage || { columns: {}, uses: {}, types: {}, unknown: {} };
    var kindFields = Object.keys(m.kind).filter(function (k) { return k !== "name"; }).sort();
    var parents = m.depends_on.sources.map(function (s) { return nodeLink("source." + s); })
      .concat(m.depends_on.models.map(function (x) { return nodeLink("model." + x); }));
    var children = D.edges.filter(function (e) { return e[0] === node; }).map(function (e) { return nodeLink(e[1]); });

    var seed = m.kind.name === "seed";

    var page = h("div", { className: "page" },
      h("div", { className: "page-head" },
        h("div", { className: "crumbs" }, seed ? "seeds" : "models", _folderCrumb(D.nodes[node].folder)),
        h("h1", null, name, " ", kindBadge(m.kind.name)),
        h("div", { className: "meta" },
          h("code", null, m.relation), h("span", null, m.path),
          h("a", { href: href("graph", node) }, "show in graph"),
          m.tags.length ? chips(m.tags.map(function (t) { return h("span", { className: "tag" }, t); })) : null)),
      description(m.description),
      section("Overview", facts([
        ["Kind", h("span", null, h("strong", null, KIND_LABEL[m.kind.name] || m.kind.name), kindFields.length ? " — " : "", kindFields.map(function (k) { return k + " = " + show(m.kind[k]); }).join(" · "))],
        ["Relation", h("code", null, m.relation)],
        ["Reads", chips(parents)],
        ["Read by", chips(children)],
        m.result ? ["Last run", resultView(m.result)] : null,
        m.undeclared_tables.length ? ["Undeclared tables", h("span", { className: "warn" }, m.undeclared_tables.join(", "))] : null,
      ].concat(Object.keys(m.meta || {}).sort().map(function (k) { return ["meta: " + k, h("code", null, show(m.meta[k]))]; })))),
      section("Columns", columnsTable(node, m, lin)),
      section("Tests", testList(m.tests || []), testsHint(m.tests || [])),
      exposureSection(m.exposures),
      seed ? section("Seed file", seedView(m)) : section("Inputs used", usesTable(m, lin), h("span", { className: "hint" },
        " every input column the query reads (select, join, where, group by) — changes to other columns cannot change this model")),
      section("SQL", h("div", null,
        sqlBlock("compiled SQL", m.compiled_sql, m.compiled_path, true),
        m.raw_sql ? sqlBlock("source (Jinja)", m.raw_sql, m.path, false, "jinja") : null,
        (m.run_files || []).map(function (f) { return sqlBlock(f.title, f.sql, f.path, false); }),
        m.derived ? derivedBlocks(m.derived, "derived", []) : null,
        !m.run_path && !(m.run_files || []).length && !m.derived
          ? h("p", { className: "muted" }, "No run statements: this kind's refresh is not derived yet.") : null)),
      section("Versions", catalogView(m)),
      section("State", stateView(m)),
      section("Config", configTable(m.config)));
    return page;
  }

  /* A seed: its first rows as a table, and its first lines as written. */
  function seedView(m) {
    var seed = m.seed || { lines: [], line_count: 0, header: [], rows: [], row_count: 0 };
    var shown = seed.rows.length < seed.row_count ? "first " + seed.rows.length + " of " + seed.row_count + " rows"
      : seed.row_count + (seed.row_count === 1 ? " row" : " rows");
    var lines = seed.lines.length < seed.line_count ? "first " + seed.lines.length + " of " + seed.line_count + " lines" : "CSV";
    return h("div", null,
      h("p", { className: "muted" }, "Loaded by ", h("code", null, "mvflow seed"), " from ", h("code", null, m.path), ": " + shown + "."),
      seed.header.length ? table(seed.header, seed.rows.map(function (row) {
        return h("tr", null, seed.header.map(function (_, i) { return h("td", null, row[i] === undefined ? "" : row[i]); }));
      }), "seed-rows") : h("p", { className: "muted" }, "The file is empty."),
      sqlBlock(lines, seed.lines.join("\n"), m.path, true, "text"));
  }

  function _folderCrumb(folder) {
    return folder ? folder.split("/").map(function (part) { return [" / ", part]; }) : null;
  }

  function columnsTable(node, m, lin) {
    var names = modelColumns(m);
    var docs = {}, metas = {};
    m.columns.forEach(function (c) { docs[c.name] = c.description; metas[c.name] = c.meta || {}; });
    var rows = names.map(function (column) {
      var ref = { node: node, column: column };
      var why = (lin.unknown || {})[column];
      return h("tr", null,
        h("td", null, h("a", { className: "col-name", href: href("column", node, column) }, column)),
        h("td", null, lin.types && lin.types[column] ? h("code", { className: "type" }, lin.types[column]) : h("span", { className: "muted" }, "—")),
        h("td", null, docs[column] || "", Object.keys(metas[column] || {}).sort().map(function (k) {
          return h("div", { className: "muted" }, "meta: " + k + " = " + show(metas[column][k]));
        })),
        h("td", null, chips(parentsOf(ref).map(function (e) { return columnLink(e); })),
          why ? h("div", { className: "unknown" }, "unknown: " + why) : null),
        h("td", null, chips(childrenOf(ref).map(function (e) { return columnLink(e); }))));
    });
    var star = (lin.unknown || {})["*"];
    return h("div", null,
      star ? h("p", { className: "unknown" }, "unknown: " + star) : null,
      rows.length ? table(["Column", "Type", "Description", "Comes from", "Feeds"], rows, "columns")
        : h("p", { className: "muted" }, "The output columns are not known."));
  }

  function usesTable(m, lin) {
    var uses = lin.uses || {};
    var rows = Object.keys(uses).sort().map(function (input) {
      return h("tr", null, h("td", null, nodeLink(input)),
        h("td", null, chips(uses[input].map(function (c) {
          return c === "*" ? h("span", { className: "tag" }, "all columns (*)")
            : nodeHref(input) ? h("a", { className: "col-ref", href: href("column", input, c) }, c) : h("span", null, c);
        }))));
    });
    return rows.length ? table(["Input", "Columns used"], rows, "uses") : h("p", { className: "muted" }, "No inputs.");
  }

  function configTable(config) {
    var keys = Object.keys(config || {}).sort();
    if (!keys.length) return h("p", { className: "muted" }, "No config.");
    return table(["Key", "Value"], keys.map(function (k) {
      return h("tr", null, h("td", null, h("code", null, k)), h("td", null, h("code", null, show(config[k]))));
    }), "config");
  }

  /* The catalog's versions of the model (compiler/catalog), newest first, and its last breaking change. */
  function catalogView(m) {
    var versions = (m.state && m.state.catalog) || [];
    if (!versions.length) return h("p", { className: "muted" }, "No catalog version yet: `mvflow run` records the first.");
    var last = versions.filter(function (v) { return v.breaking; })[0];
    return h("div", null,
      facts([["Active version", "v" + versions[0].version + " since " + versions[0].active_at],
             ["Last breaking change", last ? "v" + last.version + " at " + last.active_at + ": " + last.changes : "none"]]),
      table(["Version", "Active since", "Breaking", "What changed"], versions.map(function (v) {
        return h("tr", null, h("td", null, "v" + v.version), h("td", null, v.active_at),
          h("td", null, v.breaking ? h("span", { className: "badge warnb" }, "breaking") : ""), h("td", null, v.changes));
      }), "versions"));
  }

  /* State: offsets, recent steps, lag and what blocks a topic, when the state store has them. */
  function stateView(m) {
    if (!D.state.available) {
      return h("div", { className: "notice" }, "No state store for this target yet. ", h("span", { className: "muted" }, D.state.note || ""));
    }
    var topics = (m.state && m.state.topics) || [];
    if (!topics.length) return h("p", { className: "muted" }, "The state store has no offsets for this model.");
    return h("div", null, topics.map(topicView));
  }

  /* Every word and position below comes from compiler/status.py (``shown``), as `mvflow status` prints them. */
  function topicView(t) {
    var blocked = /block|wait/i.test(t.state || "");
    var shown = t.shown;
    return h("div", { className: "topic" },
      h("h3", null, t.topic, " ",
        shown.state !== "-" ? h("span", { className: "badge " + (blocked ? "warnb" : "okb") }, shown.state) : null,
        shown.next !== "-" ? h("span", { className: "badge warnb", title: "next was written but not committed: the step is re-run as is" }, "step in flight") : null),
      facts([
        ["Last (committed)", h("code", null, shown.last)],
        ["Next (in flight)", h("code", null, shown.next)],
        ["Behind source", shown.behind],
        ["Age", shown.age + (D.state.as_of ? " (as of " + D.state.as_of + ")" : "")],
        ["Rows (last step)", shown.rows],
        ["Last run", shown.run],
        ["Held by", shown.holder],
        blocked ? ["Blocked by", h("span", { className: "warn" }, t.state)] : null,
      ]),
      t.steps && t.steps.length ? table(["Time", "Rows", "Range (last, next]", "Lag", "Source rows not loaded", "Seconds", "Query"], t.steps.map(function (step) {
        return h("tr", null, h("td", null, step.shown.ts), h("td", { className: "num" }, show(step.rows)),
          h("td", null, h("code", null, step.shown.range)),
          h("td", null, step.shown.lag),
          h("td", { className: step.shown.skipped !== "-" ? "warn" : null, title: "late: at or before the committed position when found; NULL position: never placed in a step" }, step.shown.skipped),
          h("td", { className: "num" }, show(step.seconds)),
          h("td", null, h("code", null, show(step.query_id))));
      }), "steps") : h("p", { className: "muted" }, "No steps logged."));
  }

  /* The same table as `mvflow status`: its column titles and cells come from compiler/status.py. */
  function statusTable(topics) {
    var columns = D.state.columns || [];
    return table(columns.map(function (c) { return c[0]; }), topics.map(function (t) {
      return h("tr", null, columns.map(function (c) {
        return h("td", null, t.shown[c[1]]);
      }));
    }), "status");
  }

  function statePage() {
    var topics = D.state.available ? D.state.topics : [];
    var body = D.state.available
      ? (topics.length ? [statusTable(topics)].concat(topics.map(topicView)) : [h("p", { className: "muted" }, "No topics yet.")])
      : [h("div", { className: "notice" }, "No state store for this target yet. ", h("span", { className: "muted" }, D.state.note || ""))];
    return h("div", { className: "page" }, h("div", { className: "page-head" }, h("h1", null, "State"),
      D.state.path ? h("div", { className: "meta" }, h("code", null, D.state.path), D.state.as_of ? " — ages as of " + D.state.as_of : "") : null),
      section("Topics", h("div", null, body)));
  }

  var MODES = {
    position: "columns of the table itself grow with every insert or update",
    changes: "a separate change feed holds the keys of changed rows",
    cdf: "the Delta table's own Change Data Feed, read between the table versions each batch saw",
    dictionary: "a small table, diffed against the previous snapshot (parquet) or, by time travel, the version the last batch saw (Delta)",
    none: "a plain table (a dbt source): read in full, its changes are not tracked",
  };

  function sourcePage(id) {
    var src = D.sources[id];
    if (!src) return notFound("source " + id);
    var node = "source." + id;
    var rows = src.columns.map(function (c) {
      return h("tr", null,
        h("td", null, h("a", { className: "col-name", href: href("column", node, c.name) }, c.name),
          src.primary_key.indexOf(c.name) >= 0 ? h("span", { className: "tag key" }, "key") : null),
        h("td", null, c.type ? h("code", { className: "type" }, c.type) : h("span", { className: "muted" }, "—")),
        h("td", null, c.description || ""),
        h("td", null, chips((src.used_by[c.name] || []).map(function (m) { return nodeLink("model." + m); }))));
    });
    var depends = src.depends_on.map(function (d) {
      return D.sources[d] ? nodeLink("source." + d) : D.models[d] ? nodeLink("model." + d) : h("span", null, d);
    });
    return h("div", { className: "page" },
      h("div", { className: "page-head" },
        h("div", { className: "crumbs" }, "sources / ", src.database),
        h("h1", null, id, " ", kindBadge("source")),
        h("div", { className: "meta" }, h("span", null, src.path + ":" + src.line), h("a", { href: href("graph", node) }, "show in graph"),
          src.tags.length ? chips(src.tags.map(function (t) { return h("span", { className: "tag" }, t); })) : null)),
      description(src.description),
      section("Changes", facts([
        ["Primary key", src.primary_key.length ? h("code", null, src.primary_key.join(", ")) : h("span", { className: "muted" }, "—")],
        ["Change mode", h("span", null, h("strong", null, src.change_mode), " — " + MODES[src.change_mode])],
        src.position.length ? ["Position", h("code", null, src.position.join(", "))] : null,
        src.changes ? ["Change feed", h("span", null, h("code", null, src.changes.table), " by ", h("code", null, src.changes.position.join(", ")))] : null,
        src.deleted ? ["Soft delete flag", h("code", null, src.deleted)] : null,
        ["Delay", src.delay_seconds ? humanSeconds(src.delay_seconds) : "none"],
        ["Depends on", chips(depends)],
        ["Read by", chips(src.models.map(function (m) { return nodeLink("model." + m); }))],
      ])),
      section("Columns", rows.length ? table(["Column", "Type", "Description", "Used by"], rows, "columns")
        : h("p", { className: "unknown" }, "No columns declared: lineage through this table is unknown.")),
      section("Tests", testList(src.tests || []), testsHint(src.tests || [])),
      exposureSection(src.exposures));
  }

  function columnPage(node, column) {
    var owner = nodeHref(node);
    if (!owner || columnsOf(node).indexOf(column) < 0) return notFound("column " + nodeName(node) + "." + column);
    var ref = { node: node, column: column };
    var up = lineageTree(ref, parentsOf), down = lineageTree(ref, childrenOf);
    var leaves = Object.keys(up.seen).filter(function (k) { return k.indexOf("model.") !== 0; }).sort().map(function (k) {
      var parts = k.split(SEP);
      return columnLink({ node: parts[0], column: parts[1] });
    });
    var why = nodeType(node) === "model" ? ((D.models[nodeName(node)].lineage || {}).unknown || {})[column] : null;
    var type = columnType(node, column);
    return h("div", { className: "page" },
      h("div", { className: "page-head" },
        h("div", { className: "crumbs" }, "columns"),
        h("h1", null, h("a", { href: owner, className: "owner" }, nodeName(node)), ".", column),
        h("div", { className: "meta" }, type ? h("code", { className: "type" }, type) : h("span", { className: "muted" }, "type unknown"),
          kindBadge(kindOf(node)))),
      description(columnDoc(node, column)),
      why ? h("p", { className: "unknown" }, "unknown: " + why) : null,
      h("div", { className: "two-col" },
        section("Upstream", up.tree || h("p", { className: "muted" }, nodeType(node) === "source" ? "A source column." : "No upstream columns."),
          h("span", { className: "hint" }, " " + up.count + " columns")),
        section("Downstream", down.tree || h("p", { className: "muted" }, "Nothing is computed from it."),
          h("span", { className: "hint" }, " " + down.count + " columns"))),
      leaves.length ? section("Source columns", chips(leaves)) : null);
  }

  function notFound(what) {
    return h("div", { className: "page" }, h("h1", null, "Not found"), h("p", null, "No " + what + " in this project. "),
      h("a", { href: "#/" }, "Back to the graph"));
  }

  /* ---------------------------------------------------------------- data tests and last results */

  /* run_results.json's times are ISO with an offset; shown as `mvflow status` shows times. */
  function when(iso) {
    if (!iso) return "—";
    var text = String(iso).replace("T", " ");
    return /\+00:00$|Z$/.test(text) ? text.replace(/(\+00:00|Z)$/, "") + " UTC" : text;
  }

  function statusPill(status) {
    if (!status) return h("span", { className: "run-status s-none", title: "not in the last run_results.json" }, "not run");
    return h("span", { className: "run-status s-" + status }, status);
  }

  function failuresText(result) {
    if (!result || result.failures === null || result.failures === undefined) return "";
    return result.failures + (result.failures === 1 ? " failing row" : " failing rows");
  }

  /* A model's last result (success / error / skipped) or a test's (pass / warn / fail / error / skipped). */
  function resultView(result) {
    return h("span", { className: "result" }, statusPill(result.status),
      failuresText(result) ? " " + failuresText(result) : null,
      result.seconds !== undefined && result.seconds !== null ? h("span", { className: "muted" }, " · " + humanSeconds(result.seconds)) : null,
      result.started_at ? h("span", { className: "muted" }, " · " + when(result.started_at)) : null,
      result.message ? h("div", { className: "result-message" }, result.message) : null);
  }

  function worstStatus(names) {
    var worst = null;
    names.forEach(function (name) {
      var status = (D.tests[name] && D.tests[name].result || {}).status;
      if (status in STATUS_RANK && (worst === null || STATUS_RANK[status] > STATUS_RANK[worst])) worst = status;
    });
    return worst;
  }

  function testsHint(names) {
    if (!names.length) return null;
    var counts = {};
    names.forEach(function (name) {
      var status = (D.tests[name].result || {}).status || "not run";
      counts[status] = (counts[status] || 0) + 1;
    });
    var order = function (k) { return k in STATUS_RANK ? -STATUS_RANK[k] : 1; };
    return h("span", { className: "hint" }, " " + sorted(Object.keys(counts), order).map(function (k) { return counts[k] + " " + k; }).join(" · ") +
      (D.results.available ? " — last results from run_results.json" : " — no run_results.json yet: run `mvflow test`"));
  }

  // dbt's exposures that read a model or source: a table, or nothing without any. A URL is a link
  // only when it is http(s): it is user text.
  function exposureSection(names) {
    if (!names || !names.length) return null;
    var rows = names.map(function (name) {
      var e = D.exposures[name], owner = e.owner || {};
      var url = /^https?:\/\//.test(e.url) ? h("a", { href: e.url, rel: "noopener noreferrer" }, e.url) : (e.url || "");
      return h("tr", null, h("td", null, h("strong", null, name)), h("td", null, e.type || "—"),
        h("td", null, [owner.name, owner.email].filter(function (x) { return x; }).join(" · ") || "—"),
        h("td", null, e.maturity || "—"), h("td", null, url), h("td", null, e.description || ""));
    });
    return section("Exposures", table(["Exposure", "Type", "Owner", "Maturity", "URL", "Description"], rows, "exposures"),
      h("span", { className: "hint" }, " what reads it outside the project (dbt's exposures: listed, not run)"));
  }

  /* A model's or source's tests: one line each, opening on the test's details and compiled SQL. */
  function testList(names) {
    if (!names.length) return h("p", { className: "muted" }, "No data tests.");
    return h("div", { className: "test-list" },
      h("div", { className: "test-row test-head", "aria-hidden": "true" },
        ["Test", "Type", "Column", "Severity", "Last result", "Ran"].map(function (x) { return h("span", null, x); })),
      names.map(function (name) { return testItem(D.tests[name]); }));
  }

  function testItem(t) {
    var result = t.result || {};
    return h("details", { className: "test", "data-test": t.name },
      h("summary", { className: "test-row" },
        h("span", { className: "test-name", title: t.name }, t.name),
        h("span", null, h("code", null, t.test_type)),
        h("span", null, t.column ? h("code", null, t.column) : h("span", { className: "muted" }, "—")),
        h("span", { className: "severity sev-" + t.config.severity }, t.config.severity),
        h("span", null, statusPill(result.status), failuresText(result) ? h("span", { className: "failures" }, " " + failuresText(result)) : null),
        h("span", { className: "muted" }, when(result.started_at))),
      h("div", { className: "test-body" },
        result.message ? h("p", { className: "result-message" }, result.message) : null,
        testFacts(t, false),
        sqlBlock("compiled SQL", t.compiled_sql, t.compiled_path, true),
        h("a", { href: href("test", t.name) }, "open the test's page")));
  }

  function testFacts(t, full) {
    var c = t.config;
    var kwargs = Object.keys(t.kwargs || {}).sort();
    return facts([
      full ? ["Type", h("code", null, t.test_type)] : null,
      full ? ["Tests", chips(t.on.map(function (n) { return nodeLink(n); }))] : null,
      full && t.column ? ["Column", h("code", null, t.column)] : null,
      kwargs.length ? ["Arguments", h("span", null, kwargs.map(function (k) { return k + " = " + show(t.kwargs[k]); }).join(" · "))] : null,
      ["Severity", h("span", null, h("strong", null, c.severity), c.severity === "error"
        ? " — fails when " + c.fail_calc + " " + c.error_if + ", warns when " + c.fail_calc + " " + c.warn_if
        : " — warns when " + c.fail_calc + " " + c.warn_if)],
      c.where ? ["Where", h("code", null, c.where)] : null,
      c.limit !== null && c.limit !== undefined ? ["Limit", show(c.limit)] : null,
      c.store_failures ? ["Failing rows kept in", h("code", null, (c.schema + "." + (c.alias || t.name)).toLowerCase())] : null,
      c.tags && c.tags.length ? ["Tags", chips(c.tags.map(function (x) { return h("span", { className: "tag" }, x); }))] : null,
      ["Declared in", h("span", null, t.path + ":" + t.line)],
    ]);
  }

  function testPage(name) {
    var t = D.tests[name];
    if (!t) return notFound("test " + name);
    return h("div", { className: "page" },
      h("div", { className: "page-head" },
        h("div", { className: "crumbs" }, h("a", { href: href("tests") }, "tests")),
        h("h1", null, name, " ", h("span", { className: "badge kind-test" }, "test")),
        h("div", { className: "meta" }, h("span", null, t.path + ":" + t.line), chips(t.on.map(function (n) { return nodeLink(n); })))),
      section("Last result", t.result ? resultView(t.result)
        : h("p", { className: "muted" }, D.results.available ? "Not in the last run_results.json." : "No run_results.json yet: run `mvflow test`.")),
      section("Test", testFacts(t, true)),
      section("SQL", h("div", null,
        sqlBlock("compiled SQL", t.compiled_sql, t.compiled_path, true),
        t.raw_sql ? sqlBlock("source (Jinja)", t.raw_sql, t.path, false, "jinja") : null,
        (t.run_files || []).map(function (f) { return sqlBlock(f.title, f.sql, f.path, false); }))),
      section("Config", configTable(t.config)));
  }

  function testsPage() {
    var names = Object.keys(D.tests).sort(function (a, b) {
      var x = STATUS_RANK[(D.tests[a].result || {}).status], y = STATUS_RANK[(D.tests[b].result || {}).status];
      x = x === undefined ? -1 : x;
      y = y === undefined ? -1 : y;
      return x !== y ? y - x : a < b ? -1 : a > b ? 1 : 0;
    });
    var rows = names.map(function (name) {
      var t = D.tests[name], result = t.result || {};
      return h("tr", null,
        h("td", null, statusPill(result.status), result.failures ? h("span", { className: "failures", title: failuresText(result) }, " " + result.failures) : null),
        h("td", null, h("a", { href: href("test", name) }, name)),
        h("td", null, chips(t.on.map(function (n) { return nodeLink(n); }))),
        h("td", null, h("code", null, t.test_type)),
        h("td", null, t.column ? h("code", null, t.column) : ""),
        h("td", null, h("span", { className: "severity sev-" + t.config.severity }, t.config.severity)),
        h("td", { className: "muted" }, when(result.started_at)));
    });
    return h("div", { className: "page" },
      h("div", { className: "page-head" }, h("h1", null, "Data tests"),
        h("div", { className: "meta" }, D.results.available
          ? "Last results from run_results.json" + (D.results.started_at ? " (run started " + when(D.results.started_at) + ")" : "")
          : "No run_results.json yet: `mvflow test` or `mvflow build` writes it.")),
      section("Tests", rows.length ? table(["Result", "Test", "On", "Type", "Column", "Severity", "Ran"], rows, "tests")
        : h("p", { className: "muted" }, "No data tests in this project."), testsHint(names)));
  }

  /* ---------------------------------------------------------------- sidebar */

  function sidebar() {
    var nav = clear(document.getElementById("sidebar"));
    var byDb = {};
    Object.keys(D.sources).sort().forEach(function (id) {
      (byDb[D.sources[id].database] = byDb[D.sources[id].database] || []).push(id);
    });
    var sourceGroup = h("details", { className: "group", open: true }, h("summary", null, "Sources", h("span", { className: "count" }, Object.keys(D.sources).length)),
      Object.keys(byDb).sort().map(function (db) {
        return h("details", { className: "folder", open: true }, h("summary", null, db),
          byDb[db].map(function (id) { return treeLink("source." + id, D.sources[id].name); }));
      }));
    var root = { folders: {}, models: [] }, seeds = { folders: {}, models: [] };
    Object.keys(D.models).sort().forEach(function (name) {
      var where = D.models[name].kind.name === "seed" ? seeds : root;
      (D.nodes["model." + name].folder || "").split("/").filter(Boolean).forEach(function (part) {
        where = where.folders[part] = where.folders[part] || { folders: {}, models: [] };
      });
      where.models.push(name);
    });
    function folder(tree) {
      return [Object.keys(tree.folders).sort().map(function (part) {
        return h("details", { className: "folder", open: true }, h("summary", null, part), folder(tree.folders[part]));
      }), tree.models.map(function (name) { return treeLink("model." + name, name); })];
    }
    var count = function (tree) {
      return Object.keys(tree.folders).reduce(function (n, part) { return n + count(tree.folders[part]); }, tree.models.length);
    };
    var seedGroup = count(seeds) ? h("details", { className: "group", open: true },
      h("summary", null, "Seeds", h("span", { className: "count" }, count(seeds))), folder(seeds)) : null;
    var modelGroup = h("details", { className: "group", open: true },
      h("summary", null, "Models", h("span", { className: "count" }, count(root))), folder(root));
    nav.appendChild(sourceGroup);
    if (seedGroup) nav.appendChild(seedGroup);
    nav.appendChild(modelGroup);
  }

  function treeLink(node, label) {
    return h("a", { className: "tree-link", href: nodeHref(node), "data-node": node, title: nodeName(node) },
      h("span", { className: "dot kind-" + kindOf(node) }), label);
  }

  function markActive(node) {
    var nav = document.getElementById("sidebar");
    Array.prototype.forEach.call(nav.querySelectorAll(".tree-link.active"), function (a) { a.classList.remove("active"); });
    if (!node) return;
    var link = nav.querySelector('[data-node="' + cssEscape(node) + '"]');
    if (!link) return;
    link.classList.add("active");
    for (var p = link.parentElement; p && p !== nav; p = p.parentElement) if (p.tagName === "DETAILS") p.open = true;
    var box = link.getBoundingClientRect(), navBox = nav.getBoundingClientRect();
    if (box.top < navBox.top || box.bottom > navBox.bottom) link.scrollIntoView({ block: "center" });
  }

  /* ---------------------------------------------------------------- search */

  var INDEX = null;

  function searchIndex() {
    if (INDEX) return INDEX;
    INDEX = [];
    Object.keys(D.models).sort().forEach(function (name) {
      var m = D.models[name];
      INDEX.push({ type: m.kind.name === "seed" ? "seed" : "model", kind: m.kind.name, label: name, sub: (KIND_LABEL[m.kind.name] || m.kind.name) + " · " + m.path,
                   target: href("model", name), hay: (name + " " + m.description + " " + m.tags.join(" ")).toLowerCase(), name: name });
      modelColumns(m).forEach(function (c) {
        var doc = (m.columns.filter(function (x) { return x.name === c; })[0] || {}).description || "";
        INDEX.push({ type: "column", kind: m.kind.name, label: name + "." + c, sub: "column of " + name,
                     target: href("column", "model." + name, c), hay: (name + "." + c + " " + doc).toLowerCase(), name: c });
      });
    });
    Object.keys(D.tests).sort().forEach(function (name) {
      var t = D.tests[name];
      var on = t.on.map(nodeName).join(", ");
      INDEX.push({ type: "test", kind: "test", label: name, sub: "test · " + t.test_type + (on ? " on " + on : ""),
                   target: href("test", name), hay: (name + " " + t.test_type + " " + on + " " + (t.column || "")).toLowerCase(), name: name });
    });
    Object.keys(D.sources).sort().forEach(function (id) {
      var src = D.sources[id];
      INDEX.push({ type: "source", kind: "source", label: id, sub: "source · " + src.change_mode,
                   target: href("source", id), hay: (id + " " + src.description).toLowerCase(), name: src.name });
      src.columns.forEach(function (c) {
        INDEX.push({ type: "column", kind: "source", label: id + "." + c.name, sub: "column of " + id,
                     target: href("column", "source." + id, c.name), hay: (id + "." + c.name + " " + (c.description || "")).toLowerCase(), name: c.name });
      });
    });
    return INDEX;
  }

  function search(query) {
    var words = query.toLowerCase().split(/\s+/).filter(Boolean);
    if (!words.length) return [];
    var q = words.join(" ");
    var TYPE_RANK = { model: 0, seed: 0, source: 1, column: 2, test: 3 };
    var hits = searchIndex().filter(function (item) {
      return words.every(function (w) { return item.hay.indexOf(w) >= 0; });
    }).map(function (item) {
      var label = item.label.toLowerCase(), name = (item.name || "").toLowerCase();
      var rank = label === q || name === q ? 0 : label.indexOf(q) === 0 || name.indexOf(q) === 0 ? 1 : label.indexOf(q) >= 0 ? 2 : 3;
      return { item: item, key: [rank, TYPE_RANK[item.type], item.label.length, item.label] };
    });
    hits.sort(function (a, b) {
      for (var i = 0; i < a.key.length; i++) if (a.key[i] !== b.key[i]) return a.key[i] < b.key[i] ? -1 : 1;
      return 0;
    });
    return hits.slice(0, 50).map(function (hit) { return hit.item; });
  }

  function setupSearch() {
    var input = document.getElementById("search"), list = document.getElementById("search-results");
    var selected = 0, results = [];
    function render() {
      clear(list);
      results = search(input.value);
      list.hidden = !input.value.trim();
      if (!results.length) {
        list.appendChild(h("li", { className: "empty" }, "No matches"));
        return;
      }
      results.forEach(function (item, i) {
        list.appendChild(h("li", { className: i === selected ? "selected" : "" },
          h("a", { href: item.target, onclick: close },
            h("span", { className: "dot kind-" + item.kind }),
            h("span", { className: "result-label" }, item.label),
            h("span", { className: "result-type" }, item.type),
            h("span", { className: "result-sub" }, item.sub))));
      });
    }
    function close() { list.hidden = true; input.blur(); }
    input.addEventListener("input", function () { selected = 0; render(); });
    input.addEventListener("focus", function () { if (input.value.trim()) render(); });
    input.addEventListener("keydown", function (event) {
      if (event.key === "ArrowDown" || event.key === "ArrowUp") {
        event.preventDefault();
        selected = Math.max(0, Math.min(results.length - 1, selected + (event.key === "ArrowDown" ? 1 : -1)));
        Array.prototype.forEach.call(list.children, function (li, i) { li.classList.toggle("selected", i === selected); });
        if (list.children[selected]) list.children[selected].scrollIntoView({ block: "nearest" });
      } else if (event.key === "Enter" && results[selected]) {
        location.hash = results[selected].target;
        close();
      } else if (event.key === "Escape") {
        close();
      }
    });
    document.addEventListener("keydown", function (event) {
      if (event.key === "/" && document.activeElement !== input) { event.preventDefault(); input.focus(); input.select(); }
    });
    document.addEventListener("click", function (event) {
      if (!document.getElementById("search-box").contains(event.target)) list.hidden = true;
    });
  }

  /* ---------------------------------------------------------------- routing */

  function route() {
    var parts = location.hash.replace(/^#\/?/, "").split("/").filter(function (p, i) { return p || i === 0; }).map(function (p) {
      try { return decodeURIComponent(p); } catch (e) { return p; }
    });
    var main = clear(document.getElementById("main"));
    var page, active = null;
    if (!parts[0]) page = overviewPage(null);
    else if (parts[0] === "graph") { page = overviewPage(parts[1] || null); active = parts[1] || null; }
    else if (parts[0] === "model") { page = modelPage(parts[1]); active = "model." + parts[1]; }
    else if (parts[0] === "source") { page = sourcePage(parts[1]); active = "source." + parts[1]; }
    else if (parts[0] === "column") { page = columnPage(parts[1], parts.slice(2).join("/")); active = parts[1]; }
    else if (parts[0] === "test") { page = testPage(parts[1]); active = D.tests[parts[1]] ? D.tests[parts[1]].on[0] : null; }
    else if (parts[0] === "tests") page = testsPage();
    else if (parts[0] === "state") page = statePage();
    else page = notFound("page " + parts.join("/"));
    document.body.classList.toggle("graph-mode", !parts[0] || parts[0] === "graph");
    main.appendChild(page);
    main.scrollTop = 0;
    markActive(active);
    var title = parts[0] && parts[1] ? parts.slice(1).join(".") + " · " : "";
    document.title = title + (D.project.name || "mvflow") + " docs";
  }

  document.getElementById("project-name").textContent = D.project.name || "mvflow";
  sidebar();
  setupSearch();
  window.addEventListener("hashchange", route);
  route();
})();
