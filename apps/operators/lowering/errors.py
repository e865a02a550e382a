"""The one exception the lowering raises."""


class LoweringError(Exception):
    """The model cannot be lowered to C. The message names the reason, usually the ATen op."""
