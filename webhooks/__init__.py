"""Webhooks: Standard Webhooks signing, the delivery dispatcher, retry policy and endpoint health."""
