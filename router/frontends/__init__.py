"""The client surfaces (front doors), each rendering the one pipeline in its own format.

Every door admits with `router.admission.admit`, routes with
`router.pipeline.route`, and renders the `Routed` result:

- `openai.py`    POST /v1/chat/completions, /completions, /embeddings, /responses
- `models.py`    GET /v1/models, /v1/models/{id}
- `messages.py`  POST /v1/messages (Anthropic); `anthropic*.py` are its pure conversions
- `responses.py` the Django responses every door shares (a relayed stream)

A new front door is one module here plus its routes in `router/api.py`.
"""
