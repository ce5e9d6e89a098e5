"""The web console at ``/console``: static pages that use the public HTTP API with the user's key."""
