"""Options for a `pagecast train` small enough for a test (one short epoch, a tiny model)."""

TINY_TRAIN = ["--epochs", "1", "--windows-per-epoch", "256", "--horizon", "8", "--vocab", "64", "--json"]
