"""Serving for the model service: XTML template and parser, engine loop, backends, API routes.

Layout: ``template`` / ``parser`` (the chat format), ``sampling`` / ``scheduler`` / ``engine`` /
``runner`` (the reference engine), ``prefix_cache`` (the seam the hybrid cache plugs into),
``protocol`` (OpenAI models), ``backends/`` (reference, openai, sglang, replay), ``routes``.
"""
