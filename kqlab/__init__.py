"""kqlab."""
