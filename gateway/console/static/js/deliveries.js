// A table of webhook deliveries with their attempts, and a retry button per delivery.

import { post } from "./api.js";
import { button, h, problemBox, show, span, statusBadge, when } from "./dom.js";

function attemptList(attempts) {
  if (!attempts.length) return h("span", { class: "muted" }, "not sent yet");
  return h("ol", { class: "attempts" }, attempts.map((attempt) => h("li", {
    class: attempt.success ? "hit-ok" : "hit-ko", title: `${when(attempt.at)}${attempt.response ? `\n${attempt.response}` : ""}`,
  }, h("code", {}, attempt.status_code ?? "—"), ` · ${span(attempt.latency_ms)} · ${when(attempt.at).slice(11, 23)}`,
  attempt.error ? h("span", { class: "error-code" }, ` ${attempt.error}`) : null)));
}

/** `retried(delivery)` runs after a retry was accepted, with the delivery as the API answered. */
export function deliveryTable(deliveries, retried, { receiptColumn = true } = {}) {
  return h("table", { class: "list", "data-testid": "deliveries" },
    h("thead", {}, h("tr", {}, ["Message", "Event", receiptColumn ? "Receipt" : "To", "Status", "Attempts", ""]
      .map((name) => h("th", {}, name)))),
    h("tbody", {}, deliveries.map((delivery) => {
      const message = h("div", { class: "message" });
      return h("tr", { "data-delivery-id": delivery.id, "data-status": delivery.status },
        h("td", {}, h("code", {}, delivery.id)),
        h("td", {}, delivery.event_type),
        h("td", {}, receiptColumn
          ? h("a", { href: `#/receipts/${delivery.receipt_id}` }, delivery.receipt_id)
          : delivery.endpoint_id ? h("a", { href: `#/webhooks/${delivery.endpoint_id}` }, delivery.endpoint_id)
            : delivery.url),
        h("td", {}, statusBadge(delivery.status),
          delivery.next_attempt_at ? h("div", { class: "muted" }, `next ${when(delivery.next_attempt_at)}`) : null),
        h("td", {}, attemptList(delivery.attempts)),
        h("td", {}, button("Retry now", { "data-action": "retry" }, async () => {
          try {
            await retried(await post(`/v1/deliveries/${delivery.id}/retry`));
          } catch (error) {
            show(message, problemBox(error));
          }
        }), message));
    })));
}

/** What the page says after a retry was accepted. */
export function retryNotice(delivery) {
  return h("p", { class: "ok", "data-testid": "notice" },
    `Retry of ${delivery.id} queued: it is sent again now, with the same webhook-id.`);
}
