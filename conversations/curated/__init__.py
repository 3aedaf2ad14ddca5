"""A tenant's curated answers: the import format and the writes (the set a turn reads is `turn.curated_set`)."""
