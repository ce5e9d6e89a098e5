// Approve or reject a receipt waiting for a person's decision (POST /v1/receipts/{id}/approve|reject),
// and a receipt's `approval` as a person reads it.
//
// The API's `approval` object: {state: requested|approved|rejected|expired, requested_at, expires_at,
// and once decided decided_at, by, and comment (approved) or reason (rejected)}.

import { post } from "./api.js";
import { button, h, problemBox, show, when } from "./dom.js";

const BY = "toolrelay.decided_by";

/** Whether the receipt waits for an approval decision. */
export function awaitsApproval(receipt) {
  return receipt.status === "waiting" && receipt.approval && receipt.approval.state === "requested";
}

/** One line about an approval: "approved by ana at ... — ok to go", "requested at ..., expires ...". */
export function approvalSummary(approval) {
  const note = approval.comment || approval.reason;
  const parts = approval.state === "requested"
    ? [h("span", { class: "line" }, `requested ${when(approval.requested_at)}`),
      approval.expires_at ? h("span", { class: "line" }, `expires ${when(approval.expires_at)}`) : null]
    : [approval.state, approval.by ? ` by ${approval.by}` : "", approval.decided_at ? ` at ${when(approval.decided_at)}` : "",
      note ? ` — ${note}` : "", approval.state === "expired" && approval.expires_at ? ` at ${when(approval.expires_at)}` : ""];
  return h("span", { class: `approval-state approval-${approval.state}`, "data-approval-state": approval.state },
    ...parts);
}

/**
 * The decision controls: who decides, a note, [data-action=approve] and [data-action=reject].
 * `done(receipt, verb, by)` gets the receipt as the API answered; a problem is shown beside the buttons.
 */
export function approvalControls(receipt, done) {
  const by = h("input", { name: "by", placeholder: "your name", size: 14, required: true,
    value: sessionStorage.getItem(BY) || "" });
  const note = h("input", { name: "note", placeholder: "comment or reason", title: "optional", size: 28 });
  const message = h("div", { class: "message" });
  const decide = (verb, noteField) => async () => {
    const who = by.value.trim();
    if (!who) {
      show(message, h("p", { class: "problem", role: "alert" }, "Say who decides before approving or rejecting."));
      by.focus();
      return;
    }
    sessionStorage.setItem(BY, who);
    const body = { by: who };
    if (note.value.trim()) body[noteField] = note.value.trim();
    try {
      const answer = await post(`/v1/receipts/${receipt.id}/${verb}`, body);
      show(message, h("p", { class: "ok" }, `${verb === "approve" ? "Approved" : "Rejected"} by ${who}.`));
      await done(answer, verb, who);
    } catch (error) {
      // 409: decided meanwhile (by someone else, or it timed out); the detail says which.
      show(message, problemBox(error, error.status === 409 ? "Refresh to see the decision that was taken." : null));
    }
  };
  return h("div", { class: "approval", "data-approval-for": receipt.id },
    by, note,
    button("Approve", { "data-action": "approve", class: "primary" }, decide("approve", "comment")),
    button("Reject", { "data-action": "reject", class: "danger" }, decide("reject", "reason")),
    message);
}
