// Receipts: quick status filters, a filter form (status, tool, trace, created after/before) and paging.
// status, tool and trace_id are the API's filters; the time window is applied here, on created_at
// (the list is newest first, so the first receipt older than "after" ends the listing).

import { get } from "../api.js";
import { button, h, show, span, statusBadge, when } from "../dom.js";

const STATUSES = ["pending", "running", "waiting", "success", "failed", "partially_succeeded", "canceled"];
const QUICK = [["", "All"], ["failed", "Failed"], ["running", "Running"], ["pending", "Pending"],
  ["waiting", "Waiting"], ["success", "Succeeded"]];
const FIELDS = ["status", "tool", "trace_id", "after", "before"];
const PAGE_SIZE = 50;
const MAX_PAGES = 10; // pages read in a row to find receipts inside the time window

function hashFor(params) {
  const query = new URLSearchParams([...params].filter(([, value]) => value));
  return `#/receipts${query.size ? `?${query}` : ""}`;
}

function utcMillis(value) {
  return value ? Date.parse(`${value}Z`) : null; // the form's times are UTC, as every time shown
}

async function load(params) {
  const after = utcMillis(params.get("after"));
  const before = utcMillis(params.get("before"));
  const rows = [];
  let next = params.get("cursor");
  let skipped = 0;
  let pages = 0;
  do {
    const page = await get("/v1/receipts", { status: params.get("status"), tool: params.get("tool"),
      trace_id: params.get("trace_id"), limit: PAGE_SIZE, cursor: next });
    pages += 1;
    next = page.next_cursor;
    for (const receipt of page.data) {
      const created = Date.parse(receipt.created_at);
      if (before !== null && created >= before) {
        skipped += 1;
      } else if (after !== null && created < after) {
        next = null; // newest first: every later receipt is older still
        break;
      } else {
        rows.push(receipt);
      }
    }
  } while (next && rows.length === 0 && pages < MAX_PAGES);
  return { rows, next, skipped };
}

function filterForm(params) {
  const input = (name, attrs) => h("input", { name, value: params.get(name) || "", ...attrs });
  const form = h("form", { class: "filters", "data-testid": "receipt-filters" },
    h("label", {}, "Status ", h("select", { name: "status" },
      h("option", { value: "" }, "any"),
      STATUSES.map((status) => h("option", { value: status, selected: params.get("status") === status }, status)))),
    h("label", {}, "Tool ", input("tool", { placeholder: "name", size: 14 })),
    h("label", {}, "Trace ", input("trace_id", { placeholder: "trace_…", size: 18 })),
    h("label", {}, "Created after (UTC) ", input("after", { type: "datetime-local", step: 1 })),
    h("label", {}, "before ", input("before", { type: "datetime-local", step: 1 })),
    h("button", { type: "submit" }, "Apply"),
    h("a", { href: "#/receipts", class: "reset" }, "Clear"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const data = new FormData(form);
    location.hash = hashFor(new URLSearchParams(FIELDS.map((name) => [name, data.get(name) || ""])));
  });
  return form;
}

function quickFilters(params) {
  const current = params.get("status") || "";
  return h("nav", { class: "quick", "aria-label": "Quick filters" }, QUICK.map(([status, label]) => {
    const next = new URLSearchParams(params);
    next.delete("cursor");
    next.set("status", status);
    return h("a", { href: hashFor(next), class: status === current ? "active" : null, "data-quick": status || "all" },
      label);
  }));
}

export function receiptRow(receipt) {
  const took = receipt.finished_at ? Date.parse(receipt.finished_at) - Date.parse(receipt.created_at) : null;
  const row = h("tr", { "data-receipt-id": receipt.id, class: `clickable row-${receipt.status}`, tabindex: 0 },
    h("td", {}, h("a", { href: `#/receipts/${receipt.id}` }, receipt.id)),
    h("td", {}, receipt.tool),
    h("td", {}, statusBadge(receipt.status)),
    h("td", { class: "error-code" }, receipt.error ? receipt.error.code : ""),
    h("td", {}, `${receipt.attempt}/${receipt.max_attempts}`),
    h("td", { class: "nowrap" }, when(receipt.created_at)),
    h("td", { class: "nowrap" }, span(took)),
    h("td", { class: "trace" }, receipt.trace_id));
  const open = () => { location.hash = `#/receipts/${receipt.id}`; };
  row.addEventListener("click", (event) => { if (!event.target.closest("a")) open(); });
  row.addEventListener("keydown", (event) => { if (event.key === "Enter") open(); });
  return row;
}

export function receiptTable(receipts) {
  return h("table", { class: "list", "data-testid": "receipts" },
    h("thead", {}, h("tr", {}, ["Receipt", "Tool", "Status", "Error", "Attempts", "Created", "Took", "Trace"]
      .map((name) => h("th", {}, name)))),
    h("tbody", {}, receipts.map(receiptRow)));
}

export async function render(view, params) {
  // The filters are drawn once; only the results below them wait for the API.
  const results = h("div", { class: "results" }, h("p", { class: "muted" }, "Loading…"));
  show(view, h("h1", {}, "Receipts"), quickFilters(params), filterForm(params), results);
  await showResults(results, params);
}

async function showResults(results, params) {
  const { rows, next, skipped } = await load(params);
  const paging = new URLSearchParams(params);
  paging.set("cursor", next || "");
  const first = new URLSearchParams(params);
  first.delete("cursor");
  show(results,
    rows.length ? receiptTable(rows) : h("p", { class: "empty" }, "No receipts match these filters."),
    h("p", { class: "paging" },
      skipped ? h("span", { class: "muted" }, `${skipped} newer than the window not shown. `) : null,
      params.get("cursor") ? h("a", { href: hashFor(first) }, "« First page") : null,
      next ? h("a", { href: hashFor(paging), "data-testid": "next-page" }, "Next page »") : null,
      button("Refresh", { "data-action": "refresh" }, () => showResults(results, params))));
}
