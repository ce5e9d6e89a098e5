// The console's shell: the key gate, the navigation and the hash routes (#/page/id?query).

import { apiKey, forgetApiKey, setApiKey } from "./api.js";
import { h, problemBox, show } from "./dom.js";
import * as approvals from "./pages/approvals.js";
import * as receipt from "./pages/receipt.js";
import * as receipts from "./pages/receipts.js";
import * as runs from "./pages/runs.js";
import * as tools from "./pages/tools.js";
import * as webhooks from "./pages/webhooks.js";

// page name -> [render the list, render one item by id]
const PAGES = {
  receipts: [receipts.render, receipt.render],
  approvals: [approvals.render, receipt.render],
  runs: [runs.renderList, runs.renderOne],
  webhooks: [webhooks.renderEndpoints, webhooks.renderDeliveries],
  tools: [tools.render, tools.render],
};

const $ = (id) => document.getElementById(id);

function parseHash() {
  const [path, query] = location.hash.replace(/^#\/?/, "").split("?");
  const [page, ...rest] = path.split("/").filter(Boolean);
  return { page: PAGES[page] ? page : "receipts", id: rest.length ? decodeURIComponent(rest.join("/")) : null,
    params: new URLSearchParams(query || "") };
}

function showGate(error) {
  $("gate").hidden = false;
  $("key-state").hidden = true;
  show($("view"));
  show($("gate-problem"), error ? problemBox(error, "Enter a valid API key to go on.") : null);
  $("key-form").elements.api_key.focus();
}

async function route() {
  if (!apiKey()) {
    showGate(null);
    return;
  }
  $("gate").hidden = true;
  $("key-state").hidden = false;
  $("key-hint").textContent = `key …${apiKey().slice(-4)}`;
  const { page, id, params } = parseHash();
  for (const link of document.querySelectorAll("[data-nav]")) {
    link.classList.toggle("active", link.dataset.nav === page);
  }
  // A fresh container per navigation: a slow page that finishes after the user moved on
  // writes into a detached node instead of over the page now shown.
  const view = h("div", { class: "page", "data-page": page });
  show($("view"), view);
  const [renderList, renderOne] = PAGES[page];
  try {
    await (id ? renderOne(view, id, params) : renderList(view, params));
  } catch (error) {
    if (error.status !== 401) view.append(problemBox(error));
  }
}

function start() {
  $("key-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const key = event.target.elements.api_key.value.trim();
    if (!key) return;
    setApiKey(key);
    event.target.reset();
    route();
  });
  $("forget-key").addEventListener("click", () => {
    forgetApiKey();
    showGate(null);
  });
  window.addEventListener("toolrelay:unauthorized", (event) => showGate(event.detail));
  window.addEventListener("hashchange", route);
  route();
}

start();
