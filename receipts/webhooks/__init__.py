"""Webhook persistence: endpoints and secrets (the API side), the delivery queue (the dispatcher side), nudges."""
