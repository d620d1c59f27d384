document.querySelectorAll("table.sortable").forEach(function (table) {
  table.querySelectorAll("th").forEach(function (th, col) {
    th.addEventListener("click", function () {
      var up = th.getAttribute("aria-sort") !== "ascending";
      table.querySelectorAll("th").forEach(function (h) { h.removeAttribute("aria-sort"); });
      th.setAttribute("aria-sort", up ? "ascending" : "descending");
      var body = table.tBodies[0];
      var rows = Array.prototype.slice.call(body.rows);
      var numeric = th.dataset.type === "num";
      rows.sort(function (a, b) {
        var x = a.cells[col].dataset.sort, y = b.cells[col].dataset.sort;
        var c = numeric ? (parseFloat(x) || -1) - (parseFloat(y) || -1) : x.localeCompare(y);
        return up ? c : -c;
      });
      rows.forEach(function (r) { body.appendChild(r); });
    });
  });
});
var views = Array.prototype.slice.call(document.querySelectorAll("section.view"));
var buttons = Array.prototype.slice.call(document.querySelectorAll("nav#views button"));
function show(id) {
  // sections are "view-<id>", so the address's #<id> never scrolls the page by itself
  if (!document.getElementById("view-" + id)) { id = views[0].id.slice(5); }
  views.forEach(function (v) { v.hidden = v.id !== "view-" + id; });
  buttons.forEach(function (b) { b.setAttribute("aria-pressed", String(b.dataset.view === id)); });
}
buttons.forEach(function (b) {
  b.addEventListener("click", function () {
    history.replaceState(null, "", "#" + b.dataset.view);
    show(b.dataset.view);
  });
});
window.addEventListener("hashchange", function () { show(location.hash.slice(1)); });
function applyFilters() {
  var allowed = {};
  document.querySelectorAll("#filters input").forEach(function (i) {
    allowed[i.name] = allowed[i.name] || {};
    if (i.checked) { allowed[i.name][i.value] = true; }
  });
  views.forEach(function (v) {
    var rows = v.querySelectorAll("tbody tr"), shown = 0;
    rows.forEach(function (tr) {
      var keep = ["size", "group", "provenance"].every(function (k) {
        return allowed[k][tr.dataset[k]];
      });
      tr.hidden = !keep;
      if (keep) { shown += 1; }
    });
    v.querySelector("p.shown").textContent = shown + " of " + rows.length + " rows shown" +
      (shown < rows.length ? " (the filters above hide the rest)" : "");
  });
}
document.querySelectorAll("#filters input").forEach(function (i) {
  i.addEventListener("change", applyFilters);
});
applyFilters();
show(location.hash.slice(1));
