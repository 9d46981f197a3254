"""The verdicts: what a comparison of figures decides, and the roll-up of many verdicts into a headline."""
