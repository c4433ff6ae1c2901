"""Stored responses: the Responses API's state (docs/responses.md).

- `keeper.py`   the OpenAI door's answer keeper for `responses`: a
                `previous_response_id` becomes the stored conversation before
                routing (any backend, native or bridged); a `store`d answer is
                handed to the writer once it is complete
- `writer.py`   the bounded queue of answers to store, drained off the event
                loop on this app's DB thread (`db.py`)
- `items.py`    pure: items as the client sent them → stored items (ids);
                stored items → what an upstream is sent; list pages
- `door.py`     GET / DELETE /v1/responses/{id}, GET …/{id}/input_items
                (its own ASGI door, off the inference hot path)
- `tasks.py`    `responsestore.prune` (beat): rows past the retention go
"""
