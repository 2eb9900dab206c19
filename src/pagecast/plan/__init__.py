"""Plans: per file, what to prefetch before a program runs and how (written by `pagecast plan`, run by the native launcher)."""
