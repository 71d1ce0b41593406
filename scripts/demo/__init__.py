"""The demo (``make demo``: ``python -m scripts.demo.run``): both apps trained on built-in data at once,
in two lanes, and a page of what they learned and where attention fails."""
