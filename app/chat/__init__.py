"""Conversations: the chat store with its journal of the reply in progress."""
