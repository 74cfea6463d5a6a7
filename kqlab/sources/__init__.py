"""Where samples come from: log segments, snapshots, live topics and the built-in demo data."""
