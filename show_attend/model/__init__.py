"""The captioner's network, read in this order:

* :mod:`~show_attend.model.encoder` - the CNN whose feature grid is what attention looks at.
* :mod:`~show_attend.model.decoder` - the attention LSTM: soft or hard attention, gate, deep output.
* :mod:`~show_attend.model.captioner` - Show, Attend and Tell as one module: configs, forward, decode.
* :mod:`~show_attend.model.migrations` - older model files read as today's.
"""
