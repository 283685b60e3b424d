"""The Responses API frontend (`/v1/responses`)."""
