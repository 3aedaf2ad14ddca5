"""A turn from the question to the stored row: load (policy, state, candidates, history), decide once, answer or serve
the repeat, write; streaming, sources, the OpenAI-compatible form, and the conversation records a turn lives in."""
