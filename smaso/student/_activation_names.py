"""The activations :func:`smaso.student.activations.get_activation` reads, in one place without torch (the
command line's ``--help`` and its error messages list them without importing torch)."""

from __future__ import annotations

#: Every form ``get_activation`` accepts: a name, or a name and its parameter (``swish:0.7``: beta in [0, 1];
#: ``leaky_relu:0.1``: the negative slope nu).
ACTIVATION_SPECS: tuple[str, ...] = ("relu", "silu", "swish:BETA", "leaky_relu:NU", "abs", "linear")


def activation_choices() -> str:
    """``"relu, silu, swish:BETA, leaky_relu:NU, abs or linear"``: the list for a message or a help text."""
    return ", ".join(ACTIVATION_SPECS[:-1]) + " or " + ACTIVATION_SPECS[-1]
