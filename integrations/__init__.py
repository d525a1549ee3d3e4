"""magnetsdk.integrations: magnetsdk models inside other libraries (sentence-transformers, MTEB)."""
