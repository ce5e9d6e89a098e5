"""The core of toolrelay: receipts, the tool catalogue, tenants, the webhook outbox and their store.

Everything above this package (gateway, workers, webhooks, the CLI) reads and writes state only
through it. Nothing here imports a higher package.
"""
