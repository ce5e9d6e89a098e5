// Approve or reject a receipt waiting for a person's decision (POST /v1/receipts/{id}/approve|reject).

import { post } from "./api.js";
import { button, h, problemBox, show } from "./dom.js";

const BY = "toolrelay.decided_by";

/** Whether the receipt waits for an approval decision. */
export function awaitsApproval(receipt) {
  return receipt.status === "waiting" && receipt.approval && receipt.approval.state === "requested";
}

/**
 * The decision controls: who decides, a note, [data-action=approve] and [data-action=reject].
 * `done(receipt)` gets the receipt as the API answered; a problem is shown beside the buttons.
 */
export function approvalControls(receipt, done) {
  const by = h("input", { name: "by", placeholder: "your name", size: 14, required: true,
    value: sessionStorage.getItem(BY) || "" });
  const note = h("input", { name: "note", placeholder: "comment or reason (optional)", size: 28 });
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
      await done(answer);
    } catch (error) {
      if (error.status === 404) {
        show(message, problemBox(error, "This server does not take approval decisions (or no longer knows this receipt)."));
      } else {
        show(message, problemBox(error));
      }
    }
  };
  return h("div", { class: "approval", "data-approval-for": receipt.id },
    by, note,
    button("Approve", { "data-action": "approve", class: "primary" }, decide("approve", "comment")),
    button("Reject", { "data-action": "reject", class: "danger" }, decide("reject", "reason")),
    message);
}
