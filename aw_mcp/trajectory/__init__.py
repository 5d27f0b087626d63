"""The trajectory: typed, versioned JSON lines (call records, fault entries, tool listings), one writer and one
reader."""
