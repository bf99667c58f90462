"""The lab's hardware simulator (runs inside lab hosts; see simhw.py)."""
