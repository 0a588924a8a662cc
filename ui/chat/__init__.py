"""The chat: transcript, markdown rendering, prompt box, chat controller, comparison view and conversation list."""
