"""Not a problem: shared code a benchmark checkout may hold next to its problems."""


def shape_of(x):
    return tuple(x.shape)
