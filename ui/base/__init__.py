"""What the chat, the picker and the stats share: the worker thread that owns the llama contexts, the
message bar and token styles."""
