"""The REST surface (routes under /api, /healthz, the OpenAPI document). Imports the core only."""
