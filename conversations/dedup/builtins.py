"""The built-in intents every tenant starts with. Plain data, shared by the seeding service and the data
migration that seeds tenants created before conversations existed."""

from __future__ import annotations

BUILTIN_INTENTS: dict[str, dict] = {
    "greeting": {
        "behaviour": "smalltalk",
        "examples": [
            "hi",
            "hello",
            "hey there",
            "good morning",
            "good afternoon",
            "hello, how are you?",
        ],
    },
    "thanks": {
        "behaviour": "smalltalk",
        "examples": [
            "thanks",
            "thank you",
            "thank you very much",
            "thanks, that helps",
            "great, thanks a lot",
            "cheers",
        ],
    },
    "repeat": {
        "behaviour": "repeat",
        "examples": [
            "show me that again",
            "can you repeat that?",
            "show me the previous answer again",
            "what did you say before?",
            "say that again",
            "show the sources again",
        ],
    },
    "elaborate": {
        "behaviour": "elaborate",
        "examples": [
            "explain in more detail",
            "can you elaborate?",
            "say it differently",
            "explain that another way",
            "tell me more about that",
            "I don't understand, explain it more simply",
        ],
    },
}
