// Calls waiting for a person: receipts `waiting` whose approval is `requested`, with approve/reject.

import { get } from "../api.js";
import { approvalControls, awaitsApproval } from "../approval.js";
import { h, show, statusBadge, when } from "../dom.js";

const PAGE_SIZE = 100;
const MAX_PAGES = 10;

async function waiting() {
  const found = [];
  let cursor = null;
  let pages = 0;
  do {
    const page = await get("/v1/receipts", { status: "waiting", limit: PAGE_SIZE, cursor });
    found.push(...page.data.filter(awaitsApproval));
    cursor = page.next_cursor;
    pages += 1;
  } while (cursor && pages < MAX_PAGES);
  return { found, more: Boolean(cursor) };
}

export async function render(view) {
  show(view, h("h1", {}, "Approvals waiting"), h("p", { class: "muted" }, "Loading…"));
  const { found, more } = await waiting();
  const row = (receipt) => h("tr", { "data-receipt-id": receipt.id },
    h("td", {}, h("a", { href: `#/receipts/${receipt.id}` }, receipt.id)),
    h("td", {}, receipt.tool),
    h("td", {}, statusBadge(receipt.status)),
    h("td", {}, when(receipt.created_at)),
    h("td", {}, h("code", { class: "clip" }, JSON.stringify(receipt.input))),
    h("td", {}, approvalControls(receipt, () => render(view))));
  show(view, h("h1", {}, "Approvals waiting"),
    h("p", { class: "muted" }, "Calls of tools that require approval run only once a person approves them."),
    found.length
      ? h("table", { class: "list", "data-testid": "approvals" },
        h("thead", {}, h("tr", {}, ["Receipt", "Tool", "Status", "Created", "Arguments", "Decision"]
          .map((name) => h("th", {}, name)))),
        h("tbody", {}, found.map(row)))
      : h("p", { class: "empty", "data-testid": "approvals-empty" }, "No calls are waiting for approval."),
    more ? h("p", { class: "muted" }, `Only the first ${PAGE_SIZE * MAX_PAGES} waiting receipts were read.`) : null);
}
