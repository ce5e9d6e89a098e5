"""The catalogue: tools (global and per tenant), integration provider methods, and tenants' provider setups."""
