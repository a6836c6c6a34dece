(function () {
  "use strict";
  // The large layout: the cases are JSON (two application/json data blocks); the table shows one
  // page of the matching rows, and a case's detail section is drawn under its row when its id is selected.
  // Text is inserted with textContent only; the charts are the page's own SVG markup.
  var PAGE = Number(document.getElementById("cases-table").getAttribute("data-page")) || 100;
  var F = { verdict: 0, id: 1, operator: 2, category: 3, dtype: 4, params: 5, deciding: 6, margin: 7,
    marginSort: 8, time: 9, timeSort: 10, verdictSort: 11, anchor: 12 };
  // Table column -> [row field holding the sort key, numeric]
  var SORT = [[F.verdictSort, true], [F.id, false], [F.operator, false], [F.category, false], [F.dtype, false],
    [F.params, false], [F.deciding, false], [F.marginSort, true], [F.timeSort, true]];
  var BREAK = /(?<=[\[\],\/_:])|(?=-[A-Za-z])/;
  var table = document.getElementById("cases-table");
  var body = table.tBodies[0];
  var rows = JSON.parse(document.getElementById("case-rows").textContent);
  // The detail sections: JSON arrays of CHUNK cases each, gzip-compressed and base64-encoded; a chunk is
  // decoded (DecompressionStream, no network) when a case in it is first opened.
  var packed = document.getElementById("case-details");
  var CHUNK = Number(packed.getAttribute("data-chunk"));
  var encoded = JSON.parse(packed.textContent);
  var chunks = {};
  var texts = rows.map(function (r) {
    return [r[F.verdict], r[F.id], r[F.operator], r[F.category], r[F.dtype], r[F.params], r[F.deciding],
      r[F.margin], r[F.time]].join(" ").toLowerCase();
  });
  var order = rows.map(function (r, i) { return i; });
  var matching = order;
  var opened = new Set();
  var page = 0;
  var filter = document.getElementById("filter");
  var verdict = document.getElementById("verdict-filter");
  var dtype = document.getElementById("dtype-filter");
  var shown = document.getElementById("shown");
  // The pager above the table and its copy below it.
  var pageLabels = [document.getElementById("page"), document.getElementById("page-bottom")];
  var prevs = [document.getElementById("prev"), document.getElementById("prev-bottom")];
  var nexts = [document.getElementById("next"), document.getElementById("next-bottom")];

  function text(x) { return x === null || x === undefined ? "—" : String(x); }

  function el(tag, className, content) {
    var node = document.createElement(tag);
    if (className) { node.className = className; }
    if (content !== undefined) { node.textContent = text(content); }
    return node;
  }

  function add(parent, child) { parent.appendChild(child); return child; }

  function breakable(parent, id) {
    id.split(BREAK).forEach(function (part, i) {
      if (i > 0) { parent.appendChild(document.createElement("wbr")); }
      parent.appendChild(document.createTextNode(part));
    });
    return parent;
  }

  function badge(name, label) { return el("span", "badge " + name, label === undefined ? name : label); }

  // "label <code>value</code> · label <code>value</code>" into parent.
  function pairs(parent, items, lead) {
    items.forEach(function (item, i) {
      if (i > 0 || lead) { parent.appendChild(document.createTextNode(" · ")); }
      parent.appendChild(document.createTextNode(text(item[0]) + " "));
      add(parent, el("code", "", item[1]));
    });
    return parent;
  }

  function list(className, items, prefix) {
    var ul = el("ul", className);
    items.forEach(function (item) { add(ul, el("li", "", (prefix || "") + text(item))); });
    return ul;
  }

  function tableOf(className, heads, bodyRows) {
    var t = el("table", className);
    var tr = add(add(t, el("thead")), el("tr"));
    heads.forEach(function (h) { add(tr, el("th", "", h)); });
    var tb = add(t, el("tbody"));
    bodyRows.forEach(function (cells) {
      var row = add(tb, el("tr"));
      cells.forEach(function (c) { add(row, el(c.head ? "th" : "td", "", c.head ? c.head : c)); });
    });
    return t;
  }

  function charts(markup) {
    var div = el("div", "charts");
    div.innerHTML = markup.join("");
    return div;
  }

  function criteria(d) {
    if (!d.full) {
      return el("p", "meta", d.criteria.map(function (r) { return r[0] + " " + r[1]; }).join(" · "));
    }
    var t = tableOf("criteria", ["Metric", "Value", "Check", "Threshold", "Margin", "Result", "Threshold from"], []);
    // r: metric, value, comparison, threshold, margin, result, source, note
    d.criteria.forEach(function (r) {
      var kind = r[5].replace(/ /g, "-");
      var tr = add(t.tBodies[0], el("tr", kind));
      r.slice(0, 7).forEach(function (x) { add(tr, el("td", "", x)); });
      if (r[7]) {
        var note = add(add(t.tBodies[0], el("tr", "note " + kind)), el("td", "", r[7]));
        note.colSpan = 7;
      }
    });
    return t;
  }

  function dual(d) {
    var section = el("section", "dual " + (d.passed ? "pass" : "fail"));
    var h3 = add(section, el("h3", "", "Dual-delta " + d.title + ": "));
    add(h3, badge(d.passed ? "pass" : "fail", d.passed ? "non-inferior" : "inferior"));
    add(section, el("p", "conclusion", d.conclusion));
    if (d.reasons.length) { add(section, list("reasons", d.reasons)); }
    pairs(add(section, el("p", "facts-line")), d.facts);
    if (d.full) {
      add(section, tableOf("describe", [""].concat(d.stats), d.describe.map(function (r) {
        return [{ head: r[0] }].concat(r[1]);
      })));
      if (d.tests.length) {
        add(section, tableOf("tests", ["Test", "Statistic", "p-value", "Alternative", "Note"],
          d.tests.map(function (t) { return [t[0], t[1], t[2], t[3], t[4] || ""]; })));
      }
    }
    if (d.plots.length) { add(section, charts(d.plots)); }
    return section;
  }

  function loadChunk(c) {
    if (!chunks[c]) {
      if (typeof DecompressionStream === "undefined") { return Promise.reject(new Error("no DecompressionStream")); }
      var binary = atob(encoded[c]);
      var bytes = new Uint8Array(binary.length);
      for (var k = 0; k < binary.length; k += 1) { bytes[k] = binary.charCodeAt(k); }
      var stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
      chunks[c] = new Response(stream).text().then(function (json) {
        var cases = JSON.parse(json);
        chunks[c] = { cases: cases };
        return cases;
      });
    }
    return Promise.resolve(chunks[c].cases || chunks[c]);
  }

  // The detail section of case i (its chunk decoded): what the small layout shows of a case, in order.
  function detail(i) {
    var d = chunks[Math.floor(i / CHUNK)].cases[i % CHUNK], r = rows[i];
    var box = el("details", "case " + r[F.verdict]);
    box.id = d.anchor;
    box.open = true;
    var summary = add(box, el("summary"));
    add(summary, badge(r[F.verdict]));
    summary.appendChild(document.createTextNode(" "));
    breakable(add(summary, el("code")), r[F.id]);
    summary.appendChild(document.createTextNode(" "));
    add(summary, el("span", "why", d.headline));
    if (d.description) { add(box, el("p", "description", d.description)); }
    var meta = add(box, el("p", "meta", r[F.operator] + " (" + r[F.category] + ") · " + r[F.dtype] + " · " +
      (d.params || "no params") + " · spec "));
    add(meta, el("code", "", d.spec));
    meta.appendChild(document.createTextNode(" · " + d.trials + ", seed " + d.seed));
    pairs(add(box, el("p", "meta")), d.facts);
    if (d.waiver) {
      var w = add(box, el("p", "waiver"));
      add(w, el("strong", "", (r[F.verdict] === "skip" ? "Waived" : "Waiver in force") + ":"));
      w.appendChild(document.createTextNode(" " + d.waiver));
    }
    if (d.error) { add(box, el("pre", "error", d.error)); }
    if (d.warnings.length) { add(box, list("warnings", d.warnings, "warning: ")); }
    if (d.reasons.length) { add(box, list("reasons", d.reasons)); }
    if (d.criteria.length) { add(box, criteria(d)); }
    if (d.worst) {
      var worst = add(box, el("p", "worst"));
      add(worst, el("strong", "", "Worst element"));
      pairs(worst, d.worst, true);
    }
    if (d.buckets_chart) {
      add(box, charts([d.buckets_chart]));
    } else if (d.buckets.length) {
      var b = add(box, el("p", "buckets"));
      add(b, el("strong", "", "|e−b|/|b| buckets"));
      b.appendChild(document.createTextNode(d.buckets.map(function (x) { return " · " + x[0] + ": " + x[1]; }).join("")));
    }
    d.dual.forEach(function (x) { add(box, dual(x)); });
    if (d.metrics.length) {
      var m = add(box, el("details", "metrics"));
      add(m, el("summary", "", "All metrics (worst over trials, impl vs baseline)"));
      d.metrics.forEach(function (out) {
        var p = add(m, el("p"));
        add(p, el("strong", "", "output " + out[0]));
        pairs(p, out[1], true);
      });
    }
    return box;
  }

  function tableRow(i) {
    var r = rows[i];
    var tr = el("tr");
    tr.setAttribute("data-verdict", r[F.verdict]);
    tr.setAttribute("data-case", r[F.anchor]);
    tr.setAttribute("data-dtype", r[F.dtype]);
    add(add(tr, el("td")), badge(r[F.verdict]));
    var link = add(add(tr, el("td", "id")), el("a"));
    link.href = "#" + r[F.anchor];
    link.setAttribute("aria-expanded", opened.has(i) ? "true" : "false");
    breakable(link, r[F.id]);
    link.addEventListener("click", function (event) { event.preventDefault(); toggle(i); });
    [[F.operator, ""], [F.category, ""], [F.dtype, ""], [F.params, "params"], [F.deciding, "deciding"],
      [F.margin, "num"], [F.time, "num"]].forEach(function (f) { add(tr, el("td", f[1], r[f[0]])); });
    return tr;
  }

  function detailRow(i) {
    var tr = el("tr", "detail-row");
    tr.setAttribute("data-detail", rows[i][F.anchor]);
    var td = add(tr, el("td"));
    td.colSpan = 9;
    add(td, detail(i));
    return tr;
  }

  function render() {
    var pages = Math.max(1, Math.ceil(matching.length / PAGE));
    page = Math.min(Math.max(page, 0), pages - 1);
    var start = page * PAGE, end = Math.min(start + PAGE, matching.length);
    var fragment = document.createDocumentFragment();
    for (var k = start; k < end; k += 1) {
      fragment.appendChild(tableRow(matching[k]));
      if (opened.has(matching[k]) && ready(matching[k])) { fragment.appendChild(detailRow(matching[k])); }
    }
    body.textContent = "";
    body.appendChild(fragment);
    shown.textContent = (matching.length ? (start + 1) + "–" + end : "0") + " of " + matching.length +
      " matching shown (" + rows.length + (rows.length === 1 ? " case)" : " cases)");
    pageLabels.forEach(function (label) { label.textContent = "page " + (page + 1) + " of " + pages; });
    prevs.forEach(function (button) { button.disabled = page === 0; });
    nexts.forEach(function (button) { button.disabled = page >= pages - 1; });
  }

  function ready(i) { var c = chunks[Math.floor(i / CHUNK)]; return Boolean(c && c.cases); }

  // Open (or close) case i; its chunk is decoded first; `block` says where to scroll it.
  function toggle(i, block) {
    if (opened.has(i)) { opened.delete(i); render(); return; }
    opened.add(i);
    loadChunk(Math.floor(i / CHUNK)).then(function () {
      render();
      var section = document.getElementById(rows[i][F.anchor]);
      if (section) { section.scrollIntoView({ block: block || "nearest" }); }
    }, function (error) {
      // A browser without DecompressionStream (before Chrome 80, Firefox 113, Safari 16.4) cannot show details.
      opened.delete(i);
      shown.textContent = "the details could not be decoded in this browser (" + error + "); results.json has them";
    });
  }

  // A term matches where a word starts (not after a letter or digit): "float16" does not match "bfloat16".
  function hasWord(haystack, term) {
    for (var at = haystack.indexOf(term); at !== -1; at = haystack.indexOf(term, at + 1)) {
      if (at === 0 || !/[a-z0-9]/.test(haystack.charAt(at - 1))) { return true; }
    }
    return false;
  }

  function applyFilter() {
    var terms = filter.value.toLowerCase().split(/\s+/).filter(Boolean);
    var wanted = verdict.value, kind = dtype.value;
    matching = order.filter(function (i) {
      return (!wanted || rows[i][F.verdict] === wanted) && (!kind || rows[i][F.dtype] === kind) &&
        terms.every(function (term) { return hasWord(texts[i], term); });
    });
    page = 0;
    render();
  }

  function sortBy(header) {
    var field = SORT[header.cellIndex][0], numeric = SORT[header.cellIndex][1];
    var descending = header.getAttribute("aria-sort") === "ascending";
    Array.prototype.forEach.call(header.parentNode.cells, function (th) { th.removeAttribute("aria-sort"); });
    header.setAttribute("aria-sort", descending ? "descending" : "ascending");
    var keys = rows.map(function (r) { return numeric ? Number(r[field]) : String(r[field]).toLowerCase(); });
    order = rows.map(function (r, i) { return i; });
    order.sort(function (a, b) {
      var c = keys[a] < keys[b] ? -1 : keys[a] > keys[b] ? 1 : 0;
      return c === 0 ? a - b : (descending ? -c : c);
    });
    applyFilter();
  }

  // A link to #cN opens case N where it is listed.
  function openHash() {
    var match = /^#(c\d+)$/.exec(window.location.hash);
    var i = match ? rows.findIndex(function (r) { return r[F.anchor] === match[1]; }) : -1;
    var at = i < 0 ? -1 : matching.indexOf(i);
    if (at < 0 || opened.has(i)) { return; }
    page = Math.floor(at / PAGE);
    toggle(i, "start");
  }

  filter.addEventListener("input", applyFilter);
  verdict.addEventListener("change", applyFilter);
  dtype.addEventListener("change", applyFilter);
  function step(by, fromBottom) {
    page += by;
    render();
    if (fromBottom) { table.scrollIntoView(); }  // from the pager under the table: to the top of the new page
  }

  prevs.forEach(function (button, k) { button.addEventListener("click", function () { step(-1, k === 1); }); });
  nexts.forEach(function (button, k) { button.addEventListener("click", function () { step(1, k === 1); }); });
  window.addEventListener("hashchange", openHash);
  Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th) {
    th.addEventListener("click", function () { sortBy(th); });
    th.setAttribute("title", th.getAttribute("title") || "sort");
  });
  applyFilter();
  openHash();
})();
