// Calls waiting for a person: receipts `waiting` whose approval is `requested`, with approve/reject.
// A call made by an agent run links to its run (metadata.run_id), which goes on once it is decided.

import { get } from "../api.js";
import { approvalControls, approvalSummary, awaitsApproval } from "../approval.js";
import { h, show } from "../dom.js";

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

function decided(receipt, verb, by) {
  const what = verb === "approve" ? "Approved" : "Rejected";
  const next = verb === "approve" ? "it runs now" : `it ended ${receipt.status}`;
  const run = receipt.metadata && receipt.metadata.run_id;
  return h("p", { class: "notice ok", "data-testid": "notice" },
    `${what} by ${by}: `, h("a", { href: `#/receipts/${receipt.id}` }, receipt.id), ` (${receipt.tool}), ${next}`,
    run ? [", and its run ", h("a", { href: `#/runs/${run}` }, run), " goes on"] : null, ".");
}

export async function render(view, params, notice = null) {
  show(view, h("h1", {}, "Approvals waiting"), notice, h("p", { class: "muted" }, "Loading…"));
  const { found, more } = await waiting();
  const again = (receipt, verb, by) => render(view, params, decided(receipt, verb, by));
  const row = (receipt) => {
    const run = receipt.metadata && receipt.metadata.run_id;
    return h("tr", { "data-receipt-id": receipt.id },
      h("td", {}, h("a", { href: `#/receipts/${receipt.id}` }, receipt.id)),
      h("td", {}, receipt.tool),
      h("td", {}, run ? h("a", { href: `#/runs/${run}`, "data-run-link": run }, run) : h("span", { class: "muted" }, "—")),
      h("td", {}, approvalSummary(receipt.approval)),
      h("td", {}, h("code", { class: "clip" }, JSON.stringify(receipt.input))),
      h("td", {}, approvalControls(receipt, again)));
  };
  show(view, h("h1", {}, "Approvals waiting"),
    notice,
    h("p", { class: "muted" }, "Calls of tools that require approval run only once a person approves them; ",
      "a rejected call ends failed (rejected) and never runs, and one left unanswered expires."),
    found.length
      ? h("table", { class: "list", "data-testid": "approvals" },
        h("thead", {}, h("tr", {}, ["Receipt", "Tool", "Run", "Approval", "Arguments", "Decision"]
          .map((name) => h("th", {}, name)))),
        h("tbody", {}, found.map(row)))
      : h("p", { class: "empty", "data-testid": "approvals-empty" }, "No calls are waiting for approval."),
    more ? h("p", { class: "muted" }, `Only the first ${PAGE_SIZE * MAX_PAGES} waiting receipts were read.`) : null);
}
