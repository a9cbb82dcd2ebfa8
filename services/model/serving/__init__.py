"""Serving for the model service: XTML template and parser, engine loop, backends, API routes.

Layout: ``template`` / ``parser`` (the chat format), ``sampling`` / ``scheduler`` / ``engine`` /
``runner`` (the reference engine), ``prefix_cache`` (the seam), ``pool`` (the one paged pool),
``hybrid_cache`` (the KDA-aware prefix cache), ``admission`` (request classes), ``offline``
(a synchronous greedy driver), ``router`` (session affinity over replicas), ``protocol``
(OpenAI models), ``backends/`` (reference, openai, sglang, replay), ``routes``.
"""
