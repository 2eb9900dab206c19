"""Views of a trace: summaries and plots."""
