"""ECP5 synthesis + place-and-route of the RTL tops (``python -m synth.run``, ``make synth``)."""
