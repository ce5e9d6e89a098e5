"""The HTTP gateway: a thin FastAPI app over the receipts store. It publishes tasks by name only."""
