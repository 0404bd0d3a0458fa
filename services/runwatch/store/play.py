"""``GET /play``: a small query page, the one the pager's investigation links open.

ClickHouse serves a SQL page at ``/play`` that takes ``?user=`` and a base64 query
after ``#``; the pager's default link (``RUNWATCH_PAGER_INVESTIGATE_URL_TEMPLATE``,
``http://127.0.0.1:8123/play?user=analyst#<base64 SQL>``) opens it. The store
serves this page in its place: the query from the link, user and password fields,
and the answer as a table. The page is static; it asks the store at ``/`` with the
``X-ClickHouse-User``/``X-ClickHouse-Key`` headers, ``default_format=JSONCompact``,
and writes every value as text (never as HTML).
"""

from __future__ import annotations

PLAY_HTML = b"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>runwatch store: play</title>
<style>
body{font:14px system-ui,sans-serif;margin:1.5em}textarea{width:100%;height:9em;font:13px monospace}
table{border-collapse:collapse;margin-top:1em}td,th{border:1px solid #ccc;padding:2px 6px;
font:12px monospace;text-align:left;vertical-align:top}#err{color:#b00;white-space:pre-wrap}
</style></head><body>
<h3>runwatch store: SQL</h3>
<label>user <input id="user"></label> <label>password <input id="password" type="password">
</label> <button id="run">Run</button> <span id="info"></span>
<p><textarea id="query" spellcheck="false"></textarea></p>
<div id="err"></div><table id="out"></table>
<script>
const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);
$("user").value = params.get("user") || "default";
$("password").value = params.get("password") || "";
function fromHash() {
  if (location.hash.length < 2) return "";
  try {
    const bin = atob(decodeURIComponent(location.hash.slice(1)));
    return new TextDecoder().decode(Uint8Array.from(bin, (c) => c.charCodeAt(0)));
  } catch (e) { return ""; }
}
$("query").value = fromHash();
function cell(row, tag, value) {
  const td = document.createElement(tag);
  td.textContent = typeof value === "string" ? value : JSON.stringify(value);
  row.appendChild(td);
}
async function run() {
  $("err").textContent = ""; $("out").replaceChildren(); $("info").textContent = "running...";
  const started = performance.now();
  try {
    const resp = await fetch("/?default_format=JSONCompact", {method: "POST",
      body: $("query").value, headers: {"X-ClickHouse-User": $("user").value,
                                        "X-ClickHouse-Key": $("password").value}});
    const text = await resp.text();
    if (!resp.ok) { $("err").textContent = text; $("info").textContent = ""; return; }
    let doc;
    try { doc = JSON.parse(text); } catch (e) { $("err").textContent = text; return; }
    const head = document.createElement("tr");
    for (const m of doc.meta || []) cell(head, "th", m.name);
    $("out").appendChild(head);
    for (const r of doc.data || []) {
      const tr = document.createElement("tr");
      for (const v of r) cell(tr, "td", v);
      $("out").appendChild(tr);
    }
    $("info").textContent = (doc.rows ?? (doc.data || []).length) + " rows, " +
      Math.round(performance.now() - started) + " ms";
  } catch (e) { $("err").textContent = String(e); $("info").textContent = ""; }
}
$("run").onclick = run;
if ($("query").value && (params.get("run") !== "0")) run();
</script></body></html>
"""
"""The page (UTF-8 HTML)."""
