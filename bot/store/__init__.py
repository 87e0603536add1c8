"""Layer 3, store: the tables (models), the database engine and migrations (db), the audit trail.

Imports layers 0–2 (errors, runtime, config) and the channel port's pure helpers.
"""
