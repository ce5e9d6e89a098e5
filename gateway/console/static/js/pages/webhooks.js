// Webhook endpoints, and one endpoint's deliveries (status filter, paging, retry).

import { get } from "../api.js";
import { deliveryTable, retryNotice } from "../deliveries.js";
import { h, show, when } from "../dom.js";

const DELIVERY_STATUSES = ["", "pending", "delivered", "failed"];

export async function renderEndpoints(view, params) {
  show(view, h("h1", {}, "Webhook endpoints"), h("p", { class: "muted" }, "Loading…"));
  const page = await get("/v1/webhook-endpoints", { cursor: params.get("cursor") });
  show(view, h("h1", {}, "Webhook endpoints"),
    page.data.length
      ? h("table", { class: "list", "data-testid": "endpoints" },
        h("thead", {}, h("tr", {}, ["Endpoint", "URL", "Description", "Events", "State", "Created"]
          .map((name) => h("th", {}, name)))),
        h("tbody", {}, page.data.map((endpoint) => {
          const row = h("tr", { "data-endpoint-id": endpoint.id, class: "clickable", tabindex: 0 },
            h("td", {}, h("a", { href: `#/webhooks/${endpoint.id}` }, endpoint.id)),
            h("td", {}, h("code", {}, endpoint.url)),
            h("td", {}, endpoint.description),
            h("td", {}, endpoint.event_types.length ? endpoint.event_types.join(", ") : "all"),
            h("td", {}, endpoint.enabled ? "enabled" : `disabled: ${endpoint.disabled_reason || ""}`,
              endpoint.failing_since ? h("div", { class: "error-code" }, `failing since ${when(endpoint.failing_since)}`)
                : null,
              endpoint.paused_until ? h("div", { class: "error-code" }, `paused until ${when(endpoint.paused_until)}`)
                : null),
            h("td", {}, when(endpoint.created_at)));
          row.addEventListener("click", (event) => {
            if (!event.target.closest("a")) location.hash = `#/webhooks/${endpoint.id}`;
          });
          return row;
        })))
      : h("p", { class: "empty" }, "No webhook endpoints. Register one with POST /v1/webhook-endpoints."),
    page.next_cursor ? h("p", { class: "paging" },
      h("a", { href: `#/webhooks?cursor=${encodeURIComponent(page.next_cursor)}` }, "Next page »")) : null);
}

export async function renderDeliveries(view, id, params, notice = null) {
  show(view, h("h1", {}, "Endpoint ", h("code", {}, id)), h("p", { class: "muted" }, "Loading…"));
  const status = params.get("status") || "";
  const [endpoint, page] = await Promise.all([
    get(`/v1/webhook-endpoints/${encodeURIComponent(id)}`),
    get(`/v1/webhook-endpoints/${encodeURIComponent(id)}/deliveries`, { status, cursor: params.get("cursor") }),
  ]);
  const hashFor = (query) => `#/webhooks/${id}${query.size ? `?${query}` : ""}`;
  const filters = h("nav", { class: "quick", "aria-label": "Delivery status" }, DELIVERY_STATUSES.map((value) =>
    h("a", { href: hashFor(new URLSearchParams(value ? { status: value } : {})),
      class: value === status ? "active" : null }, value || "all")));
  const next = new URLSearchParams(params);
  next.set("cursor", page.next_cursor || "");
  show(view,
    h("h1", {}, "Endpoint ", h("code", {}, endpoint.id)),
    h("p", {}, h("code", {}, endpoint.url), endpoint.description ? ` — ${endpoint.description}` : "",
      endpoint.enabled ? "" : h("strong", { class: "error-code" }, ` disabled: ${endpoint.disabled_reason || ""}`)),
    h("p", {}, h("a", { href: "#/webhooks" }, "« All endpoints")),
    h("h2", {}, "Deliveries"),
    filters,
    notice,
    page.data.length
      ? deliveryTable(page.data, (delivery) => renderDeliveries(view, id, params, retryNotice(delivery)))
      : h("p", { class: "empty" }, "No deliveries."),
    page.next_cursor ? h("p", { class: "paging" }, h("a", { href: hashFor(next) }, "Next page »")) : null);
}
