"""Telemetry every process shares: trace context (:mod:`.tracing`), the fields a log line carries
(:mod:`.logfields`) and what each call's end tells the metrics and the logs (:mod:`.calls`).

The gateway, workers and webhooks each record their own figures; what they have in common lives here
so that no package imports another sideways.
"""
