"""The Textual face of loadscope (``loadscope.tui``): the only package that imports Textual."""
