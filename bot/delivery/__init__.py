"""Layer 4, delivery: getting sends to the providers and keeping their bookkeeping small.

The durable outbox (the one owner of retries and throttling), the set of live channel
adapters, and the pruning of finished delivery rows. Imports layers 0–3 and channels/.
"""
