"""Chaos as a script: toolrelay in production shape under steady load while its services crash.

Run ``.venv/bin/python -m tests.chaos --help``. Figures, not a timed test: pytest collects nothing
here (no ``test_*`` files); ``tests/integration/test_chaos_short.py`` runs a short form.
"""
