"""The receipt store: transitions and reads (:mod:`.calls`), sweeps, backlog figures, and their SQL."""
