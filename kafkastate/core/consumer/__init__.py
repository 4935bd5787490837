"""The sans-IO consumer: fetch sessions (KIP-227) and the fetcher machine."""
