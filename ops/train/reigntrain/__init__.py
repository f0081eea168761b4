"""Train a REIGN encoder over chunk embeddings cached by reignpipe.

The trainer never runs the Guidance Network: it reads the chunk-embedding shards of a
reignpipe cache and a sequences index (document id, side, ordered window keys) exported by
`reignpipe train`, and writes checkpoints in the reference layout that stages/reign loads.
"""
