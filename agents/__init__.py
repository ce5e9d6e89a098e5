"""What agents speak, as pure functions: the vendors' tool-call and tool-result formats, content for a
model (with truncation), and the agent loop's rules. No HTTP routes, no Celery, no network: the
gateway and the workers call these; they read and write state only through ``receipts``.
"""
