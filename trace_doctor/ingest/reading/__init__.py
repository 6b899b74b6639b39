"""What every parser reads with: byte streams, JSON lines, lenient text, and bounded per-file warnings."""
