"""HTTP frontends: they translate client requests to canonical ones and render canonical events."""
