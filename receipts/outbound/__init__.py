"""What toolrelay sends on a user's behalf: the SSRF guard, api_call request templates, and the
credential headers sealed at rest."""
