"""The duplicate decision's rules: pure functions on a question pair and the recent turns, the pair features, the
shipped head that reads them (its weights beside `duplicate_model.py`), the intents, the question collections' names."""
