(function () {
  "use strict";
  // Rows shown at once; the rest of the matching rows wait behind "show all" so that
  // filtering and sorting stay fast on runs with thousands of cases.
  var PAGE = 500;
  var table = document.getElementById("cases-table");
  if (!table) { return; }
  var body = table.tBodies[0];
  var rows = Array.prototype.slice.call(body.rows);
  var texts = rows.map(function (row) { return row.textContent.toLowerCase(); });
  var sections = rows.map(function (row) { return document.getElementById(row.getAttribute("data-case")); });
  var position = new Map(rows.map(function (row, i) { return [row, i]; }));
  var filter = document.getElementById("filter");
  var verdict = document.getElementById("verdict-filter");
  var dtype = document.getElementById("dtype-filter");
  var shown = document.getElementById("shown");
  var more = document.getElementById("show-all");
  var showAll = false;

  // A term matches where a word starts (not after a letter or digit): "float16" does not match "bfloat16".
  function hasWord(text, term) {
    for (var at = text.indexOf(term); at !== -1; at = text.indexOf(term, at + 1)) {
      if (at === 0 || !/[a-z0-9]/.test(text.charAt(at - 1))) { return true; }
    }
    return false;
  }

  function matches(i, terms, wanted, kind) {
    return (!wanted || rows[i].getAttribute("data-verdict") === wanted) &&
      (!kind || rows[i].getAttribute("data-dtype") === kind) &&
      terms.every(function (term) { return hasWord(texts[i], term); });
  }

  function applyFilter() {
    var terms = filter.value.toLowerCase().split(/\s+/).filter(Boolean);
    var wanted = verdict.value;
    var kind = dtype.value;
    var matched = 0;
    var order = Array.prototype.slice.call(body.rows);
    order.forEach(function (row) {
      var i = position.get(row);
      var ok = matches(i, terms, wanted, kind);
      if (ok) { matched += 1; }
      row.hidden = !ok || (!showAll && matched > PAGE);
      if (sections[i] && sections[i].hidden === ok) { sections[i].hidden = !ok; }
    });
    var listed = showAll ? matched : Math.min(matched, PAGE);
    shown.textContent = listed + " of " + rows.length + (rows.length === 1 ? " case" : " cases") + " shown" +
      (listed < matched ? " (" + matched + " match)" : "");
    more.hidden = listed >= matched;
  }

  function key(row, column, numeric) {
    var cell = row.cells[column];
    var raw = cell.hasAttribute("data-sort") ? cell.getAttribute("data-sort") : cell.textContent;
    return numeric ? Number(raw) : raw.toLowerCase();
  }

  function sortBy(header) {
    var column = header.cellIndex;
    var numeric = header.getAttribute("data-type") === "num";
    var descending = header.getAttribute("aria-sort") === "ascending";
    Array.prototype.forEach.call(header.parentNode.cells, function (th) { th.removeAttribute("aria-sort"); });
    header.setAttribute("aria-sort", descending ? "descending" : "ascending");
    var order = rows.map(function (row, i) { return { row: row, key: key(row, column, numeric), i: i }; });
    order.sort(function (a, b) {
      var c = a.key < b.key ? -1 : a.key > b.key ? 1 : 0;
      return c === 0 ? a.i - b.i : (descending ? -c : c);
    });
    order.forEach(function (item) { item.row.hidden = true; });
    var fragment = document.createDocumentFragment();
    order.forEach(function (item) { fragment.appendChild(item.row); });
    body.appendChild(fragment);
    applyFilter();
  }

  filter.addEventListener("input", applyFilter);
  verdict.addEventListener("change", applyFilter);
  dtype.addEventListener("change", applyFilter);
  more.addEventListener("click", function () { showAll = true; applyFilter(); });
  Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th) {
    th.addEventListener("click", function () { sortBy(th); });
    th.setAttribute("title", th.getAttribute("title") || "sort");
  });
  applyFilter();
})();
