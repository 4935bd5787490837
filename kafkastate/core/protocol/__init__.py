"""Wire codec: request/response framing, API version negotiation, record batches."""
