"""Token-fate colours shared by the terminal and the GUI.

Okabe-Ito colours: distinguishable with the common forms of colour blindness, and each fate also
differs in lightness, so the overlay survives greyscale.
"""

from __future__ import annotations

from app.engine.events import TokenFate

FATE_COLOURS: dict[TokenFate, str] = {
    TokenFate.ACCEPTED: "#0072B2",  # blue: the draft guessed right
    TokenFate.CORRECTED: "#D55E00",  # vermillion: the target overruled the draft
    TokenFate.BONUS: "#009E73",  # bluish green: free extra token after a fully accepted draft
    TokenFate.TARGET: "#7F7F7F",  # neutral: plain decoding, nothing to verify
    TokenFate.PREDICTED: "#CC79A7",  # reddish purple: accepted from the request's predicted output
    # yellow: accepted from the target's own MTP head (sky blue, tried first, read as the draft's blue when tinted)
    TokenFate.MTP: "#F0E442",
}
GHOST_COLOUR = "#999999"  # rejected draft tokens, struck through

FATE_LABELS: dict[TokenFate, str] = {
    TokenFate.ACCEPTED: "accepted from the draft",
    TokenFate.CORRECTED: "corrected by the target",
    TokenFate.BONUS: "bonus token",
    TokenFate.TARGET: "plain target token",
    TokenFate.PREDICTED: "accepted from the prediction",
    TokenFate.MTP: "accepted from the MTP head",
}


def hex_to_rgb(colour: str) -> tuple[int, int, int]:
    value = colour.lstrip("#")
    return int(value[0:2], 16), int(value[2:4], 16), int(value[4:6], 16)
