"""The bottom layer: pure pieces every other layer may use (errors, naming rules, records, tokens, config)."""
