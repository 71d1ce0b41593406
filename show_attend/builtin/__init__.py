"""The captioner's built-in world: scenes of coloured shapes with exact captions and object boxes,
written as a Karpathy split file (``show-attend prepare shapes``):

* :mod:`~show_attend.builtin.shapes` - drawing the scenes and writing their captions.
"""
