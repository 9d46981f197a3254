"""The verdicts: the one vocabulary, the rules that decide from the figures core/stats/ computes, the roll-up."""
