"""The agent's own library: token counting, context packing, cold-start documents.

No Django here (yet): everything is plain Python that the agent loop and its tests import.
"""
