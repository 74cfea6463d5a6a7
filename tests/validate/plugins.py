"""A KIP-729-style validator used by the plugin-rule tests."""


def reject_odd_offsets(record):
    """Reject records at odd offsets, with a message."""
    return f"odd offset {record['offset']}" if record["offset"] % 2 else None
