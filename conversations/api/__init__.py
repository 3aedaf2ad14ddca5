"""The REST endpoints of the app: conversations and turns, curated answers, the OpenAI-compatible chat."""
