"""Workers: the Celery app, the ``@tool`` registry, tool execution with timeouts and retries, the sweeper."""
