"""The speculative engine: the decoding loop, drafters, sampling, the draft-length governor, the event
stream it yields, and the session that holds a loaded target/draft pair."""
